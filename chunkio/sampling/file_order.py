"""The canonical order over a dataset of many files: each reader touches a few files at a time.

A dataset of many files (``ChunkDataset([path1, path2, ...])``) orders its chunks as one
dataset does (:mod:`.order`), with two differences that keep every reader on a bounded set of
files while batches still mix like a uniform shuffle:

1. **Files stay whole in the chunk stream.** The files are permuted, and each file's chunks
   are permuted within it (:func:`file_permutation`): a lane, a contiguous piece of the
   stream, reads one file after another, each in one pass, instead of one chunk of every file.
2. **The pool spans a few files per lane.** Each lane's share of the mixing pool is capped at
   :data:`FILES_PER_LANE` typical files (:func:`file_pool`), so a lane holds about that many
   files at once (plus the ones at either edge), and a reader of ``k`` lanes about
   ``k * (FILES_PER_LANE + 2)``. Mixing comes from the lanes: every global batch draws from
   every lane, i.e. from ``lanes * FILES_PER_LANE`` files spread over the whole collection.

A pool sized by memory alone would span the whole collection once files are small (a 64 MiB
pool holds ~400k cells: 800 files of 500), so every batch would read a few rows from most files
and a reader would reopen most files for every batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..util.numeric import IntArray
from .order import as_sizes, lane_quotas

__all__ = ["FILES_PER_LANE", "file_permutation", "file_pool", "file_samples"]

#: typical files one lane's share of the mixing pool spans, at most
FILES_PER_LANE = 1


def as_file_chunks(files: Any, num_chunks: int) -> IntArray:
    """Chunks per file, validated against the chunk count (every file at least one chunk)."""
    counts = as_sizes(files)
    if int(counts.sum()) != num_chunks:
        raise ValueError(
            f"files must give each file's chunk count, summing to the {num_chunks} chunks; "
            f"got {int(counts.sum())} over {counts.size} files"
        )
    return counts


def file_permutation(rng: np.random.Generator, files: IntArray) -> IntArray:
    """The chunk order of an epoch: files in random order, each file's chunks permuted within it.

    Draws one permutation of the chunks, then one of the files, from ``rng`` (the uniforms of
    the mixing pool follow, as in :mod:`.epoch_order`).

    >>> file_permutation(np.random.default_rng(0), np.array([3, 1, 2])).tolist()
    [2, 0, 1, 3, 5, 4]
    """
    order = rng.permutation(int(files.sum()))
    file_of = np.repeat(np.arange(files.size), files)
    rank = np.empty(files.size, np.int64)
    rank[rng.permutation(files.size)] = np.arange(files.size)
    out: IntArray = order[np.argsort(rank[file_of[order]], kind="stable")]
    return out


def file_samples(chunk_sizes: Any, files: IntArray) -> IntArray:
    """Samples per file, from the chunk sizes and chunks per file."""
    ends = np.cumsum(files) - 1
    total = np.cumsum(as_sizes(chunk_sizes))[ends]
    out: IntArray = np.diff(np.concatenate(([0], total)))
    return out


def file_pool(pool: int, file_sizes: IntArray, batch_size: int, lanes: int) -> int:
    """``pool`` capped so that each lane's share spans at most :data:`FILES_PER_LANE` typical
    files (each lane's share is ``pool * quota / batch_size``).

    The typical file is the one the median *sample* lies in (files weighted by their samples):
    with one large file among many small ones, lanes inside the large file keep a pool of its
    size rather than of a small file's, which could be smaller than one of its chunks.

    >>> file_pool(400_000, np.full(1000, 500), 256, 24), file_pool(100, np.full(9, 500), 256, 24)
    (11636, 100)
    >>> file_pool(10**6, np.array([100] * 50 + [10_000]), 256, 24)
    232727
    """
    sizes = np.sort(np.asarray(file_sizes, np.int64))
    weight = np.cumsum(sizes)
    typical = float(sizes[int(np.searchsorted(weight, weight[-1] / 2))])
    quota = int(lane_quotas(batch_size, lanes).max())
    cap = int(FILES_PER_LANE * typical * batch_size // quota)
    return min(pool, max(1, cap))
