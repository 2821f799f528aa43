"""The canonical sample order: one global batch sequence, whatever the worker count or world size.

Pure NumPy, no I/O, no torch. The order is a function of ``(chunk sizes, seed, epoch)`` and an
:class:`OrderSpec` (global batch size, mixing pool, lanes, shuffle, drop_last) and nothing else:
``num_workers`` and the DDP world size only decide *who reads which rows*.

How an epoch is built (``shuffle=True``):

1. **Chunk stream.** The chunks are permuted (``default_rng([seed, epoch])``) and their samples
   concatenated in storage order: reading the stream front to back decodes each chunk once.
2. **Lanes.** The stream is cut into ``lanes`` contiguous pieces. Every global batch takes a
   fixed quota of rows from each lane (``lane_quotas``: the batch size split as evenly as
   possible), and each lane's length is proportional to its quota (``lane_sizes``), so all
   lanes run out together. Lanes are what make the split cheap: rows ``[off_i, off_i + q_i)``
   of every batch come from lane ``i`` only, so a reader that owns a range of lanes (a DDP
   rank, or one ring worker inside a rank) touches only the chunks of its own piece of the
   stream. Odd lanes are emitted back to front, so the chunk two neighbouring lanes share is
   used by both at the same time (the epoch's start or end) and decoded once.
3. **Mixing pool.** Within a lane, samples are emitted in the order of ``position + U * w``
   (``U`` uniform in [0, 1), ``w`` the lane's share of ``pool`` samples): a sliding shuffle
   buffer, vectorised. Output position ``p`` draws uniformly from the samples that arrived in
   ``[p - w, p]``, so each batch draws from ``~pool / chunk_size`` chunks (plus one or two per
   lane), while a chunk stays in use for only ``~w`` positions: a reader decodes each chunk
   once and holds about ``pool`` samples decoded (:func:`pool_capacity_chunks`). This is the
   idea of WebDataset's shuffle buffer and of MosaicML's shuffle blocks, as a pure function.
4. **Batches.** Global batch ``t`` is the rows of lanes ``0..L-1`` at lane positions
   ``[t * q_i, (t + 1) * q_i)``, lane by lane; the last one may be partial (dropped with
   ``drop_last``).

``shuffle=False`` gives storage order (time series), cut into batches.

This module states the order and its arithmetic (the spec, lane quotas and sizes, rank rows,
reader splits); :mod:`.epoch_order` generates it, block by block: the steps above read as one
sort of the whole epoch, but a sample's key is never below its emit position, so each lane is
merged a pool at a time with the same result, and an epoch's first batch (or a resume) costs
the chunk permutation and one pool per lane, not the epoch.

DDP: rank ``r`` of ``W`` takes rows ``[r * B / W, (r + 1) * B / W)`` of every global batch
(:func:`rank_rows`), so the concatenation of the ranks' batches *is* the global batch; with
``W`` dividing ``lanes`` each rank reads disjoint chunks. A last partial global batch is padded
to a multiple of ``W`` with the epoch's first samples (as torch's ``DistributedSampler`` pads),
so every rank gets the same number of batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import IncompatibleStateError
from ..util.numeric import IntArray, ceil_div

__all__ = [
    "DEFAULT_LANES",
    "OrderSpec",
    "check_state",
    "lane_quotas",
    "lane_sizes",
    "pool_capacity_chunks",
    "rank_rows",
    "split_rows",
]


#: Lanes by default: divisible by 1, 2, 3, 4, 6, 8, 12 and 24 readers (workers x ranks).
DEFAULT_LANES = 24


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int in range; ``TypeError`` for a non-int, ``ValueError`` out of range."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    n = int(value)
    if n < minimum or (maximum is not None and n > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an int {bounds}, got {value!r}")
    return n


def check_state(
    state: object,
    *,
    version: int,
    config: Mapping[str, Any],
    what: str,
    hints: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``state`` if it is a state dict of ``version`` saved under the same ``config``.

    Raises :class:`~chunkio.errors.IncompatibleStateError` naming ``what`` (e.g. ``"sampler"``)
    and the first differing key, followed by ``hints[key]`` if given.

    >>> check_state({"version": 1, "seed": 0}, version=1, config={"seed": 0}, what="sampler")
    {'version': 1, 'seed': 0}
    >>> check_state({"version": 1, "seed": 3}, version=1, config={"seed": 0}, what="sampler")
    Traceback (most recent call last):
    ...
    chunkio.errors.IncompatibleStateError: incompatible sampler state: seed is 0 here, got 3
    """
    if not isinstance(state, dict) or state.get("version") != version:
        got = state.get("version") if isinstance(state, dict) else type(state).__name__
        raise IncompatibleStateError(
            f"expected a {what} state dict of version {version}, got {got!r}"
        )
    for key, mine in config.items():
        if state.get(key) != mine:
            hint = (hints or {}).get(key, "")
            raise IncompatibleStateError(
                f"incompatible {what} state: {key} is {mine!r} here, got {state.get(key)!r}{hint}"
            )
    return state


def as_sizes(chunk_sizes: Any) -> IntArray:
    """Chunk sizes as a validated int64 array."""
    arr = np.asarray(chunk_sizes)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            "chunk_sizes must be a non-empty 1-D sequence of ints, "
            f"got {type(chunk_sizes).__name__} with shape {arr.shape} and dtype {arr.dtype}"
        )
    if (arr <= 0).any():
        bad = int(np.flatnonzero(arr <= 0)[0])
        raise ValueError(f"chunk_sizes must be positive, got chunk_sizes[{bad}] = {arr[bad]!r}")
    return arr.astype(np.int64)


@dataclass(frozen=True)
class OrderSpec:
    """Everything besides chunk sizes, seed and epoch that fixes the global batch sequence.

    ``batch_size`` is the *global* batch (per-rank batch x world size); ``pool`` the samples
    of the mixing pool summed over lanes; ``lanes`` is capped at ``batch_size``.
    """

    batch_size: int
    pool: int
    lanes: int = DEFAULT_LANES
    shuffle: bool = True
    drop_last: bool = False

    def __post_init__(self) -> None:
        check_int("batch_size", self.batch_size, 1)
        check_int("pool", self.pool, 0)
        check_int("lanes", self.lanes, 1)
        for name in ("shuffle", "drop_last"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "global_batch_size": self.batch_size,
            "pool": self.pool,
            "lanes": self.lanes,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }


def lane_quotas(batch_size: int, lanes: int) -> IntArray:
    """Rows of each global batch that come from each lane.

    >>> lane_quotas(10, 4).tolist(), lane_quotas(3, 24).tolist()
    ([3, 3, 2, 2], [1, 1, 1])
    """
    b = check_int("batch_size", batch_size, 1)
    k = min(check_int("lanes", lanes, 1), b)
    q = np.full(k, b // k, dtype=np.int64)
    q[: b % k] += 1
    return q


def lane_sizes(num_samples: int, quotas: IntArray) -> IntArray:
    """Samples per lane, proportional to the quotas (largest remainders), summing to N.

    >>> lane_sizes(10, np.array([2, 1])).tolist(), lane_sizes(5, np.array([1, 1, 1])).tolist()
    ([7, 3], [2, 2, 1])
    """
    total = int(quotas.sum())
    exact = num_samples * quotas
    sizes = exact // total
    short = num_samples - int(sizes.sum())
    if short:
        # deterministic tie-break: larger remainder first, then lower lane
        order = np.lexsort((np.arange(quotas.size), -(exact % total)))
        sizes[order[:short]] += 1
    return sizes.astype(np.int64)


def rank_rows(batch: IntArray, pad: IntArray, rank: int, world_size: int) -> IntArray:
    """Rank ``rank``'s rows of one global batch; a batch not divisible by W is padded from ``pad``.

    >>> rank_rows(np.arange(5), np.array([9, 8]), 1, 2).tolist()
    [3, 4, 9]
    """
    n = batch.size
    per = ceil_div(n, world_size)
    if per * world_size > n:
        batch = np.concatenate([batch, np.resize(pad, per * world_size - n)])
    out: IntArray = batch[rank * per : (rank + 1) * per]
    return out


def split_rows(n: int, quotas: IntArray, parts: int) -> list[tuple[int, int]]:
    """Split rows ``[0, n)`` of a batch into ``parts`` contiguous ranges along lane boundaries.

    ``quotas`` are the rows each lane contributes, in row order. Each cut goes to the lane
    boundary nearest an even split (so a reader owns whole lanes and touches only their
    chunks); with fewer lanes than parts the split is even. Ranges may be empty.

    >>> split_rows(12, np.array([3, 3, 3, 3]), 2), split_rows(4, np.array([4]), 2)
    ([(0, 6), (6, 12)], [(0, 2), (2, 4)])
    """
    bounds = np.cumsum(quotas)[:-1]
    bounds = bounds[bounds < n]
    cuts: list[int] = []
    for j in range(1, parts):
        target = n * j / parts
        if bounds.size >= parts - 1:
            cut = int(bounds[int(np.abs(bounds - target).argmin())])
        else:
            cut = round(target)
        cuts.append(max(cut, cuts[-1] if cuts else 0))
    edges = [0, *cuts, n]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


def pool_capacity_chunks(spec: OrderSpec, samples_per_chunk: int, *, lanes_read: int) -> int:
    """Decoded chunks a reader needs to hold to decode each chunk once per epoch.

    A reader of ``lanes_read`` lanes holds, per lane, the chunks of its ``pool / lanes``-sample
    window plus the ones at either edge of it and of the batch being assembled.
    """
    quotas = lane_quotas(spec.batch_size, spec.lanes)
    per_lane = spec.pool / quotas.size + float(quotas.max())
    per_lane_chunks = int(np.ceil(per_lane / samples_per_chunk)) + 2
    return max(1, min(lanes_read, quotas.size)) * per_lane_chunks
