"""Turn a batch of sample indices into per-chunk reads. Pure NumPy: no I/O, no torch.

A batch is read in three steps: *plan* (this module) -> *read* each needed chunk once, in
storage order, into a staging buffer -> *scatter* with one ``np.take`` into the batch. The
plan puts chunks that must be read first (sorted, so reads stay sequential) and chunks served
from a cache after them; ``gather[i]`` is the staging row holding the i-th requested sample.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .grid import SampleGrid

__all__ = ["BatchPlan", "normalize_indices", "plan_batch"]

IntArray = npt.NDArray[np.int64]


def normalize_indices(indices: Sequence[int] | npt.ArrayLike, num_samples: int) -> IntArray:
    """Validate indices against ``num_samples``; negative ones count from the end.

    >>> normalize_indices([0, -1, 3], 5).tolist()
    [0, 4, 3]
    >>> normalize_indices([5], 5)
    Traceback (most recent call last):
    ...
    IndexError: sample index 5 out of range for a dataset of 5 samples
    """
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
    """How to serve one batch: which chunks to read, which come from cache, where each sample is.

    Staging rows hold ``read_chunks`` (concatenated, in order) followed by ``cached_chunks``.
    """

    indices: IntArray
    read_chunks: IntArray
    cached_chunks: IntArray
    read_ranges: tuple[tuple[int, int], ...]
    staging_rows: int
    gather: IntArray

    @property
    def chunks_needed(self) -> int:
        return len(self.read_chunks) + len(self.cached_chunks)


def plan_batch(
    indices: Sequence[int] | npt.ArrayLike,
    grid: SampleGrid,
    *,
    cached: Collection[int] = (),
) -> BatchPlan:
    """Plan a batched read of ``indices`` (any order, duplicates allowed).

    >>> p = plan_batch([9, 1, 2, 9], SampleGrid(10, 4))
    >>> p.read_chunks.tolist(), p.read_ranges, p.gather.tolist()
    ([0, 2], ((0, 4), (8, 10)), [5, 1, 2, 5])
    >>> p = plan_batch([9, 1], SampleGrid(10, 4), cached={2})
    >>> p.read_chunks.tolist(), p.cached_chunks.tolist(), p.gather.tolist()
    ([0], [2], [5, 1])
    """
    idx = normalize_indices(indices, grid.num_samples)
    spc = grid.samples_per_chunk
    chunk_of = idx // spc
    needed = np.unique(chunk_of)
    is_cached = np.isin(needed, np.fromiter(cached, dtype=np.int64, count=len(cached)))
    order = np.concatenate([needed[~is_cached], needed[is_cached]])
    sizes = np.minimum(spc, grid.num_samples - order * spc)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    # position of each sample's chunk within `order`
    slot = np.empty(int(needed.max()) + 1 if len(needed) else 0, dtype=np.int64)
    slot[order] = np.arange(len(order))
    gather = starts[slot[chunk_of]] + (idx - chunk_of * spc)
    read = needed[~is_cached]
    ranges = tuple((int(c) * spc, min(int(c + 1) * spc, grid.num_samples)) for c in read)
    return BatchPlan(
        indices=idx,
        read_chunks=read,
        cached_chunks=needed[is_cached],
        read_ranges=ranges,
        staging_rows=int(starts[-1]),
        gather=gather.astype(np.int64, copy=False),
    )
