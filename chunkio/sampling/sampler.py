"""Chunk-aware batch sampling: the canonical order of :mod:`chunkio.sampling.order`, per rank,
resumable.

:class:`ChunkBatchSampler` yields one rank's batches of the epoch's canonical global batch
sequence; :func:`read_amplification`, :func:`shuffle_quality` and :func:`describe_sampler` model
what it costs (chunk decodes per chunk needed) and what training sees (chunk and label mixing).

Resume is one-shot, as in torchdata's stateful samplers: ``load_state_dict`` affects only the
next ``__iter__``; ``set_epoch`` with the *current* epoch keeps a pending resume (loops call it
right after restoring). A state saved with any ``num_workers`` or world size restores onto any
other, as long as the *global* batch size (``batch_size * world_size``) and everything else that
fixes the order are the same; otherwise :class:`~chunkio.errors.IncompatibleStateError`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from torch.utils.data import Sampler

from ..errors import IncompatibleStateError
from ..util.deprecated import keyword_moved_to_method
from ..util.numeric import IntArray, ceil_div
from .epoch_order import EpochOrder
from .file_order import as_file_chunks, file_pool, file_samples
from .order import (
    DEFAULT_LANES,
    OrderSpec,
    as_sizes,
    check_int,
    check_state,
    lane_quotas,
    pool_capacity_chunks,
    split_rows,
)

__all__ = [
    "ChunkBatchSampler",
    "checked_batches_done",
    "describe_sampler",
    "num_batches",
    "read_amplification",
    "shuffle_quality",
]

ChunkSizes: TypeAlias = Sequence[int] | npt.NDArray[np.integer[Any]]
STATE_VERSION = 2
#: said after an incompatible state's key
_HINTS = {
    "global_batch_size": " (keep batch_size * world_size fixed when resuming on another world size)"
}
#: mixing pool of a sampler built without one, in global batches
DEFAULT_POOL_BATCHES = 4


def num_batches(
    num_samples: int, batch_size: int, world_size: int = 1, drop_last: bool = False
) -> int:
    """Batches per rank and epoch; ``batch_size`` is per rank.

    >>> num_batches(1850, 256), num_batches(1850, 256, drop_last=True), num_batches(10, 2, 3)
    (8, 7, 2)
    """
    b = check_int("batch_size", batch_size, 1) * check_int("world_size", world_size, 1)
    return num_samples // b if drop_last else ceil_div(num_samples, b)


def _dist_rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochBatch(list[int]):
    """A batch's sample ids that also tell the epoch they belong to (``.epoch``), which keys
    random augmentations: a DataLoader hands this list to ``dataset.__getitems__`` as is.

    >>> b = EpochBatch([4, 1], 3); b == [4, 1], b.epoch
    (True, 3)
    """

    def __init__(self, ids: list[int], epoch: int) -> None:
        super().__init__(ids)
        self.epoch = epoch


class ChunkBatchSampler(Sampler[list[int]]):
    """Stateful chunk-aware batch sampler; pass it to a DataLoader as ``batch_sampler``.

    The order depends only on ``(chunk_sizes, seed, epoch, global batch, pool, lanes, shuffle,
    drop_last)``: the same global batches for every ``num_workers`` and world size.
    ``state_dict()`` records seed, epoch and ``batches_done``; after ``load_state_dict`` the next
    ``__iter__`` continues right after batch ``batches_done`` of that epoch.

    Parameters
    ----------
    chunk_sizes
        Samples per chunk, in storage order.
    batch_size
        Samples per batch *of this rank* (the global batch is ``batch_size * world_size``, as
        with torch's ``DistributedSampler``).
    pool
        Samples in the mixing pool, summed over lanes (each batch draws from about
        ``pool / chunk_size`` chunks); ``None``: four global batches.
    lanes
        Independent chunk streams every batch draws from (:mod:`chunkio.sampling.order`); ranks
        workers own whole lanes, so keep it a multiple of ``world_size * num_workers``.
    seed, shuffle, drop_last
        As for a DataLoader.
    rank, world_size
        Default to ``torch.distributed`` when initialised, else 0 and 1.
    files
        Chunks per file of a dataset of many files (the loader passes them): each file's
        chunks stay together in the order, and the pool is capped to span a few files per
        lane (:mod:`chunkio.sampling.file_order`), so a reader holds a few files at a time.

    Examples
    --------
    >>> s = ChunkBatchSampler([2, 2, 2], 4, seed=1, world_size=1)
    >>> len(s), sorted(i for b in s for i in b)
    (2, [0, 1, 2, 3, 4, 5])
    """

    def __init__(
        self,
        chunk_sizes: ChunkSizes,
        batch_size: int,
        *,
        pool: int | None = None,
        lanes: int = DEFAULT_LANES,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        files: ChunkSizes | None = None,
    ) -> None:
        self.chunk_sizes = as_sizes(chunk_sizes)
        self.files = None if files is None else as_file_chunks(files, self.chunk_sizes.size)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.seed = check_int("seed", seed, 0)
        dist_rank, dist_world = _dist_rank_world()
        self.world_size = check_int(
            "world_size", dist_world if world_size is None else world_size, 1
        )
        self.rank = check_int("rank", dist_rank if rank is None else rank, 0, self.world_size - 1)
        global_batch = self.batch_size * self.world_size
        pool = DEFAULT_POOL_BATCHES * global_batch if pool is None else pool
        if self.files is not None and self.files.size > 1 and check_int("pool", pool, 0):
            sizes = file_samples(self.chunk_sizes, self.files)
            pool = file_pool(pool, sizes, global_batch, check_int("lanes", lanes, 1))
        self.spec = OrderSpec(
            batch_size=global_batch,
            pool=pool,
            lanes=lanes,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self.epoch = 0
        self._rows: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._done = 0  # batches yielded in the current (or last, if interrupted) pass
        self._resume = 0  # first batch of the next pass; set by load_state_dict

    @property
    def shuffle(self) -> bool:
        return self.spec.shuffle

    @property
    def drop_last(self) -> bool:
        return self.spec.drop_last

    @property
    def pool(self) -> int:
        return self.spec.pool

    @property
    def lanes(self) -> int:
        return self.spec.lanes

    def batches(self, epoch: int | None = None) -> list[IntArray]:
        """This rank's batches of ``epoch`` (default: the current one), as int64 arrays.

        The whole epoch at once (8 bytes per sample); :meth:`iter_batches` yields them as
        they are needed.
        """
        return list(self.iter_batches(epoch))

    def iter_batches(self, epoch: int | None = None, *, start: int = 0) -> Iterator[IntArray]:
        """This rank's batches ``start``, ``start + 1``, ... of ``epoch``, generated block by
        block (:mod:`chunkio.sampling.epoch_order`): the first comes after one pool's work,
        however long the epoch, and ``start`` skips ahead without replaying the batches before.
        """
        order = EpochOrder(
            self.chunk_sizes,
            self.spec,
            seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
            files=self.files,
        )
        return order.rank_batches(self.rank, self.world_size, start=start)

    def reader_rows(self, n: int, readers: int) -> list[tuple[int, int]]:
        """Split rows ``[0, n)`` of this rank's batch among ``readers`` along lane boundaries."""
        key = (n, readers)
        cached = self._rows.get(key)
        if cached is None:
            cached = self._rows[key] = self._split(n, readers)
        return cached

    def _split(self, n: int, readers: int) -> list[tuple[int, int]]:
        quotas = lane_quotas(self.spec.batch_size, self.spec.lanes)
        ends = np.cumsum(quotas)
        lo, hi = self.rank * self.batch_size, (self.rank + 1) * self.batch_size
        mine = np.clip(ends, lo, hi) - np.clip(ends - quotas, lo, hi)
        return split_rows(n, mine[mine > 0], readers)

    def lanes_per_reader(self, readers: int) -> int:
        """Lanes one of ``readers`` readers of this rank's batches touches, at most."""
        quotas = lane_quotas(self.spec.batch_size, self.spec.lanes)
        lanes_here = ceil_div(quotas.size, self.world_size) + 1
        return ceil_div(lanes_here, max(1, readers)) + 1

    def capacity_chunks(self, samples_per_chunk: int, readers: int = 1) -> int:
        """Decoded chunks each of ``readers`` readers must hold to decode each chunk once."""
        return pool_capacity_chunks(
            self.spec, samples_per_chunk, lanes_read=self.lanes_per_reader(readers)
        )

    def __len__(self) -> int:
        n = int(self.chunk_sizes.sum())
        return num_batches(n, self.batch_size, self.world_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; a different epoch discards any pending resume point."""
        epoch = check_int("epoch", epoch, 0)
        if epoch != self.epoch:
            self._done = self._resume = 0
        self.epoch = epoch

    @property
    def next_start(self) -> int:
        """The batch the next ``__iter__`` starts at (0, or a pending resume point)."""
        return self._resume

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        return (EpochBatch(batch.tolist(), epoch) for batch in self.iter_arrays())

    def iter_arrays(self) -> Iterator[IntArray]:
        """Like ``iter(self)`` (same resume and state tracking), yielding int64 arrays."""
        start, self._resume = self._resume, 0  # runs on the first next(), not before
        self._done = start
        yield from self._run(self.iter_batches(start=start), start)

    def _run(self, batches: Iterable[IntArray], start: int) -> Iterator[IntArray]:
        for i, batch in enumerate(batches, start):
            self._done = i + 1
            yield batch
        self._done = 0  # epoch complete: the next pass starts at batch 0

    def _config(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.chunk_sizes.astype("<i8").tobytes()).hexdigest()
        config = {
            **self.spec.to_json(),
            "num_chunks": int(self.chunk_sizes.size),
            "num_samples": int(self.chunk_sizes.sum()),
            "chunk_sizes_sha256": digest,
        }
        if self.files is not None:  # grouped by file: another order than the same chunks'
            config["files_sha256"] = hashlib.sha256(self.files.astype("<i8").tobytes()).hexdigest()
        return config

    def _check_done(self, batches_done: object) -> int:
        return checked_batches_done(batches_done, len(self))

    @keyword_moved_to_method("batches_done", "state_at")
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state after the batches yielded so far
        (:class:`~chunkio.util.stateful.Stateful`).

        ``rank`` and ``world_size`` are recorded for information only: any rank's state
        restores every rank, on any world size with the same global batch size.
        """
        return self._state(self._done)

    def state_at(self, batches_done: int) -> dict[str, Any]:
        """The state after ``batches_done`` batches of this epoch, whatever was yielded (a
        loader whose workers read ahead saves the batches it delivered)."""
        return self._state(self._check_done(batches_done))

    def _state(self, done: int) -> dict[str, Any]:
        state = {"version": STATE_VERSION, "seed": self.seed, "epoch": self.epoch}
        where = {"rank": self.rank, "world_size": self.world_size}
        return {**state, "batches_done": done, **where, **self._config()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state``: the next ``__iter__`` resumes after batch ``state['batches_done']``.

        Raises :class:`~chunkio.errors.IncompatibleStateError` if the state is malformed or
        fixes another order (other data, global batch size, pool, lanes, ...).
        """
        config = self._config()
        if isinstance(state, dict) and "files_sha256" in state:  # saved by a file-aware order
            config.setdefault("files_sha256", None)
        state = check_state(
            state, version=STATE_VERSION, config=config, what="sampler", hints=_HINTS
        )
        try:
            seed = check_int("seed", state.get("seed"), 0)
            epoch = check_int("epoch", state.get("epoch"), 0)
            done = self._check_done(state.get("batches_done"))
        except (TypeError, ValueError) as err:
            raise IncompatibleStateError(f"malformed sampler state: {err}") from err
        self.seed, self.epoch = seed, epoch
        self._done = self._resume = done


def _chunk_ids(batch: npt.ArrayLike, ends: IntArray) -> IntArray:
    idx = np.asarray(batch, dtype=np.int64).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= ends[-1]):
        bad = idx[(idx < 0) | (idx >= ends[-1])][0]
        raise ValueError(f"sample ids must be in [0, {int(ends[-1])}), got {int(bad)}")
    return np.searchsorted(ends, idx, side="right").astype(np.int64)


def read_amplification(
    batches: Iterable[npt.ArrayLike],
    chunk_sizes: ChunkSizes,
    *,
    cache_chunks: int = 0,
    readers: int = 1,
    rows: Any = None,
) -> float:
    """Chunk decodes performed divided by distinct chunks needed (1.0 is ideal).

    Models the loader's readers: each of ``readers`` processes reads its rows of every batch
    (``rows(n, readers)`` -> ``[(start, stop), ...]``, e.g. :meth:`ChunkBatchSampler.reader_rows`;
    default an even split) and keeps an LRU cache of ``cache_chunks`` decoded chunks, never
    evicting one its current batch needs. Returns 1.0 when there are no batches.

    >>> batches = [[0], [3], [1], [4]]
    >>> read_amplification(batches, [3, 3]), read_amplification(batches, [3, 3], cache_chunks=2)
    (2.0, 1.0)
    """
    ends = np.cumsum(as_sizes(chunk_sizes))
    cache = check_int("cache_chunks", cache_chunks, 0)
    n_readers = check_int("readers", readers, 1)
    caches: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(n_readers)]
    reads, needed = 0, set[int]()
    for batch in batches:
        ids = np.asarray(batch, dtype=np.int64).ravel()
        parts = (
            rows(ids.size, n_readers)
            if rows is not None
            else split_rows(ids.size, np.ones(1, np.int64), n_readers)
        )
        for cached, (a, b) in zip(caches, parts, strict=True):
            touched = [int(c) for c in np.unique(_chunk_ids(ids[a:b], ends))]
            for c in touched:
                needed.add(c)
                if c in cached:
                    cached.move_to_end(c)
                else:
                    reads += 1
                    cached[c] = None
            keep = max(cache, len(touched))
            while len(cached) > keep:
                cached.popitem(last=False)
    return reads / len(needed) if needed else 1.0


def _expected_distinct(sizes: IntArray, b: int) -> float:
    """E[distinct chunks] of ``b`` samples drawn uniformly without replacement from all samples."""
    import math

    n = int(sizes.sum())
    uniq, counts = np.unique(sizes, return_counts=True)
    untouched = 0.0
    for s, k in zip(uniq.tolist(), counts.tolist(), strict=True):
        if n - s >= b:  # P(chunk untouched) = C(n - s, b) / C(n, b)
            lg = math.lgamma
            untouched += k * math.exp(lg(n - s + 1) - lg(n - s - b + 1) - lg(n + 1) + lg(n - b + 1))
    return sizes.size - untouched


def shuffle_quality(
    batches: Sequence[npt.ArrayLike],
    chunk_sizes: ChunkSizes,
    labels: npt.ArrayLike | None = None,
) -> dict[str, float]:
    """What training sees: chunk and label mixing per batch, against a uniform shuffle (1.0).

    ``chunk_diversity`` = ``sum_t (D_t - L_t) / sum_t (E_t - L_t)``: ``D_t`` distinct chunks in
    batch ``t``, ``L_t`` the fewest chunks that can hold its ``b_t`` distinct samples and
    ``E_t`` the expectation under a uniform shuffle. ``displacement`` = mean ``|p_i - r_i|``
    over its uniform-shuffle expectation (``p_i`` position of the ``i``-th yielded sample,
    ``r_i`` the rank of its id). With ``labels`` (one int per sample id) the keys of
    :func:`chunkio.sampling.label_metrics.label_mixing` are added: distinct labels per batch and the
    largest
    label share, each next to a uniform shuffle's.

    >>> q = shuffle_quality([[0, 1, 2], [3, 4, 5]], [3, 3])
    >>> round(q["chunk_diversity"], 6), q["displacement"]
    (0.0, 0.0)
    """
    sizes = as_sizes(chunk_sizes)
    ends = np.cumsum(sizes)
    big_first = np.cumsum(np.sort(sizes)[::-1])
    seen = expected = 0.0
    flat: list[IntArray] = []
    for batch in batches:
        ids = np.asarray(batch, dtype=np.int64).ravel()
        flat.append(ids)
        b = int(np.unique(ids).size)
        if b:
            lower = int(np.searchsorted(big_first, b, side="left")) + 1
            seen += int(np.unique(_chunk_ids(ids, ends)).size) - lower
            expected += _expected_distinct(sizes, b) - lower
    ids = np.concatenate(flat) if flat else np.zeros(0, dtype=np.int64)
    n = ids.size
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.argsort(ids, kind="stable")] = np.arange(n)
    disp = float(np.abs(ranks - np.arange(n)).mean()) * 3 * n / (n * n - 1) if n > 1 else 1.0
    out = {
        "chunk_diversity": seen / expected if expected > 1e-9 else 1.0,
        "displacement": disp,
    }
    if labels is not None:
        from .label_metrics import label_mixing

        out.update(label_mixing(flat, np.asarray(labels)))
    return out


def describe_sampler(
    chunk_sizes: ChunkSizes,
    batch_size: int,
    *,
    readers: int = 1,
    cache_chunks: int | None = None,
    labels: npt.ArrayLike | None = None,
    epoch: int = 0,
    **options: Any,
) -> dict[str, float]:
    """Read amplification and shuffle quality of one rank's epoch for a sampler setting.

    ``options`` go to :class:`ChunkBatchSampler` (``pool``, ``lanes``, ``seed``, ``world_size``,
    ...). ``readers`` is the number of processes reading this rank's batches (``num_workers``
    of the ring, or 1 in-process), each holding ``cache_chunks`` decoded chunks (default: what
    the loader gives it, :meth:`ChunkBatchSampler.capacity_chunks`). Keys: ``pool``,
    ``cache_chunks``, ``num_batches``, ``chunks_per_batch``, ``read_amplification`` and the keys
    of :func:`shuffle_quality`.

    >>> d = describe_sampler([37] * 50, 256, readers=2, pool=1024)
    >>> d["num_batches"], d["read_amplification"] <= 1.1
    (8, True)
    """
    sampler = ChunkBatchSampler(chunk_sizes, batch_size, **{"world_size": 1, **options})
    sizes = sampler.chunk_sizes
    cache = (
        sampler.capacity_chunks(int(sizes.max()), readers) if cache_chunks is None else cache_chunks
    )
    batches = sampler.batches(epoch)
    ends = np.cumsum(sizes)
    per_batch = [int(np.unique(_chunk_ids(b, ends)).size) for b in batches]
    return {
        "pool": sampler.pool,
        "lanes": sampler.lanes,
        "cache_chunks": cache,
        "num_batches": len(batches),
        "chunks_per_batch": float(np.mean(per_batch or [0])),
        "read_amplification": read_amplification(
            batches, sizes, cache_chunks=cache, readers=readers, rows=sampler.reader_rows
        ),
        **shuffle_quality(batches, sizes, labels),
    }


def checked_batches_done(batches_done: object, per_epoch: int) -> int:
    """A saved state's ``batches_done``: an int in ``[0, per_epoch]``, else
    :class:`~chunkio.errors.IncompatibleStateError` (a :class:`TypeError`/:class:`ValueError`
    for a value that is no count at all)."""
    done = check_int("batches_done", batches_done, 0)
    if done > per_epoch:
        raise IncompatibleStateError(
            f"batches_done must be <= {per_epoch} batches per epoch, got {done}"
        )
    return done
