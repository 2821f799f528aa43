"""``chunkio doctor`` on a store chunkio did not write: is its chunking what makes it slow?

Three chunkings make shuffled training slow whatever the loader does: chunks of one sample
(or a few small ones: the per-chunk cost of an index lookup, a read and a decoder call is
paid for every few KiB), chunks of many MiB (each batch decodes whole chunks, far more than
it uses) and compressed chunks spanning thousands of samples (the same, from the other side).
:func:`chunking_issues` finds them from the arrays' metadata; :func:`advise_chunking` then
*measures* what they cost: the same batches read from the store and from a copy of its first
samples rewritten as ``chunkio convert arrays`` would write it (a temporary folder, removed
after; nothing is written beside the source), and prints that command when the rewrite reads
clearly faster. Fields small enough to be read once per process (``preload_bytes``) are not
judged: their chunking never reaches a batch.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import ArrayInfo
from ..convert.arrays import write_arrays
from ..convert.engine.chunking import choose_samples_per_chunk
from ..convert.options import Output
from ..dataset import ChunkDataset
from ..format.foreign import FieldSelection
from ..format.rewrite import rewrite_command, suggested_destination
from ..format.store_layout import LayoutOptions, open_layout

__all__ = [
    "COPY_BYTES",
    "LARGE_CHUNK_BYTES",
    "MIN_GAIN",
    "SMALL_CHUNK_BYTES",
    "ChunkingAdvice",
    "ChunkingIssue",
    "advise_chunking",
    "chunking_issues",
    "rewrite_command",
    "suggested_destination",
]

#: a chunk this small pays its per-chunk cost for a few KiB of data...
SMALL_CHUNK_BYTES = 16 << 10
#: ...when the converters would put at least this many times more samples in one chunk
SMALL_FACTOR = 4
#: a chunk holding several samples and this many decoded bytes is decoded whole for a batch
LARGE_CHUNK_BYTES = 8 << 20
#: compressed chunks of at least this many samples are named as spanning thousands
SPAN_SAMPLES = 1000
#: the rewrite must read at least this much faster to be recommended
MIN_GAIN = 1.5
#: at most this many decoded bytes of the store are copied to measure the rewrite on
COPY_BYTES = 128 << 20


@dataclass(frozen=True)
class ChunkingIssue:
    """One field whose chunking makes shuffled reads slow, and why."""

    field: str
    array: str
    why: str


@dataclass(frozen=True)
class ChunkingAdvice:
    """What the chunking costs, measured, and the command that rewrites the store."""

    issues: tuple[ChunkingIssue, ...]
    samples_per_chunk: int
    batch_size: int
    #: the store's first samples copied and rewritten for the measurement
    samples_copied: int
    #: (seconds to a fresh loader's first batch, then seconds per batch), 0 workers: read
    #: from the store, and from its first samples rewritten
    source: tuple[float, float]
    rewritten: tuple[float, float]
    command: str

    @property
    def speedup(self) -> tuple[float, float]:
        """How many times faster the rewrite reads: the first batch, then each batch."""
        a, b = self.source, self.rewritten
        return a[0] / max(b[0], 1e-12), a[1] / max(b[1], 1e-12)

    @property
    def recommended(self) -> bool:
        return max(self.speedup) >= MIN_GAIN

    def render(self) -> list[str]:
        """The advice as report lines."""
        (f0, p0), (f1, p1) = self.source, self.rewritten
        first, pace = self.speedup
        lines = ["  chunking:"]
        lines += [f"    field {i.field!r} (array {i.array!r}): {i.why}" for i in self.issues]
        lines += [
            f"    measured (batch {self.batch_size}, 0 workers), here vs its first "
            f"{self.samples_copied} samples rewritten as the command below writes them "
            f"({self.samples_per_chunk} per chunk, chunkio's default codec):",
            f"      first batch of an epoch {_ms(f0)} vs {_ms(f1)} ({first:.1f}x), "
            f"then {_ms(p0)} vs {_ms(p1)} per batch ({pace:.1f}x)",
        ]
        if not self.recommended:
            lines.append(f"    less than {MIN_GAIN:g}x here: not worth a rewritten copy")
            return lines
        lines += ["    rewrite it as a chunkio dataset (the source is left as it is):"]
        return [*lines, f"      {self.command}"]


def _best(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return min(a[0], b[0]), min(a[1], b[1])


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _human(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _issue(name: str, a: ArrayInfo, target: int) -> ChunkingIssue | None:
    """What is wrong with one array's chunks for shuffled batches (``None``: nothing)."""
    rows = int(a.chunks[0])
    chunk = int(np.prod(a.chunks, dtype=np.int64)) * a.dtype.itemsize
    split = tuple(a.chunks[1:]) != tuple(a.shape[1:])
    if chunk < SMALL_CHUNK_BYTES and target >= SMALL_FACTOR * rows:
        what = f"chunks of {rows} sample{'s' if rows > 1 else ''}"
        if split:
            what += f" split into chunks of {'x'.join(map(str, a.chunks))}"
        return ChunkingIssue(
            name,
            a.name,
            f"{what} ({_human(chunk)} each): the per-chunk cost (index lookup, read, decoder "
            "call) dominates",
        )
    if chunk > LARGE_CHUNK_BYTES and rows > target:
        compressed = a.compression is not None and a.compression.codec != "none"
        what = (
            f"compressed chunks spanning {rows} samples"
            if compressed and rows >= SPAN_SAMPLES
            else f"chunks of {rows} samples"
        )
        return ChunkingIssue(
            name,
            a.name,
            f"{what} ({_human(chunk)} decoded each): a batch decodes whole chunks, far more "
            "than it uses",
        )
    return None


def chunking_issues(
    infos: Mapping[str, ArrayInfo], *, preload_bytes: int
) -> tuple[list[ChunkingIssue], int]:
    """The fields (name -> array) whose chunking slows shuffled reads, and the samples per
    chunk the converters would choose (``choose_samples_per_chunk`` of the largest sample)."""
    num_samples = int(next(iter(infos.values())).shape[0])
    sample = max(
        int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize for a in infos.values()
    )
    target = choose_samples_per_chunk(sample, num_samples=num_samples)
    issues = []
    for name, a in infos.items():
        if a.nbytes <= preload_bytes:
            continue  # read whole, once per process
        found = _issue(name, a, target)
        if found is not None:
            issues.append(found)
    return issues, target


def advise_chunking(
    ds: ChunkDataset,
    fields: FieldSelection,
    *,
    batch_size: int,
    samples_read: int,
    measure: Callable[[ChunkDataset], tuple[float, float]],
    source: tuple[float, float] | None = None,
    preload_bytes: int,
    storage_options: Mapping[str, Any] | None = None,
) -> ChunkingAdvice | None:
    """Measure the chunking issues of the store ``ds`` reads (``None`` when there are none).

    ``samples_read``: how many samples one ``measure`` reads; the copy holds as many (within
    :data:`COPY_BYTES`), so that its chunks are decoded once each, as in an epoch, rather than
    served again from the loader's pool by a copy read round and round.
    ``measure(dataset)`` returns (seconds to a fresh loader's first batch, then seconds per
    batch) at ``batch_size`` with 0 workers (``source``: one such timing of ``ds`` already
    taken).
    """
    location = str(ds.location)
    reader = ds.reader_options.open(location)  # its metadata, its trust
    try:
        infos = open_layout(reader, fields, LayoutOptions(preload_bytes=preload_bytes)).arrays
    finally:
        reader.close()
    issues, target = chunking_issues(infos, preload_bytes=preload_bytes)
    if not issues:
        return None
    arrays = {name: a.name for name, a in infos.items()}
    # each side timed twice, the best kept: one timing of a few batches is at the mercy of
    # whatever else the machine runs
    here = _best(measure(ds), measure(ds) if source is None else source)
    sample = sum(ds.layout.field(f).sample_nbytes for f in ds.fields)
    rows = min(len(ds), max(samples_read, 2 * target), max(1, COPY_BYTES // max(1, sample)))
    with tempfile.TemporaryDirectory(prefix="chunkio-doctor-") as scratch:
        copy = os.path.join(scratch, "rewritten.zarr")
        columns = ds.read_batch(np.arange(rows))
        write_arrays(copy, columns, shuffle=False, output=Output(chunks=min(target, rows)))
        rewritten_ds = ChunkDataset(copy, fields=list(ds.fields), preload_bytes=preload_bytes)
        rewritten = _best(measure(rewritten_ds), measure(rewritten_ds))
    return ChunkingAdvice(
        issues=tuple(issues),
        samples_per_chunk=target,
        batch_size=batch_size,
        samples_copied=rows,
        source=here,
        rewritten=rewritten,
        command=rewrite_command(location, arrays, target, storage_options),
    )
