"""The conversion pipeline: a :class:`BlockSource` -> chunk-aligned blocks -> a dataset.

Blocks are whole chunks (``block_chunks`` chunks each, the last one possibly short): the tasks
of the one conversion engine (:mod:`~chunkio.convert.engine.core`), written through its one writer
protocol (:mod:`~chunkio.convert.engine.writing`) into a destination staged, resumed and published
by :mod:`~chunkio.convert.durability.staging`.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..backends import Format, Writer, detect_format, storage_for
from ..errors import SourceError
from ..format.grid import SampleGrid
from ..format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, FieldInfo
from ..util.deprecated import moved_keywords
from ..util.numeric import ceil_div
from .durability.plan import ConversionPlan
from .durability.rerun import REQUEST_KEY, Request, compression_option, display, reuse_complete
from .durability.staging import Destination, open_destination
from .engine.blocks import Block, BlockJob, block_syncs, block_writes
from .engine.chunking import DEFAULT_CHUNK_BYTES, chunk_samples
from .engine.core import drive
from .engine.kinds import FieldWrites, write_kind
from .engine.workers import Work, worker_count
from .engine.writing import Sync, start_writer, write_here, write_target
from .options import (
    DEFAULT_EXECUTION,
    DEFAULT_OUTPUT,
    ConversionOptions,
    Execution,
    Output,
    Progress,
    moved,
)
from .shuffle.spill import staged_source
from .source import BlockSource, ConversionResult

__all__ = ["BlockSource", "ConversionResult", "convert_source", "run_conversion"]


@moved_keywords(
    "run_conversion",
    moved(
        "format",
        "samples_per_chunk",
        "compression",
        "extra",
        "workers",
        "client",
        "progress",
        "overwrite",
    ),
)
def run_conversion(
    source: BlockSource,
    dst: Any,
    *,
    class_names: Sequence[str] | None = None,
    output: Output | None = None,
    execution: Execution | None = None,
    block_chunks: int = 1,
    request: Request | None = None,
    pack: bool = False,
) -> ConversionResult:
    """Convert ``source`` into a chunkio dataset at ``dst``; resume an interrupted run.

    Rerunning a finished conversion returns at once (``result.unchanged``) when ``dst`` holds
    the dataset this same call made; see :mod:`chunkio.convert.durability.rerun`. The keywords that
    moved into :class:`Output` (``format``, ``samples_per_chunk`` -> ``chunks``,
    ``compression``, ``extra``) and :class:`Execution` (``workers``, ``client``,
    ``progress``, ``overwrite``) are still accepted for one release, with a
    ``DeprecationWarning``.

    Parameters
    ----------
    source
        The samples (a :class:`BlockSource`).
    dst
        A local path (``.zarr`` directory or ``.h5`` file; built atomically and resumably, see
        :mod:`chunkio.convert.durability.staging`), a ``memory://NAME``, a URL zarr understands, or
        a zarr
        Store (the last three are written in place; the completion marker alone says done).
    class_names
        Stored in the format attributes.
    output
        :class:`Output`: format (by default from ``dst``), ``chunks`` (samples per chunk; by
        default about ``chunk_bytes`` of the largest field's samples), the codec, level and
        checksum (on by default) of every chunk, ``extra`` attributes (JSON-serialisable).
    execution
        :class:`Execution`: worker processes (by default one per core for sources of at
        least :data:`~chunkio.convert.engine.workers.POOL_MIN_BYTES` decoded bytes, else this
        process; a ``forkserver``/``spawn`` pool), or a ``dask.distributed.Client``; a
        progress bar counting samples; overwriting (locally, the old dataset is replaced only
        once the new one is complete).
    block_chunks
        Chunks per block: the unit of work, of resume, and of memory per block in flight.
    request
        What a rerun compares with the record of a complete ``dst``; by default
        ``source.fingerprint()`` and the options above that shape the result. Converters
        built on this function pass their own (a cheap listing, their own options).
    pack
        Zarr: write the fields in shards of about 64 MiB of the largest field (blocks own
        whole shards), and before publishing merge small fields' shards and pack arrays of
        small chunk files (labels, paths, the bytes of encoded images...) into shards, most
        often one file per small field (:mod:`chunkio.backends.zarr.pack`);
        ``convert_images`` does.

    Returns
    -------
    ConversionResult

    Raises
    ------
    SourceError
        The source returned bad data; the message names the block.
    ConversionError
        A block failed otherwise (a worker died, the disk is full, ...). Finished blocks are
        kept: rerunning the same call resumes.
    DestinationBusyError, DestinationExistsError
        See :func:`chunkio.convert.durability.staging.open_destination` and
        :func:`~chunkio.convert.durability.rerun.reuse_complete`.
    """
    output = DEFAULT_OUTPUT if output is None else output
    samples_per_chunk = output.samples_per_chunk("run_conversion")
    if samples_per_chunk is None and output.chunk_bytes != DEFAULT_CHUNK_BYTES:
        samples_per_chunk = chunk_samples(
            source.fields, source.num_samples, None, output.chunk_bytes
        )
    options = ConversionOptions(
        format=output.format,
        samples_per_chunk=samples_per_chunk,
        compression=output.compression_codec(),
        class_names=None if class_names is None else tuple(class_names),
        extra=output.extra or {},
        execution=DEFAULT_EXECUTION if execution is None else execution,
        block_chunks=block_chunks,
        request=request,
        pack=pack,
    )
    return convert_source(source, dst, options)


@dataclass(frozen=True)
class _Prepared:
    """What a conversion writes, planned before ``dst`` is touched."""

    layout: DatasetLayout
    plan: ConversionPlan
    #: how each field is written, in the layout's order (:mod:`.engine.kinds`)
    kinds: tuple[FieldWrites, ...]
    blocks: list[Block]
    request: Request

    def result(
        self, path: str, todo: int, started: float, *, unchanged: bool = False
    ) -> ConversionResult:
        return ConversionResult.of_layout(
            path,
            self.plan.format,
            self.layout,
            resumed_blocks=len(self.blocks) - todo,
            written_blocks=todo,
            seconds=time.perf_counter() - started,
            unchanged=unchanged,
        )


def convert_source(source: BlockSource, dst: Any, options: ConversionOptions) -> ConversionResult:
    """:func:`run_conversion` with its options checked (the converters' way in)."""
    started = time.perf_counter()
    num_samples, fields = _check_source(source)
    if options.execution.workers is None:  # run_conversion's default: a pool where it pays
        nbytes = num_samples * sum(f.sample_nbytes for f in fields)
        count = worker_count(
            None, client=options.execution.client, work=lambda: Work(nbytes=nbytes)
        )
        options = replace(options, execution=replace(options.execution, workers=count))
    fmt: Format = options.format or detect_format(dst)
    storage_for(fmt)  # a ValueError naming the formats for any other
    prep = _prepare(source, fmt, num_samples, fields, options)
    if reuse_complete(dst, fmt, prep.request, overwrite=options.execution.overwrite) is not None:
        return prep.result(display(dst), 0, started, unchanged=True)
    with open_destination(dst, prep.plan, overwrite=options.execution.overwrite) as dest:
        writer = start_writer(dest, prep.layout.to_attrs(), lambda w: _create_arrays(w, dest, prep))
        try:
            todo = [
                b
                for b in prep.blocks
                if not dest.done_chunks.issuperset(range(b.first_chunk, b.stop_chunk))
            ]
            # an external shuffle spills the source first (pass 1), then blocks read the spill
            with staged_source(source, dest, todo, options) as reads:
                _write_blocks(reads, dest, writer, prep, todo, options)
            # The layout again (class names and extra may differ from the first run's) with
            # the request that made it, then the completion marker, strictly last.
            layout = prep.layout
            writer.set_attrs(
                {ATTR_KEY: layout.to_attrs(), REQUEST_KEY: prep.request.record(layout)}
            )
            writer.set_attrs({COMPLETE_KEY: True})
        finally:
            writer.close()
        dest.commit(pack=options.pack)
    return prep.result(dest.display, len(todo), started)


def _prepare(
    source: BlockSource,
    fmt: Format,
    num_samples: int,
    fields: tuple[FieldInfo, ...],
    options: ConversionOptions,
) -> _Prepared:
    samples_per_chunk = chunk_samples(fields, num_samples, options.samples_per_chunk)
    layout = DatasetLayout(
        num_samples=num_samples,
        samples_per_chunk=samples_per_chunk,
        fields=fields,
        class_names=options.class_names,
        extra=dict(options.extra),
    )
    shard_chunks = _shard_chunks(layout, fmt, source) if options.pack else 1
    grid = SampleGrid(layout.num_samples, layout.samples_per_chunk)
    kinds = tuple(write_kind(f).plan(f, source, grid, shard_chunks) for f in layout.fields)
    fingerprint = str(source.fingerprint()) + _placement(kinds)
    plan = ConversionPlan(
        fmt, fields, num_samples, samples_per_chunk, options.compression, fingerprint, shard_chunks
    )
    block_chunks = options.block_chunks
    if shard_chunks > 1:  # writers own whole shards of the large fields
        block_chunks = shard_chunks * max(1, block_chunks // shard_chunks)
    request = options.request or Request("blocks", fingerprint, _options(plan, layout))
    return _Prepared(layout, plan, kinds, _blocks(plan, block_chunks), request)


@dataclass(frozen=True)
class _BlockSink:
    """Blocks into a staged destination: written here when a worker returned them, then
    recorded in the manifest (only once their chunks are durable)."""

    dest: Destination
    writer: Writer
    job: BlockJob

    def write(self, block: Block, data: dict[str, Any] | None) -> None:
        if data is None:  # the engine calls write only for blocks a worker did not write
            raise RuntimeError(f"block {block.first_chunk}..{block.stop_chunk}: no data to write")
        writes = block_writes(self.job, block, data)
        write_here(self.dest, self.writer, writes, block_syncs(self.job, block))

    def done(self, block: Block, data: dict[str, Any] | None) -> int:
        self.dest.record(block.first_chunk, block.stop_chunk)
        return block.stop - block.start


def _write_blocks(
    source: BlockSource,
    dest: Destination,
    writer: Writer,
    prep: _Prepared,
    todo: list[Block],
    options: ConversionOptions,
) -> None:
    execution = options.execution
    target = write_target(dest, parallel=execution.parallel)
    job = BlockJob(source, prep.layout.fields, target, prep.kinds)
    num_samples = prep.layout.num_samples
    progress = Progress(
        total=num_samples,
        unit="sample",
        label=_label(dest.location),
        show=options.execution.progress,
        done=num_samples - sum(b.stop - b.start for b in todo),
        scale=True,
    )
    drive(
        job,
        todo,
        execution=execution,
        sink=_BlockSink(dest, writer, job),
        progress=progress,
        destination=dest.display,
    )


def _options(plan: ConversionPlan, layout: DatasetLayout) -> dict[str, Any]:
    """What a plain :func:`run_conversion` compares on a rerun, besides the source."""
    return {
        "format": plan.format,
        "samples_per_chunk": plan.samples_per_chunk,
        "compression": compression_option(plan.compression),
        "class_names": None if layout.class_names is None else list(layout.class_names),
        "extra": dict(layout.extra),
    }


def _label(location: Any) -> str:
    if isinstance(location, str):
        return os.path.basename(location.rstrip("/")) or location
    return type(location).__name__


def _check_source(source: BlockSource) -> tuple[int, tuple[FieldInfo, ...]]:
    n = source.num_samples
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise SourceError(f"source.num_samples must be an int >= 0; got {n!r}")
    fields = tuple(source.fields)
    if not fields or not all(isinstance(f, FieldInfo) for f in fields):
        raise SourceError(f"source.fields must be a non-empty tuple of FieldInfo; got {fields!r}")
    for f in fields:
        write_kind(f).check_source(f, source)
    return int(n), fields


#: a field whose decoded chunks are at least this large makes the conversion write shards
#: directly (see _shard_chunks); without one, chunk files are packed at publication
DIRECT_SHARD_CHUNK_BYTES = 256 << 10
#: decoded bytes per shard of the large fields
SHARD_BYTES = 64 << 20


def _shard_chunks(layout: DatasetLayout, fmt: Format, source: BlockSource) -> int:
    """Sample chunks per shard of the large fields: about :data:`SHARD_BYTES`, at most all.

    Large: a dense field whose chunks decode to :data:`DIRECT_SHARD_CHUNK_BYTES` or more, or
    a ragged, sparse or encoded one whose chunks do on average (images of mixed sizes; encoded
    images count decoded; a sparse field its stored values). Every dense field is then
    written in shards of that many chunks, blocks owning whole shards; the small fields'
    shards are merged at publication
    (:mod:`chunkio.backends.zarr.pack`)."""
    if not storage_for(fmt).shards:
        return 1
    spc = layout.samples_per_chunk
    large = [write_kind(f).chunk_nbytes(f, source, spc) for f in layout.fields]
    largest = max((b for b in large if b >= DIRECT_SHARD_CHUNK_BYTES), default=0)
    if not largest:
        return 1
    num_chunks = ceil_div(layout.num_samples, spc)
    return max(1, min(num_chunks, SHARD_BYTES // largest))


def _blocks(plan: ConversionPlan, block_chunks: int) -> list[Block]:
    grid = plan.grid
    out = []
    for first in range(0, grid.num_chunks, block_chunks):
        stop = min(first + block_chunks, grid.num_chunks)
        out.append(Block(grid.bounds(first)[0], grid.bounds(stop - 1)[1], first, stop))
    return out


def _placement(kinds: tuple[FieldWrites, ...]) -> str:
    """What a resumed conversion must agree on besides the source: where the values of ragged
    and sparse fields (``:ragged=``) and the bytes of encoded ones (``:encoded=``) go."""
    placed = sorted(
        (p for p in (k.placement() for k in kinds) if p is not None), key=lambda p: p[:2]
    )
    out = ""
    for tag in ("ragged", "encoded"):
        parts = [data for t, _, data in placed if t == tag]
        if parts:
            out += f":{tag}={hashlib.sha256(b''.join(parts)).hexdigest()}"
    return out


def _create_arrays(writer: Writer, dest: Destination, prep: _Prepared) -> None:
    """Create every array; write those written whole at creation (ragged and sparse offsets
    and shapes, encoded shapes) and make them durable."""
    layout, compression = prep.layout, prep.plan.compression
    shard_chunks = prep.plan.shard_chunks
    writes: list[tuple[str, int, Any]] = []
    syncs: list[Sync] = []
    for kind in prep.kinds:
        more, durable = kind.create(writer, layout.num_samples, compression, shard_chunks)
        writes, syncs = writes + more, syncs + durable
    write_here(dest, writer, writes, syncs)
