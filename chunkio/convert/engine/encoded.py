"""Where the bytes of an encoded image field go, so that parallel writers never share a chunk.

An encoded field ``name`` is ``name__bytes`` (uint8), ``name__spans`` (N x 2: each sample's
``[start, stop)`` in the bytes) and ``name__shapes`` (N x ndim: each decoded shape). How many
bytes an image encodes to is known only once a worker has encoded it, yet every block's place
must be fixed beforehand, so that blocks are written in parallel and a resumed run writes the
same bytes to the same place. So each sample chunk ``k`` owns a *region* of the bytes array,
bytes chunks ``[region[k], region[k + 1])``, as large as its images could possibly encode to
(:data:`_CAPACITY_FACTOR` times their decoded bytes plus :data:`_CAPACITY_SLACK` each). A
block packs each chunk's images from the start of its region and writes whole bytes chunks,
the last one zero padded (the padding compresses to nothing). The rest of a region is never
written, and Zarr and HDF5 store no chunk that nobody wrote, so it costs nothing on disk.

When the dataset is sharded (Zarr v3, a conversion with large fields), each group of sample
chunks that a block writes (one shard of the other fields) owns one shard of the bytes too:
its chunks' regions one after the other, every group's shard as long as the fullest group
needs (:func:`~chunkio.convert.engine.ragged.grouped_starts`). The block writes that shard whole,
holding just the chunks it filled (:meth:`~chunkio.backends.Writer.write_runs`), so the bytes
are written once, straight into their final file.

The bytes chunk length is a quarter of the median decoded sample chunk (at least
:data:`_MIN_CHUNK`): a chunk of JPEG q90 photos (about 10x smaller than its pixels) then fits
in one bytes chunk, a chunk of PNGs in two or three. Everything here is a pure function of
the decoded shapes and the sample grid, so a resumed conversion computes the same placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...format.grid import SampleGrid
from ...format.layout import FieldInfo
from ...util.numeric import IntArray, ceil_div, ceil_div_array
from .ragged import PackedPlan, checked_shapes, grouped_starts, per_chunk

__all__ = ["EncodedPlan", "image_capacity"]


#: an image's region share: this many times its decoded bytes ...
_CAPACITY_FACTOR = 2
#: ... plus this much (headers, tiny images)
_CAPACITY_SLACK = 64 << 10
#: smallest bytes chunk
_MIN_CHUNK = 16 << 10


_Size = TypeVar("_Size", int, npt.NDArray[np.int64])


def image_capacity(decoded_nbytes: _Size) -> _Size:
    """The bytes reserved for one image of ``decoded_nbytes`` decoded bytes: an encoding at most
    this long always fits its chunk's region."""
    return decoded_nbytes * _CAPACITY_FACTOR + _CAPACITY_SLACK


@dataclass(frozen=True, eq=False)
class EncodedPlan(PackedPlan):
    """Placement of one encoded field's bytes (see the module docstring); ``shapes`` are the
    decoded shapes."""

    #: bytes chunk where each sample chunk's region starts (num_chunks + 1 entries)
    region: IntArray

    @classmethod
    def build(cls, field: FieldInfo, shapes: Any, grid: SampleGrid, group: int = 1) -> EncodedPlan:
        """Regions for images of decoded ``shapes`` (N x ndim) on ``grid``; with ``group`` > 1
        each ``group`` sample chunks' regions make one shard (see the module docstring)."""
        shapes = checked_shapes(field, shapes, grid, "decoded")
        decoded = np.prod(shapes, axis=1, dtype=np.int64) * field.dtype.itemsize
        totals = per_chunk(decoded, grid)
        median = int(np.median(totals)) if totals.size else 0
        chunk_len = max(_MIN_CHUNK, ceil_div(median // 4, 4096) * 4096)
        room = per_chunk(image_capacity(decoded), grid)
        group = max(1, min(int(group), grid.num_chunks))
        region, shard_len = grouped_starts(ceil_div_array(room, chunk_len), group)
        group = group if shard_len else 1
        return cls(field, grid, shapes, chunk_len, region, group=group, shard_len=shard_len)

    @property
    def num_bytes(self) -> int:
        """Length of the bytes array (every region, mostly never written)."""
        return int(self.region[-1]) * self.chunk_len

    def bytes_chunks(self, first: int, stop: int) -> tuple[int, int]:
        """Bytes chunks of the regions of sample chunks ``[first, stop)``."""
        return int(self.region[first]), int(self.region[stop])

    def pack(
        self, first: int, stop: int, encoded: Sequence[Any]
    ) -> tuple[list[tuple[int, npt.NDArray[np.uint8]]], IntArray]:
        """Place the encoded images of sample chunks ``[first, stop)``.

        Returns the bytes writes ``(start, buffer)`` (whole bytes chunks, one run per sample
        chunk) and the spans of the samples, ``(count, 2)``.
        """
        a, b = self.grid.bounds(first)[0], self.grid.bounds(stop - 1)[1]
        if len(encoded) != b - a:
            raise SourceError(
                f"field {self.field.name!r}: expected {b - a} encoded images for samples "
                f"{a}..{b - 1}; got {len(encoded)}"
            )
        writes: list[tuple[int, npt.NDArray[np.uint8]]] = []
        spans = np.empty((b - a, 2), np.int64)
        for chunk in range(first, stop):
            lo, hi = self.grid.bounds(chunk)
            parts = [_as_bytes(self.field.name, i, encoded[i - a]) for i in range(lo, hi)]
            sizes = np.array([len(p) for p in parts], np.int64)
            total = int(sizes.sum())
            begin = int(self.region[chunk]) * self.chunk_len
            room = int(self.region[chunk + 1]) * self.chunk_len - begin
            if total > room:
                raise SourceError(
                    f"field {self.field.name!r}: the images of samples {lo}..{hi - 1} encode "
                    f"to {total} bytes, more than the {room} reserved for them (over "
                    f"{_CAPACITY_FACTOR}x their decoded size); store them with encoding='raw'"
                )
            buf = np.zeros(ceil_div(total, self.chunk_len) * self.chunk_len, np.uint8)
            ends = np.cumsum(sizes)
            for part, end, size in zip(parts, ends.tolist(), sizes.tolist(), strict=True):
                buf[end - size : end] = part
            spans[lo - a : hi - a, 0] = begin + ends - sizes
            spans[lo - a : hi - a, 1] = begin + ends
            writes.append((begin, buf))
        return writes, spans


def _as_bytes(field: str, i: int, value: Any) -> npt.NDArray[np.uint8]:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return np.frombuffer(value, np.uint8)
    arr = np.asarray(value)
    if arr.dtype != np.uint8 or arr.ndim != 1 or not arr.size:
        raise SourceError(
            f"field {field!r}, sample {i}: an encoded image must be non-empty bytes or a 1-D "
            f"uint8 array; got {arr.dtype} of shape {arr.shape}"
        )
    return arr
