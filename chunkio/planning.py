"""Turn a batch of sample indices into per-chunk reads. Pure NumPy: no I/O, no torch.

A batch is read in three steps: *plan* (this module: the sorted chunks it touches, and each
sample's chunk and row) -> *read* the chunks the process's pool lacks, in storage order,
straight into pool slots -> *gather* the batch with one ``np.take`` (:mod:`chunkio.reading`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
