"""Where the values of a ragged field go, so that parallel writers never share a chunk.

A ragged field ``name`` is stored as ``name__values`` (flat), ``name__offsets`` (N + 1) and
``name__shapes`` (N x ndim); sample ``i`` is the ``prod(shapes[i])`` values starting at
``offsets[i]``. Writers own whole *sample* chunks, so the values of each sample chunk start on
a boundary of the values array's own chunks: the values of sample chunk ``k`` occupy values
chunks ``[chunk_starts[k], chunk_starts[k + 1])`` and the end of the last one is zero padding.
Hence ``offsets[i + 1] - offsets[i]`` may exceed the sample's size (never be less), and
readers take the size from ``shapes``.

The values chunk length is the largest sample-chunk total, capped at twice the median total:
usually each sample chunk fills one values chunk (padding is what the fullest chunk has more
than the others, and compresses to almost nothing), while one outsized image spreads over a
few values chunks instead of inflating every chunk. Everything here is a pure function of the
shapes and the sample grid, so a resumed conversion computes the same placement.

**Shards** (Zarr, ``group`` > 1): the values array is written directly as shards, each the
values of ``group`` consecutive sample chunks (a *group*; conversion blocks own whole groups).
So that every group starts a shard, each gets the same number of values chunks,
:attr:`RaggedPlan.shard_len`: the most any group needs. A group's values are packed from the
start of its shard as above, and the chunks it does not need are zeros (stored, a few bytes
each compressed): one write per shard, and no small chunk files to pack afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...format.grid import SampleGrid, values_chunk_span
from ...format.layout import FieldInfo
from ...util.numeric import IntArray, ceil_div, ceil_div_array

__all__ = [
    "PackedPlan",
    "RaggedPlan",
    "checked_shapes",
    "grouped_starts",
    "per_chunk",
]


def checked_shapes(field: FieldInfo, shapes: Any, grid: SampleGrid, what: str) -> IntArray:
    """``shapes`` as ``(N, ndim)`` int64, or a SourceError saying what was expected."""
    out: IntArray = np.asarray(shapes, dtype=np.int64)
    if out.ndim != 2 or len(out) != grid.num_samples or (out < 0).any():
        raise SourceError(
            f"field {field.name!r}: {what} shapes must be ({grid.num_samples}, ndim) "
            f"non-negative ints; got an array of shape {out.shape}"
        )
    return out


def per_chunk(values: IntArray, grid: SampleGrid) -> IntArray:
    """Sums of per-sample ``values`` over each sample chunk of ``grid``.

    >>> per_chunk(np.array([1, 2, 3, 4, 5]), SampleGrid(5, 2)).tolist()
    [3, 7, 5]
    """
    if not len(values):
        return np.zeros(0, np.int64)
    starts = np.arange(grid.num_chunks, dtype=np.int64) * grid.samples_per_chunk
    sums: IntArray = np.add.reduceat(values, starts).astype(np.int64)
    return sums


def grouped_starts(counts: IntArray, group: int) -> tuple[IntArray, int]:
    """Where runs of ``counts[k]`` units, one per sample chunk, start in one array (and, last,
    where the last run ends); with ``group`` > 1 each ``group`` runs start a shard of their
    own, as long as the fullest group needs. Returns the starts and that shard length (0 when
    not grouped).

    >>> [s.tolist() for s in grouped_starts(np.array([2, 1, 3, 1]), 1)[:1]]
    [[0, 2, 3, 6, 7]]
    >>> starts, shard_len = grouped_starts(np.array([2, 1, 3, 1]), 2)
    >>> starts.tolist(), shard_len
    ([0, 2, 4, 7, 8], 4)
    """
    if group <= 1 or not len(counts):
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), 0
    needed = per_chunk(counts, SampleGrid(len(counts), group))
    shard_len = int(needed.max())
    group_of = np.arange(len(counts)) // group
    before = np.cumsum(counts) - counts - (np.cumsum(needed) - needed)[group_of]
    starts = group_of * shard_len + before
    return np.concatenate([starts, [starts[-1] + counts[-1]]]).astype(np.int64), shard_len


@dataclass(frozen=True, eq=False)
class PackedPlan:
    """What the placements of a ragged field's values and of an encoded field's bytes share:
    the samples of ``shapes`` on ``grid``, packed into one flat array of ``chunk_len`` chunks,
    each sample chunk's share starting on a chunk boundary (in shards of ``group`` sample
    chunks when ``group`` > 1)."""

    field: FieldInfo
    grid: SampleGrid
    #: each sample's shape (N x ndim)
    shapes: IntArray
    #: length of the flat array's chunks
    chunk_len: int
    _: KW_ONLY
    #: sample chunks per shard (1: not sharded)
    group: int = 1
    #: flat array chunks per shard (0: not sharded)
    shard_len: int = 0

    @property
    def names(self) -> tuple[str, str, str]:
        """The field's arrays: the flat one (ragged: values, encoded: bytes), where each sample
        lies in it (offsets, spans), and the shapes."""
        roles = self.field.roles
        return roles.data, roles.locator, roles.shapes

    @property
    def shard_chunks(self) -> int | None:
        """The flat array's chunks per shard, ``None`` when it is not sharded."""
        return self.shard_len if self.group > 1 else None


@dataclass(frozen=True, eq=False)
class RaggedPlan(PackedPlan):
    """Placement of one ragged field's values (see the module docstring)."""

    #: where each sample's values start (N + 1 entries; the last: where the values end)
    offsets: IntArray

    @classmethod
    def build(cls, field: FieldInfo, shapes: Any, grid: SampleGrid, group: int = 1) -> RaggedPlan:
        """Place samples of ``shapes`` (N x ndim) chunk-aligned on ``grid``; with ``group`` > 1,
        each ``group`` sample chunks start a shard of their own (see the module docstring)."""
        shapes = checked_shapes(field, shapes, grid, "ragged")
        sizes = np.prod(shapes, axis=1, dtype=np.int64)
        totals = per_chunk(sizes, grid)
        chunk_len = 1
        if totals.size:
            chunk_len = int(max(1, min(totals.max(), 2 * int(np.median(totals)))))
        chunks_each = ceil_div_array(totals, chunk_len)
        group = max(1, min(int(group), grid.num_chunks))
        starts, shard_len = grouped_starts(chunks_each, group)
        chunk_first = starts * chunk_len
        # position of each sample inside its chunk's values: sizes before it, minus the chunk's
        within = np.cumsum(sizes) - sizes
        within -= np.repeat(np.cumsum(totals) - totals, grid.chunk_sizes())
        offsets = np.empty(len(sizes) + 1, np.int64)
        offsets[:-1] = np.repeat(chunk_first[:-1], grid.chunk_sizes()) + within
        offsets[-1] = chunk_first[-2] + totals[-1] if totals.size else 0
        return cls(field, grid, shapes, chunk_len, offsets, group=group, shard_len=shard_len)

    @property
    def num_values(self) -> int:
        return int(self.offsets[-1])

    def values_chunks(self, first: int, stop: int) -> tuple[int, int]:
        """Values chunks written by the block of sample chunks ``[first, stop)`` (whole groups
        when sharded: their shards, up to the array's end)."""
        if self.group <= 1:
            return values_chunk_span(self.offsets, self.grid, self.chunk_len, first, stop)
        if first % self.group or (stop % self.group and stop != self.grid.num_chunks):
            raise ValueError(
                f"field {self.field.name!r}: sample chunks {first}..{stop - 1} are not whole "
                f"groups of {self.group} (one shard each)"
            )
        last = ceil_div(self.num_values, self.chunk_len)
        return first // self.group * self.shard_len, min(
            last, ceil_div(stop, self.group) * self.shard_len
        )

    def pack(self, first: int, stop: int, samples: Sequence[Any]) -> tuple[int, npt.NDArray[Any]]:
        """Flatten the samples of sample chunks ``[first, stop)`` into their values region.

        Returns the start position in the values array and the buffer, which covers whole
        values chunks (the last may end at the array's end), zero padded between chunks.
        """
        a, b = self.grid.bounds(first)[0], self.grid.bounds(stop - 1)[1]
        if len(samples) != b - a:
            raise SourceError(
                f"field {self.field.name!r}: expected {b - a} samples for samples {a}..{b - 1}; "
                f"got {len(samples)}"
            )
        ca, cb = self.values_chunks(first, stop)
        begin, end = ca * self.chunk_len, min(cb * self.chunk_len, self.num_values)
        buf = np.zeros(end - begin, self.field.dtype)
        for i, sample in zip(range(a, b), samples, strict=True):
            arr = self._checked(i, sample)
            at = int(self.offsets[i]) - begin
            buf[at : at + arr.size].reshape(arr.shape)[...] = arr  # one copy, even transposed
        return begin, buf

    def _checked(self, i: int, sample: Any) -> npt.NDArray[Any]:
        arr = np.asarray(sample)
        expected = tuple(int(s) for s in self.shapes[i])
        if arr.shape != expected:
            raise SourceError(
                f"field {self.field.name!r}, sample {i}: expected shape {expected} (declared by "
                f"ragged_shapes); got {arr.shape}"
            )
        if arr.dtype != self.field.dtype and not np.can_cast(arr.dtype, self.field.dtype, "safe"):
            raise SourceError(
                f"field {self.field.name!r}, sample {i}: expected dtype {self.field.dtype}; got "
                f"{arr.dtype}, which does not cast to it without loss"
            )
        return arr
