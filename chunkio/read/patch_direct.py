"""Patches read straight into their rows of the batch, past the chunk pool.

A patch on the chunk grid (its pieces whole chunks, inside its volume) whose chunks no other
patch of the batch needs and the pool does not keep is read as one box into its row: the
backend decodes each chunk into the row itself where the row is that chunk (a patch of one
chunk), else into one chunk of scratch, still in the CPU's caches when it is copied into the
row. Through the pool each chunk is written into the pool and copied out of it again: two more
passes over memory that, for a batch of 128^3 patches (48 MiB of chunks), lies past the caches,
and the pool grown into fresh pages as batches need more slots. What such a read skips is only
a copy: the chunks are decoded once either way, and a patch that shares a chunk with another
one of its batch, or sticks out of its volume, keeps the pool (each chunk decoded once per
batch, the pad written).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..format.volume_layout import VolumeSet
from ..util.numeric import IntArray
from .planning import PatchReadPlan

__all__ = ["direct_patches"]


def direct_patches(
    plan: PatchReadPlan,
    volumes: VolumeSet,
    patch_size: tuple[int, ...],
    kept: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """Which patches of ``plan`` (made with pieces) can be read straight into their rows:
    those inside their volume whose every piece is a whole chunk that no other patch of the
    batch touches and that is not ``kept`` (by chunk row: chunks the pool holds, copied
    rather than decoded again, or that reads are coming back to, to be held next time).

    >>> from chunkio.read.planning import plan_patch_reads
    >>> vs = VolumeSet(shapes=((8, 8),), chunks=(4, 4), stacked=True)
    >>> plan = plan_patch_reads([(0, 0, 0), (0, 4, 2), (0, 4, 4)], (4, 4), vs)
    >>> direct_patches(plan, vs, (4, 4), np.zeros(len(plan.chunks), bool)).tolist()
    [True, False, False]
    """
    ndim = volumes.ndim
    pieces, chunks = plan.pieces, plan.chunks
    n = len(plan.keys)
    if not n or not len(pieces):
        return np.zeros(n, np.bool_)
    patch, row = pieces[:, 0], pieces[:, 1]
    src_lo, size = pieces[:, 2 : 2 + ndim], pieces[:, 2 + 2 * ndim :]
    edge = np.asarray(volumes.chunks, np.int64)
    first = chunks[:, 1:] * edge
    shapes = np.asarray(volumes.shapes, np.int64).reshape(-1, ndim)[chunks[:, 0]]
    extent: IntArray = np.minimum(first + edge, shapes) - first  # a last chunk may be short
    uses = np.bincount(row, minlength=len(chunks))
    whole = (src_lo == 0).all(axis=1) & (size == extent[row]).all(axis=1)
    alone = whole & (uses[row] == 1) & ~kept[row]
    direct = np.ones(n, np.bool_)
    direct[patch[~alone]] = False
    inside = (plan.inner[:, 0] == 0).all(axis=1) & (
        plan.inner[:, 1] == np.asarray(patch_size, np.int64)
    ).all(axis=1)
    found: npt.NDArray[np.bool_] = direct & inside
    return found
