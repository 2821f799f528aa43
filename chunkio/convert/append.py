"""``append_arrays``: add samples to the end of a complete local chunkio dataset, atomically.

Strategy: *stage a copy, then swap*. Readers of the dataset - and a process killed at any
point - see either the old dataset or the new one, never a mix:

1. take the destination's lock (the one conversions take: appends and conversions exclude
   each other);
2. build the new version in the sibling ``.NAME.chunkio-append/data``:

   The copy is the backend's :meth:`~chunkio.backends.Storage.copy_for_growth`:

   * Zarr: every file of the old group is *hard-linked* into the copy (``zarr.json`` files
     are copied). zarr's LocalStore replaces a file by writing a temporary one and renaming
     it, so writing the copy never changes a byte the old version's links point to. The
     arrays are resized, and only the old last (partial) chunk plus the new chunks are
     written: the cost is the appended data, not the dataset.
   * HDF5: a new file whose arrays have the old creation properties (compression, checksum,
     chunking); the old full chunks are copied as raw, still-compressed bytes
     (``read_direct_chunk``/``write_direct_chunk``: nothing is decoded), then the old partial
     chunk and the new samples are written. HDF5 cannot grow a fixed-size dataset in place.

3. write the layout with the new ``num_samples`` and then the completion marker, fsync;
4. seal (HDF5: the canonical rewrite every conversion gets, so equal content gives equal
   bytes) and publish with the step conversions use (:func:`.durability.staging.publish`): an
   HDF5 file with ``os.replace``; a Zarr directory by exchanging the two directories with
   ``renameat2(RENAME_EXCHANGE)`` (Linux), else with two renames. Should a process die
   between those two renames, the next ``append_arrays`` on the same path puts the old
   version back first (``.NAME.chunkio-append/replaced``), so rerunning the append applies
   it exactly once.

A copy left by a killed append was never published and is discarded by the next one.
Appends are not resumable: rerun them whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Format, Writer, detect_format, open_reader, open_writer, storage_for
from ..errors import ConversionError, DatasetNotFoundError, SourceError
from ..format.kinds import kind_of
from ..format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout
from ..util.fsync import fsync_path
from ..util.messages import listing
from ..util.numeric import ceil_div
from .array_source import ArraySource
from .durability.locking import DestinationLock
from .durability.staging import REPLACED, is_local, publish
from .engine.core import drive
from .engine.workers import Work, worker_count
from .engine.writing import apply_writes
from .options import DEFAULT_EXECUTION, Execution, Progress
from .shuffle.order import ORDER_KEY, SOURCE_INDEX, ShuffledSource, check_order_options
from .source import BlockSource, ConversionResult

__all__ = ["append_arrays"]

#: samples per block written from the new arrays, in chunks (memory: a few chunks at a time)
_BLOCK_CHUNKS = 4


def append_arrays(
    dst: Any,
    arrays: Mapping[str, Any],
    *,
    shuffle: bool | None = None,
    seed: int = 0,
    execution: Execution | None = None,
) -> ConversionResult:
    """Append samples to the complete dataset at ``dst``; readers see all of it or none.

    Parameters
    ----------
    dst
        A local ``.zarr`` directory or ``.h5`` file written by chunkio.
    arrays
        Field name -> array of new samples (axis 0), for exactly the dataset's fields, with
        their sample shapes and dtypes that cast to the stored ones without loss. NumPy,
        dask, h5py or zarr arrays, as for :func:`~chunkio.convert.write_arrays`. Not
        ``source_index``: chunkio fills it in.
    shuffle, seed
        Store the K new samples in the order ``perm = np.random.default_rng(seed).permutation(K)``
        (shuffled among themselves only: the old rows stay where they are). By default
        (``None``) they are shuffled if the dataset has a ``source_index`` field, i.e. was
        written shuffled. Where it has one, the new rows get ``source_index = n + perm`` (or
        ``n + arange(K)`` with ``shuffle=False``), ``n`` the old number of samples: positions in
        the concatenation of everything written so far. ``shuffle=True`` into a dataset without
        ``source_index`` is refused (the order could not be mapped back). Each append is
        recorded in ``extra["order"]["appends"]``.
    execution
        :class:`~chunkio.Execution`, as for :func:`~chunkio.convert.write_arrays`: worker
        processes (or a client) that read the new samples, by default none for NumPy arrays
        (nothing to read) and up to one per core for other inputs of at least
        :data:`~chunkio.convert.engine.workers.POOL_MIN_BYTES`; this process writes the copy. A
        progress bar counting blocks. Not ``overwrite``: an append never replaces a dataset.

    Returns
    -------
    ConversionResult
        ``num_samples`` is the new total; ``written_blocks`` the blocks written.

    Raises
    ------
    SourceError
        The new samples do not match the dataset's fields.
    TypeError, ValueError
        A bad ``shuffle`` or ``seed``; ``shuffle=True`` for a dataset without ``source_index``.
    DestinationBusyError
        A conversion or another append holds the destination.
    ConversionError
        The destination is not a local path, or writing failed (the old dataset is intact).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from chunkio import ChunkDataset, Output, write_arrays
    >>> path = os.path.join(tempfile.mkdtemp(), "a.zarr")
    >>> _ = write_arrays(path, {"x": np.arange(5)}, shuffle=False, output=Output(chunks=2))
    >>> append_arrays(path, {"x": np.arange(5, 8)}).num_samples
    8
    >>> ChunkDataset(path, fields="x").read_batch(range(8))["x"].tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]

    Shuffled (``write_arrays``' default), ``source_index`` continues across appends:

    >>> path = os.path.join(tempfile.mkdtemp(), "b.zarr")
    >>> _ = write_arrays(path, {"x": np.arange(5) * 10}, output=Output(chunks=2))
    >>> _ = append_arrays(path, {"x": np.arange(5, 8) * 10})
    >>> b = ChunkDataset(path, fields=("x", "source_index")).read_batch(range(8))
    >>> b["source_index"].tolist(), b["x"].tolist()
    ([2, 4, 3, 0, 1, 7, 5, 6], [20, 40, 30, 0, 10, 70, 50, 60])
    """
    started = time.perf_counter()
    path = is_local(dst)
    if path is None:
        raise ConversionError(f"append_arrays needs a local .zarr or .h5 path; got {dst!r}")
    check_order_options(True if shuffle is None else shuffle, seed)
    execution = DEFAULT_EXECUTION if execution is None else execution
    if execution.overwrite:
        raise ValueError(
            "append_arrays adds samples to the dataset at dst and never replaces it; got "
            "Execution(overwrite=True)"
        )
    given = ArraySource(arrays)
    nbytes = given.num_samples * sum(f.sample_nbytes for f in given.fields)
    asked = execution.workers is not None  # as write_arrays: by default, by the bytes to read
    work = Work(nbytes=None if asked else nbytes, reads=not given.in_memory)
    count = worker_count(execution.workers, client=execution.client, work=lambda: work)
    execution = replace(execution, workers=count)
    parent, name = os.path.split(path)
    staging = os.path.join(parent, f".{name}.chunkio-append")
    lock = DestinationLock(os.path.join(parent, f".{name}.chunkio-lock"), path)
    lock.acquire()
    try:
        _restore_interrupted_swap(path, staging)
        fmt, layout = _read_layout(path)
        source = _ordered(given, layout, path, shuffle=shuffle, seed=seed)
        _check_source(source, layout, path)
        new = DatasetLayout(
            num_samples=layout.num_samples + source.num_samples,
            samples_per_chunk=layout.samples_per_chunk,
            fields=layout.fields,
            class_names=layout.class_names,
            extra=_appended_extra(layout, source),
        )
        blocks = 0
        if source.num_samples:  # nothing to append: the dataset stays as it is
            blocks = _append(fmt, path, staging, layout, new, source, execution)
    finally:
        lock.release()
    seconds = time.perf_counter() - started
    return ConversionResult.of_layout(
        path, fmt, new, resumed_blocks=0, written_blocks=blocks, seconds=seconds
    )


def _ordered(
    given: ArraySource, layout: DatasetLayout, path: str, *, shuffle: bool | None, seed: int
) -> BlockSource:
    """The new samples in the order they are stored, with ``source_index`` where kept."""
    indexed = SOURCE_INDEX in layout.field_names
    if SOURCE_INDEX in {f.name for f in given.fields} and indexed:
        raise SourceError(
            f"{path}: do not pass {SOURCE_INDEX!r}: append_arrays fills it in (old number of "
            "samples + each new sample's position)"
        )
    if shuffle is None:
        shuffle = indexed
    if not indexed:
        if shuffle:
            raise ValueError(
                f"{path}: shuffle=True needs a {SOURCE_INDEX!r} field to record the order, and "
                f"this dataset (written in source order) has none; got shuffle={shuffle!r}: "
                "pass shuffle=False, or shuffle the new samples yourself"
            )
        return given
    return ShuffledSource(given, seed if shuffle else None, offset=layout.num_samples)


def _appended_extra(layout: DatasetLayout, source: BlockSource) -> dict[str, Any]:
    """``extra`` plus this append in ``extra["order"]["appends"]``."""
    extra = dict(layout.extra)
    seed = source.seed if isinstance(source, ShuffledSource) else None
    order = extra.get(ORDER_KEY)
    order = dict(order) if isinstance(order, Mapping) else {"shuffled": False, "seed": None}
    start = layout.num_samples
    appends = [*order.get("appends", [])]
    entry: dict[str, Any] = {
        "start": start,
        "stop": start + source.num_samples,
        "shuffled": seed is not None,
        "seed": seed,
    }
    if isinstance(source, ShuffledSource) and source.order.method == "keyed":
        entry["method"] = "keyed"
    appends.append(entry)
    order["appends"] = appends
    extra[ORDER_KEY] = order
    return extra


def _append(
    fmt: Format,
    path: str,
    staging: str,
    layout: DatasetLayout,
    new: DatasetLayout,
    source: BlockSource,
    execution: Execution,
) -> int:
    """Build the new version in ``staging`` and swap it in; returns the blocks written."""
    _reset(staging)
    data = os.path.join(staging, "data")
    try:
        blocks = _build(fmt, path, data, layout, new, source, execution)
        storage_for(fmt).seal(data, os.path.join(staging, "canonical"))
        publish(data, path, staging)
    except OSError as err:  # ENOSPC and friends: the old version is still in place
        raise ConversionError(
            f"{path}: appending {source.num_samples} samples failed "
            f"({type(err).__name__}: {err}); the dataset is unchanged"
        ) from err
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(staging)
    return blocks


def _read_layout(path: str) -> tuple[Format, DatasetLayout]:
    if not os.path.lexists(path):
        raise DatasetNotFoundError(f"no dataset at {path} to append to")
    fmt = detect_format(path)
    reader = open_reader(path)
    try:
        layout = DatasetLayout.from_attrs(reader.attrs(), where=path)
        for f in layout.fields:  # also checks each array's codecs/filters are safe
            reader.array_info(f.roles.data)
    finally:
        reader.close()
    if storage_for(fmt).in_memory:
        raise ConversionError(f"{path}: append_arrays needs a dataset on disk; got {fmt}")
    return fmt, layout


def _check_source(source: BlockSource, layout: DatasetLayout, path: str) -> None:
    ragged = [f"{f.name} ({f.kind})" for f in layout.fields if kind_of(f.kind).flat]
    if ragged:
        raise ConversionError(
            f"{path}: cannot append to ragged, sparse or encoded fields: {ragged}"
        )
    given = {f.name: f for f in source.fields}
    if set(given) != set(layout.field_names):
        raise SourceError(
            f"{path}: append needs exactly the fields {listing(sorted(layout.field_names))}; "
            f"got {listing(sorted(given))}"
        )
    for f in layout.fields:
        g = given[f.name]
        if g.sample_shape != f.sample_shape:
            raise SourceError(
                f"{path}: field {f.name!r} holds samples of shape {f.sample_shape}; "
                f"got {g.sample_shape}"
            )
        if not np.can_cast(g.dtype, f.dtype, "safe"):
            raise SourceError(
                f"{path}: field {f.name!r} is stored as {f.dtype}; got {g.dtype}, which "
                "does not cast to it without loss"
            )


def _restore_interrupted_swap(path: str, staging: str) -> None:
    """A process died between the two renames of a publish: put the old version back."""
    replaced = os.path.join(staging, REPLACED)
    if not os.path.lexists(path) and os.path.isdir(replaced):
        os.rename(replaced, path)
        fsync_path(os.path.dirname(path))


def _reset(staging: str) -> None:
    if os.path.isdir(staging) and not os.path.islink(staging):
        shutil.rmtree(staging)  # a killed append's copy: never published
    elif os.path.lexists(staging):
        os.unlink(staging)
    os.mkdir(staging)


# -- building the new version ---------------------------------------------------------------


@dataclass(frozen=True)
class _TailBlock:
    """Rows ``start ..`` of the new arrays: new samples ``pos .. stop``, after the old partial
    chunk's rows in the first block."""

    start: int
    pos: int
    stop: int

    def describe(self) -> str:
        return f"new samples {self.pos}..{self.stop - 1} (rows from {self.start})"


def _tail_blocks(source: BlockSource, old: DatasetLayout) -> list[_TailBlock]:
    """Chunk-aligned blocks: the old partial chunk, then new rows.

    The first block fills the old partial chunk up (its old rows first); the others are
    ``_BLOCK_CHUNKS`` whole chunks, the last one ending at the new end of the arrays.
    """
    spc = old.samples_per_chunk
    kept = old.num_samples % spc  # rows of the old partial chunk, rewritten in block one
    start = old.num_samples - kept
    pos, out = 0, []
    while pos < source.num_samples:
        size = spc - kept if pos == 0 and kept else spc * _BLOCK_CHUNKS
        stop = min(source.num_samples, pos + size)
        out.append(_TailBlock(start, pos, stop))
        start += stop - pos + (kept if pos == 0 else 0)
        pos = stop
    return out


@dataclass(frozen=True)
class _AppendJob:
    """Reads a block of new samples, cast to the stored dtypes (after the old tail's rows)."""

    source: BlockSource
    old: DatasetLayout
    tail: dict[str, npt.NDArray[Any]]

    def run(self, task: _TailBlock) -> dict[str, npt.NDArray[Any]]:
        rows = self.source.read_block(task.pos, task.stop)
        block = {f.name: rows[f.name].astype(f.dtype, copy=False) for f in self.old.fields}
        if task.pos == 0 and self.tail:
            block = {name: np.concatenate([self.tail[name], b]) for name, b in block.items()}
        return block

    def written(self, result: Any) -> bool:
        return False  # the calling process writes the copy


@dataclass(frozen=True)
class _AppendSink:
    """Blocks into the copy; made durable together at the end (not resumable)."""

    writer: Writer

    def write(self, task: _TailBlock, block: dict[str, npt.NDArray[Any]]) -> None:
        apply_writes(self.writer, [(name, task.start, rows) for name, rows in block.items()])

    def done(self, task: _TailBlock, block: dict[str, npt.NDArray[Any]]) -> int:
        return 1


def _old_tail(path: str, layout: DatasetLayout) -> dict[str, npt.NDArray[Any]]:
    """The rows of the old last chunk if it is partial (they are rewritten with new rows)."""
    spc, n = layout.samples_per_chunk, layout.num_samples
    if n % spc == 0:
        return {}
    reader = open_reader(path)
    try:
        out = {}
        for f in layout.fields:
            rows = np.empty((n % spc, *(f.sample_shape or ())), f.dtype)
            reader.read_into(f.name, [(n - n % spc, n)], rows)
            out[f.name] = rows
        return out
    finally:
        reader.close()


def _build(
    fmt: Format,
    path: str,
    data: str,
    old: DatasetLayout,
    new: DatasetLayout,
    source: BlockSource,
    execution: Execution,
) -> int:
    tail = _old_tail(path, old)
    names = [f.name for f in old.fields]
    storage = storage_for(fmt)
    storage.copy_for_growth(path, data, names, old.num_samples, new.num_samples)
    writer = open_writer(data, format=fmt)
    blocks = _tail_blocks(source, old)
    try:
        # Not complete while it is written, so a reader of the copy would be told so.
        writer.set_attrs({COMPLETE_KEY: False})
        drive(
            _AppendJob(source, old, tail),
            blocks,
            execution=execution,
            sink=_AppendSink(writer),
            progress=Progress(len(blocks), "block", "append", show=execution.progress),
            destination=None,  # errors as they are: the old dataset is intact
            resumable=False,
        )
        writer.flush()
        spc = old.samples_per_chunk  # the chunks written here; the linked ones are durable
        storage.sync_chunks(data, names, old.num_samples // spc, ceil_div(new.num_samples, spc))
        writer.set_attrs({ATTR_KEY: new.to_attrs()})
        writer.set_attrs({COMPLETE_KEY: True})
    finally:
        writer.close()
    return len(blocks)
