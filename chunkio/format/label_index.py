"""The coarse per-chunk label index, computed once at conversion time.

For every spatial chunk of every label volume it records which label values the chunk holds,
how many voxels of each, and a few voxel positions of each value drawn at random
(deterministically: seeded by volume and chunk). Label-balanced patch sampling centres
patches on those positions, so training never scans a label volume.

Stored next to the data as two arrays, outside the layout's fields:

``label_index`` (R x (ndim + 3), int64)
    one row per (volume, chunk, value): ``volume, chunk_0 .. chunk_{ndim-1}, value, voxels``,
    sorted by volume, chunk and value.
``label_points`` (R x K x ndim, int64)
    ``K`` voxel positions (absolute, within the volume) holding the row's value, drawn with
    replacement.

``extra["volumes"]["label_index"]`` names them and summarises ``values`` and ``voxels`` (total
voxels per value over the dataset).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Compression, Reader, Writer
from ..errors import FormatError
from ..util.numeric import IntArray, ceil_div
from .volume_layout import VolumeSet

__all__ = [
    "POINTS_PER_ENTRY",
    "LabelIndex",
    "index_label_volume",
    "index_label_volumes",
    "write_label_index",
]


#: voxel positions kept per (volume, chunk, value)
POINTS_PER_ENTRY = 4
ROWS_ARRAY = "label_index"
POINTS_ARRAY = "label_points"
_SEED = 0x1ABE1


@dataclass(frozen=True)
class LabelIndex:
    """Rows ``(volume, *chunk, value, voxels)`` and their sample points, see module docs."""

    rows: IntArray
    points: IntArray

    def __post_init__(self) -> None:
        r, width = self.rows.shape
        if width < 4 or self.points.shape[:1] != (r,) or self.points.shape[2] != width - 3:
            raise FormatError(
                f"label index rows {self.rows.shape} and points {self.points.shape} disagree"
            )

    @property
    def ndim(self) -> int:
        return int(self.rows.shape[1]) - 3

    @property
    def volume(self) -> IntArray:
        return self.rows[:, 0]

    @property
    def value(self) -> IntArray:
        return self.rows[:, -2]

    @property
    def voxels(self) -> IntArray:
        return self.rows[:, -1]

    def summary(self) -> dict[str, list[int]]:
        """Label values present and their total voxel counts (JSON-ready)."""
        values, inverse = np.unique(self.value, return_inverse=True)
        totals = np.bincount(inverse.reshape(-1), weights=self.voxels, minlength=len(values))
        return {"values": values.tolist(), "voxels": totals.astype(np.int64).tolist()}

    @classmethod
    def concat(cls, parts: Sequence[tuple[IntArray, IntArray]], ndim: int) -> LabelIndex:
        """Join per-volume parts (in volume order)."""
        if not parts:
            return cls(np.zeros((0, ndim + 3), np.int64), np.zeros((0, 0, ndim), np.int64))
        rows = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
        points = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
        return cls(rows, points)


def index_label_volume(
    label: npt.NDArray[Any],
    volume: int,
    chunks: Sequence[int],
    *,
    points: int = POINTS_PER_ENTRY,
    first: Sequence[int] | None = None,
) -> tuple[IntArray, IntArray]:
    """Index one label volume: ``(rows, points)`` as described in the module docs.

    ``first``: the chunk coordinates of ``label[0, ...]`` when ``label`` is a chunk-aligned
    part of its volume (a slab); its rows and points are then those of the whole volume's.

    >>> lab = np.zeros((4, 4), np.uint8); lab[3, 3] = 2
    >>> rows, pts = index_label_volume(lab, 5, (2, 2), points=1)
    >>> rows.tolist()
    [[5, 0, 0, 0, 4], [5, 0, 1, 0, 4], [5, 1, 0, 0, 4], [5, 1, 1, 0, 3], [5, 1, 1, 2, 1]]
    >>> pts[-1].tolist()
    [[3, 3]]
    """
    shape = label.shape
    start = tuple(first) if first is not None else (0,) * len(shape)
    grid = [range(a, a + ceil_div(s, c)) for a, s, c in zip(start, shape, chunks, strict=True)]
    offset = np.array([a * c for a, c in zip(start, chunks, strict=True)], np.int64)
    all_rows: list[IntArray] = []
    all_points: list[IntArray] = []
    for coords in itertools.product(*grid):
        lo = np.array([i * c for i, c in zip(coords, chunks, strict=True)], np.int64)
        at = (lo - offset).tolist()
        box = label[tuple(slice(a, a + c) for a, c in zip(at, chunks, strict=True))]
        flat = box.reshape(-1)
        values, counts = _value_counts(flat)
        rng = np.random.default_rng([_SEED, volume, *coords])
        picks = np.stack(
            [_positions(flat, v, n, points, rng) for v, n in zip(values, counts, strict=True)]
        )
        local = np.stack(np.unravel_index(picks, box.shape), axis=-1)
        head = np.tile(np.array([volume, *coords], np.int64), (len(values), 1))
        all_rows.append(np.column_stack([head, values.astype(np.int64), counts]))
        all_points.append(local + lo)
    return np.concatenate(all_rows), np.concatenate(all_points).astype(np.int64)


def _value_counts(flat: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], IntArray]:
    """Values present and their counts; bincount (no sort) for small non-negative labels."""
    if flat.dtype.kind in "biu" and flat.size and flat.min() >= 0 and flat.max() < 1 << 16:
        counts = np.bincount(flat.astype(np.intp, copy=False))
        values = np.flatnonzero(counts)
        return values, counts[values].astype(np.int64)
    values, counts = np.unique(flat, return_counts=True)
    return values, counts.astype(np.int64)


def _positions(
    flat: npt.NDArray[Any], value: Any, count: int, k: int, rng: np.random.Generator
) -> IntArray:
    """``k`` random flat positions holding ``value`` (which occurs ``count`` times)."""
    if 2 * count >= flat.size:
        # common value: rejection sampling, ~2 draws per hit, no pass over the chunk
        found: list[int] = []
        while len(found) < k:
            tries = rng.integers(0, flat.size, size=4 * k)
            found.extend(tries[flat[tries] == value].tolist())
        return np.asarray(found[:k], np.int64)
    where = np.flatnonzero(flat == value)
    out: IntArray = where[rng.integers(0, len(where), size=k)]
    return out


def write_label_index(
    writer: Writer, index: LabelIndex, compression: Compression
) -> dict[str, Any]:
    """Store ``index`` through ``writer``; return its ``extra`` description."""
    r = len(index.rows)
    step = max(1, min(r, 1 << 16))
    for name, data in ((ROWS_ARRAY, index.rows), (POINTS_ARRAY, index.points)):
        writer.create_rows_like(name, data, step, compression)
        for start in range(0, r, step):
            writer.write_block(name, start, data[start : start + step])
    return {"rows": ROWS_ARRAY, "points": POINTS_ARRAY, **index.summary()}


def index_label_volumes(
    reader: Reader, volumes: VolumeSet, array: str, dtype: np.dtype[Any]
) -> LabelIndex:
    """The index of the label volumes in ``array`` of a store chunkio did not write (which
    has none stored): each volume read whole once, one at a time; nothing is written."""
    parts = []
    for v in range(volumes.count):
        region = volumes.region("label", v, (0,) * volumes.ndim, volumes.shapes[v])
        buf = np.empty(tuple(r.stop - r.start for r in region), dtype)
        reader.read_region(array, region, buf)
        label = buf[0] if volumes.volume_axis else buf
        parts.append(index_label_volume(label, v, volumes.chunks))
    return LabelIndex.concat(parts, volumes.ndim)
