"""The write pass of :func:`~chunkio.convert.images.convert_images`, planned: its job, its blocks,
its estimated cost.

:func:`write_plan` turns the checked files into the :class:`ImageSource` to write and the
:class:`~chunkio.convert.options.ConversionOptions` to write it with (samples per chunk,
``extra``, workers, chunks per block); the entry point hands both to
:func:`~chunkio.convert.pipeline.convert_source`. The pool is used only when
:func:`write_work` (a few files decoded and timed) says it pays
(:func:`chunkio.convert.engine.workers.pool_pays`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import SourceError
from ...images.pillow import DecodePolicy, UndecodableImage
from ...util.numeric import ceil_div
from ..engine.chunking import choose_samples_per_chunk
from ..engine.workers import Work, worker_count
from ..options import ConversionOptions
from ..shuffle.order import SOURCE_INDEX, order_extra
from .check import Checked
from .plan import describe, partition
from .scan import OnError, ScanResult, Skipped
from .source import ImageSource

__all__ = ["Job", "WritePlan", "block_chunks", "undecodable", "write_plan", "write_work"]

#: The write pass per image in one process (decode, pack, compress, checksum, write, fsync),
#: relative to its decode alone: measured 2.6 for 64-128 px JPEGs, 4.2 for 224-256 px ones
#: with Pillow's decode (2 cores, Zarr, 1 MiB chunks); 3.3-3.8 for 224-256 px JPEGs with the
#: libjpeg-turbo decode of plain JPEGs; about 1 for JPEGs stored as they are (an overestimate
#: there: such a conversion may use a pool a little early).
_WRITE_PER_DECODE = 3.0
#: Files decoded and timed to estimate the write pass (:func:`write_work`).
_CALIBRATION_FILES = 8
#: Decoded bytes per block (the unit of work, resume and fsync) to aim for.
_BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class Job:
    """What one image conversion reads and the options that shape its result (the others,
    for :func:`~chunkio.convert.pipeline.convert_source`, travel as ConversionOptions)."""

    scan: ScanResult
    layout_kind: str
    policy: DecodePolicy
    on_error: OnError
    dst: Any
    encoding: str
    quality: int
    shuffle: bool
    seed: int
    chunk_bytes: int


@dataclass(frozen=True)
class WritePlan:
    """The write pass over the files left in: what to write, how, and what was left out."""

    source: ImageSource
    options: ConversionOptions
    skipped: tuple[Skipped, ...]


def undecodable(err: BaseException) -> UndecodableImage | None:
    """The :class:`UndecodableImage` naming a file behind ``err``, if one is."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, UndecodableImage) and cause.path is not None:
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def write_plan(
    job: Job, options: ConversionOptions, checked: Sequence[Checked], failed: Mapping[str, str]
) -> WritePlan:
    """The write pass over the files that ``checked`` and ``failed`` leave in."""
    scan = job.scan
    entries, good, bad = partition(scan.entries, checked, failed, job.on_error)
    source = ImageSource(
        entries,
        good,
        job.policy,
        labelled=entries[0].label is not None,
        encoding=job.encoding,
        quality=job.quality,
    )
    skipped = (*scan.skipped, *bad)
    spc = options.samples_per_chunk or choose_samples_per_chunk(
        max(1, int(source.mean_stored_nbytes)),
        target_bytes=job.chunk_bytes,
        num_samples=source.num_samples,
    )
    execution = options.execution
    workers = worker_count(
        execution.workers, client=execution.client, work=lambda: write_work(source)
    )
    extra = describe(scan, job.layout_kind, job.policy, source.stored_mode, good, skipped)
    extra["source"]["encoding"] = source.encoding
    if source.encoding in ("jpeg", "webp"):
        extra["source"]["quality"] = job.quality
    if source.encoding == "jpeg":
        extra["source"]["jpeg_files_stored_as_is"] = int(source.as_is.sum())
    if job.shuffle:
        extra["source"]["fields"][SOURCE_INDEX] = "position in the sorted file listing"
    write = replace(
        options,
        samples_per_chunk=spc,
        class_names=scan.class_names,
        extra=order_extra(
            extra, shuffle=job.shuffle, seed=job.seed, num_samples=source.num_samples
        ),
        execution=replace(execution, workers=workers),
        block_chunks=block_chunks(source, spc, workers),
    )
    return WritePlan(source, write, skipped)


def block_chunks(source: ImageSource, samples_per_chunk: int, workers: int) -> int:
    """Chunks per block: about :data:`_BLOCK_BYTES`, but enough blocks to keep workers busy.

    Every block costs an fsync of each of its chunk files and of the manifest, so tiny blocks
    make small-image conversions fsync-bound.
    """
    num_chunks = ceil_div(source.num_samples, samples_per_chunk)
    chunk_bytes = max(1.0, source.mean_sample_nbytes * samples_per_chunk)
    by_size = max(1, int(_BLOCK_BYTES // chunk_bytes))
    by_balance = max(1, num_chunks // (4 * workers)) if workers > 1 else num_chunks
    return max(1, min(by_size, by_balance))


def write_work(source: ImageSource) -> Work:
    """The write pass in this process, estimated: a few files decoded here and timed, scaled
    by pixels to all of them and by :data:`_WRITE_PER_DECODE`."""
    n = source.num_samples
    picks = np.unique(np.linspace(0, n - 1, min(n, _CALIBRATION_FILES)).round().astype(np.int64))
    started = time.perf_counter()
    for i in picks:
        with contextlib.suppress(SourceError):  # a bad file: the write pass reports it
            source.load(int(i))
    seconds = time.perf_counter() - started
    pixels = source.orig_size.prod(axis=1, dtype=np.float64)
    estimate = seconds / max(1.0, float(pixels[picks].sum())) * float(pixels.sum())
    return Work(seconds=estimate * _WRITE_PER_DECODE)
