"""The epoch's order built eagerly, all at once: the reference the block-by-block generator
(:mod:`chunkio.sampling.epoch_order`) is proven identical to.

This is the implementation chunkio shipped before the order was built lazily (one argsort over
the whole epoch: ~88 B/sample at its peak), kept verbatim so that the property tests compare
against the definition rather than against a second copy of the new code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkio.sampling.order import (
    OrderSpec,
    as_sizes,
    check_int,
    lane_quotas,
    lane_sizes,
    rank_rows,
)
from chunkio.util.numeric import IntArray

__all__ = ["eager_batches", "eager_rank_batches", "eager_stream"]


def _chunk_stream(sizes: IntArray, rng: np.random.Generator) -> IntArray:
    order = rng.permutation(sizes.size)
    perm_sizes = sizes[order]
    starts = (np.cumsum(sizes) - sizes)[order]  # first sample id of each chunk, shuffled
    first_pos = np.cumsum(perm_sizes) - perm_sizes  # its position in the stream
    out: IntArray = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(
        starts - first_pos, perm_sizes
    )
    return out


def eager_stream(chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int) -> IntArray:
    """All sample ids of one epoch in global batch order, built in one piece."""
    sizes = as_sizes(chunk_sizes)
    rng = np.random.default_rng([check_int("seed", seed, 0), check_int("epoch", epoch, 0)])
    n = int(sizes.sum())
    if not spec.shuffle:
        return np.arange(n, dtype=np.int64)
    ids = _chunk_stream(sizes, rng)
    quotas = lane_quotas(spec.batch_size, spec.lanes)
    lengths = lane_sizes(n, quotas)
    lane = np.repeat(np.arange(quotas.size, dtype=np.int64), lengths)
    lane_start = np.cumsum(lengths) - lengths
    pos = np.arange(n, dtype=np.int64) - lane_start[lane]
    emit = np.where(lane % 2 == 1, lengths[lane] - 1 - pos, pos)
    window = spec.pool * quotas / spec.batch_size
    key = emit + rng.random(n) * window[lane]
    span = float(lengths.max()) + float(window.max()) + 1.0
    by_lane = np.argsort(lane * span + key, kind="stable")
    ids, lane = ids[by_lane], lane[by_lane]
    q = quotas[lane]
    offset = (np.cumsum(quotas) - quotas)[lane]
    batch_key = (pos // q) * spec.batch_size + offset + pos % q
    out: IntArray = ids[np.argsort(batch_key, kind="stable")]
    return out


def eager_batches(chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int) -> list[IntArray]:
    """The epoch's global batches, cut from :func:`eager_stream`."""
    stream = eager_stream(chunk_sizes, spec, seed=seed, epoch=epoch)
    b = spec.batch_size
    stop = stream.size - stream.size % b if spec.drop_last else stream.size
    return [stream[i : i + b] for i in range(0, stop, b)]


def eager_rank_batches(
    chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int, rank: int, world_size: int
) -> list[IntArray]:
    """Rank ``rank``'s rows of every batch of :func:`eager_batches`, padded as DDP pads."""
    stream = eager_stream(chunk_sizes, spec, seed=seed, epoch=epoch)
    b = spec.batch_size
    stop = stream.size - stream.size % b if spec.drop_last else stream.size
    pad = stream[:world_size]
    return [rank_rows(stream[i : i + b], pad, rank, world_size) for i in range(0, stop, b)]
