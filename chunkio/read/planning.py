"""Turn a batch into per-chunk reads. Pure NumPy: no I/O, no torch.

Every batch the read core serves (:mod:`chunkio.read`) is read in three steps: *plan* (this
module: the chunks the batch touches, each once, in storage order, and where each item's data
lies in them) -> *read* the chunks the process's decoded chunk cache lacks, into its slots ->
*scatter* the batch out of the slots. Two kinds of batch share those steps:

* **samples** (:func:`plan_batch`): sample indices along the sample axis; each sample is one
  row of one chunk, and the scatter is one ``np.take``.
* **patches** (:func:`plan_patch_reads`): boxes of volumes chunked along every axis. A patch is
  addressed by a *key* ``(volume, *origin)``; it covers ``[origin, origin + patch_size)`` and
  may stick out of its volume (the part outside is padded). A batch reads the union of the
  chunks its patches touch, each once, even when patches overlap; every (patch, chunk)
  intersection becomes one *piece* copied from the decoded chunk into the patch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..format.grid import SampleGrid
from ..format.volume_layout import VolumeSet
from ..util.numeric import IntArray, ceil_div_array

__all__ = [
    "BatchPlan",
    "PatchReadPlan",
    "chunk_boxes",
    "normalize_indices",
    "normalize_keys",
    "piece_slices",
    "plan_batch",
    "plan_patch_reads",
]


def normalize_indices(indices: Sequence[int] | npt.ArrayLike, num_samples: int) -> IntArray:
    """Validate indices against ``num_samples``; negative ones count from the end.

    >>> normalize_indices([0, -1, 3], 5).tolist()
    [0, 4, 3]
    >>> normalize_indices([5], 5)
    Traceback (most recent call last):
    ...
    IndexError: sample index 5 out of range for a dataset of 5 samples
    """
    # what loaders pass (a slot's index area, a sampler's batch): two reductions decide
    if (
        type(indices) is np.ndarray
        and indices.dtype == np.int64
        and indices.ndim == 1
        and indices.size
        and indices.min() >= 0
        and indices.max() < num_samples
    ):
        return indices.copy()  # never a view of the caller's memory (a ring slot)
    idx = np.asarray(indices)
    if idx.ndim > 1:  # flattening would silently return more samples than were asked for
        raise ValueError(f"sample indices must be one-dimensional; got shape {idx.shape}")
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"sample indices must be integers; got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False).reshape(-1)
    bad = (idx < -num_samples) | (idx >= num_samples)
    if bad.any():
        first = int(idx[np.argmax(bad)])
        raise IndexError(
            f"sample index {first} out of range for a dataset of {num_samples} samples"
        )
    return np.where(idx < 0, idx + num_samples, idx)


@dataclass(frozen=True)
class BatchPlan:
    """Which chunks a batch touches and where in them each requested sample lies.

    Sample ``i`` is row ``offsets[i]`` of chunk ``chunks[chunk_pos[i]]``.
    """

    indices: IntArray
    chunks: IntArray  # sorted, unique
    chunk_pos: IntArray
    offsets: IntArray


def plan_batch(indices: Sequence[int] | npt.ArrayLike, grid: SampleGrid) -> BatchPlan:
    """Plan a batched read of ``indices`` (any order, duplicates allowed).

    >>> p = plan_batch([9, 1, 2, 9], SampleGrid(10, 4))
    >>> p.chunks.tolist(), p.chunk_pos.tolist(), p.offsets.tolist()
    ([0, 2], [1, 0, 0, 1], [1, 1, 2, 1])
    """
    idx = normalize_indices(indices, grid.num_samples)
    spc = grid.samples_per_chunk
    chunk_of = idx // spc
    chunks, chunk_pos = np.unique(chunk_of, return_inverse=True)
    return BatchPlan(
        indices=idx,
        chunks=chunks.astype(np.int64, copy=False),
        chunk_pos=chunk_pos.astype(np.int64, copy=False).reshape(-1),
        offsets=idx - chunk_of * spc,
    )


# -- patches -----------------------------------------------------------------------------------


def normalize_keys(keys: Sequence[Any] | npt.ArrayLike, volumes: VolumeSet) -> IntArray:
    """Validate patch keys ``(volume, *origin)``; return them as a ``(B, 1 + ndim)`` array.

    >>> vs = VolumeSet(shapes=((8, 8),), chunks=(4, 4), stacked=True)
    >>> normalize_keys([(0, 1, 2)], vs).tolist()
    [[0, 1, 2]]
    """
    arr = np.asarray(keys)
    width = 1 + volumes.ndim
    if arr.size == 0:
        return np.zeros((0, width), np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"patch keys must be integers (volume, *origin); got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(
            f"patch keys must be (volume, *origin) with {width} integers each; got an array "
            f"of shape {arr.shape}"
        )
    arr = arr.astype(np.int64, copy=False)
    bad = (arr[:, 0] < 0) | (arr[:, 0] >= volumes.count)
    if bad.any():
        raise IndexError(
            f"patch key {arr[np.argmax(bad)].tolist()}: volume out of range for "
            f"{volumes.count} volumes"
        )
    return arr


@dataclass(frozen=True)
class PatchReadPlan:
    """The chunks a batch needs and the pieces to cut from them.

    ``chunks[k]`` = ``(volume, *chunk_coords)``, unique, in storage order; ``pieces[m]`` =
    ``(patch, chunk_row, *src_lo, *dst_lo, *size)`` with ``src_lo`` relative to the chunk and
    ``dst_lo`` to the patch; ``inner[b]`` = the in-volume part ``[lo, hi)`` of patch ``b`` in
    patch coordinates (the rest is padding).
    """

    keys: IntArray
    chunks: IntArray
    pieces: IntArray
    inner: IntArray

    def chunk_box(self, row: int, volumes: VolumeSet) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Spatial box ``[lo, hi)`` of chunk ``chunks[row]`` within its volume."""
        v, *coords = self.chunks[row].tolist()
        shape = volumes.shapes[v]
        lo = tuple(c * s for c, s in zip(coords, volumes.chunks, strict=True))
        hi = tuple(min(a + s, n) for a, s, n in zip(lo, volumes.chunks, shape, strict=True))
        return lo, hi


def plan_patch_reads(
    keys: Sequence[Any] | npt.ArrayLike,
    patch_size: Sequence[int],
    volumes: VolumeSet,
    *,
    pieces: bool = True,
) -> PatchReadPlan:
    """Plan reading the patches ``keys`` of size ``patch_size``.

    ``pieces=False`` skips the per-(patch, chunk) pieces (``plan.pieces`` is then empty), for
    readers that cut patches out of larger boxes themselves.

    >>> vs = VolumeSet(shapes=((8, 8),), chunks=(4, 4), stacked=True)
    >>> p = plan_patch_reads([(0, 2, 2), (0, 3, 3)], (4, 4), vs)
    >>> p.chunks.tolist()  # both patches touch the same four chunks: each is read once
    [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]
    >>> p.pieces[0].tolist()  # patch 0, chunk 0: chunk[2:4, 2:4] -> patch[0:2, 0:2]
    [0, 0, 2, 2, 0, 0, 2, 2]
    """
    key_arr = normalize_keys(keys, volumes)
    size = np.asarray(patch_size, np.int64)
    ndim, chunk = volumes.ndim, np.asarray(volumes.chunks, np.int64)
    if size.shape != (ndim,) or (size < 1).any():
        raise ValueError(f"patch_size must be {ndim} positive ints; got {tuple(patch_size)}")
    origin = key_arr[:, 1:]
    shapes = np.asarray(volumes.shapes, np.int64)[key_arr[:, 0]].reshape(-1, ndim)
    lo, hi = np.maximum(origin, 0), np.minimum(origin + size, shapes)
    outside = (hi <= lo).any(axis=1)
    if outside.any():
        b = int(np.argmax(outside))
        raise ValueError(
            f"patch {key_arr[b].tolist()} of size {size.tolist()} lies outside volume "
            f"{key_arr[b, 0]} of shape {shapes[b].tolist()}"
        )
    inner = np.stack([lo - origin, hi - origin], axis=1)
    c_lo, c_hi = lo // chunk, ceil_div_array(hi, chunk)
    index: dict[tuple[int, ...], int] = {}
    found_pieces: list[tuple[int, ...]] = []  # (patch, chunk row, *chunk coordinates)
    for b, (v, first, stop) in enumerate(
        zip(key_arr[:, 0].tolist(), c_lo.tolist(), c_hi.tolist(), strict=True)
    ):
        for coords in itertools.product(*map(range, first, stop)):
            row = index.setdefault((v, *coords), len(index))
            if pieces:
                found_pieces.append((b, row, *coords))
    # storage order for the reads; renumber the pieces' chunk rows to match
    found = np.array(list(index), np.int64).reshape(-1, 1 + ndim)
    order = np.lexsort(found.T[::-1]) if len(found) else np.zeros(0, np.int64)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    piece_arr = _pieces(
        np.array(found_pieces, np.int64).reshape(-1, 2 + ndim), chunk, lo, hi, origin
    )
    piece_arr[:, 1] = rank[piece_arr[:, 1]]
    return PatchReadPlan(key_arr, found[order], piece_arr, inner)


def _pieces(
    found: IntArray, chunk: IntArray, lo: IntArray, hi: IntArray, origin: IntArray
) -> IntArray:
    """``(patch, chunk row, src_lo, dst_lo, size)`` of each piece ``(patch, chunk row,
    *chunk coordinates)`` of ``found``, for patches whose in-volume part is ``[lo, hi)`` and
    whose origin is ``origin`` (all pieces at once: a batch has tens of them).

    >>> one = np.array([[0, 0, 1, 0]])  # patch 0, chunk (1, 0) of 4 x 4
    >>> _pieces(one, np.array([4, 4]), np.array([[3, 2]]), np.array([[7, 6]]), np.array([[3, 2]]))
    array([[0, 0, 0, 2, 1, 0, 3, 2]])
    """
    b = found[:, 0]
    starts = found[:, 2:] * chunk
    a = np.maximum(lo[b], starts)
    z = np.minimum(hi[b], starts + chunk)
    out: IntArray = np.concatenate([found[:, :2], a - starts, a - origin[b], z - a], axis=1)
    return out


def piece_slices(
    piece: Sequence[int], ndim: int
) -> tuple[int, int, tuple[slice, ...], tuple[slice, ...]]:
    """``(patch, chunk_row, slices in the chunk, slices in the patch)`` of one plan piece.

    >>> piece_slices([0, 0, 2, 2, 0, 0, 2, 2], 2)
    (0, 0, (slice(2, 4, None), slice(2, 4, None)), (slice(0, 2, None), slice(0, 2, None)))
    """
    size = piece[2 + 2 * ndim : 2 + 3 * ndim]
    src = tuple(slice(a, a + n) for a, n in zip(piece[2 : 2 + ndim], size, strict=True))
    dst = tuple(slice(a, a + n) for a, n in zip(piece[2 + ndim : 2 + 2 * ndim], size, strict=True))
    return int(piece[0]), int(piece[1]), src, dst


def chunk_boxes(coords: npt.ArrayLike) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Cover a set of chunk coordinates exactly by few boxes ``[lo, hi)``.

    One read of a box costs one call instead of one per chunk (zarr decodes a box's chunks
    concurrently, h5py in one selection) and decodes nothing extra: boxes hold only needed
    chunks. A set that does not fill its bounding box is cut in two across its longest axis,
    recursively.

    >>> chunk_boxes([(0, 0), (0, 1), (1, 0), (1, 1), (3, 1)])
    [((3, 1), (4, 2)), ((0, 0), (2, 2))]
    """
    arr = np.asarray(coords, np.int64)
    unique = sorted(set(map(tuple, arr.reshape(len(arr), -1).tolist())))  # small: beats np.unique
    todo = [np.array(unique, np.int64).reshape(len(unique), -1)]
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    while todo:
        c = todo.pop()
        if len(c) == 0:
            continue
        lo, hi = c.min(axis=0), c.max(axis=0) + 1
        extent = hi - lo
        if len(c) == int(np.prod(extent)):
            out.append((tuple(lo.tolist()), tuple(hi.tolist())))
            continue
        axis = int(np.argmax(extent))  # not full, so some extent is > 1
        mid = int(lo[axis] + extent[axis] // 2)
        todo += [c[c[:, axis] < mid], c[c[:, axis] >= mid]]
    return out
