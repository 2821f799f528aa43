"""The canonical order of :mod:`chunkio.sampling.order`, generated block by block.

An epoch's batches are produced on demand, in rounds of a few thousand batches, instead of
being sorted all at once. The first batch costs the chunk permutation (O(chunks)) and one
pool's worth of merging per lane, whatever the dataset's size; the memory held is O(pool +
chunks + round), and a resume at batch ``t`` starts each lane's merge one pool before its
position instead of replaying the epoch.

Why a merge gives the same sequence as the whole-epoch sort (the definition, in
:mod:`.order`'s docstring): lane ``i`` emits its samples in the order of
``v = i * span + (e + U * w)``, ``e`` the emit position, computed in float64 exactly as the
definition computes it, ties in stream order (the sort is stable). A sample's key is never
below its emit position, so once emit positions ``[0, E)`` are merged, every sample still to
come has ``v >= fl(i * span + E)`` (rounding is monotonic): the merged samples below that
threshold are final, and sorting them stably, kept in stream order, puts them exactly where
the whole sort puts them. Uniforms are drawn per stream segment from the permutation's
generator state by ``PCG64.advance``: ``Generator.random`` takes one 64-bit draw per double,
so any segment equals the same slice of one ``random(n)`` call.

>>> spec = OrderSpec(batch_size=4, pool=0, lanes=2)
>>> canonical_stream([2, 2, 2, 2], spec, seed=0, epoch=0).tolist()
[4, 5, 7, 6, 0, 1, 3, 2]
>>> canonical_stream([3, 2], OrderSpec(2, 8, shuffle=False), seed=0, epoch=0).tolist()
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray, ceil_div
from .file_order import as_file_chunks, file_permutation
from .order import OrderSpec, as_sizes, check_int, lane_quotas, lane_sizes, rank_rows

__all__ = ["EpochOrder", "canonical_batches", "canonical_stream", "rank_batches"]

FloatArray = npt.NDArray[np.float64]

#: samples per round of batches once warmed up: large enough that the per-lane NumPy calls
#: cost little per sample, small enough that a round's arrays stay a few MB
ROUND_SAMPLES = 1 << 18
#: fewest emit positions a lane merges at once
MIN_BLOCK = 256


class _Stream:
    """The epoch's permuted chunk stream, addressed by stream position: sample ids and the
    uniforms of the mixing pool for any segment, from O(chunks) state."""

    def __init__(
        self, sizes: IntArray, rng: np.random.Generator, files: IntArray | None = None
    ) -> None:
        # a dataset of many files keeps each file's chunks together (.file_order)
        order = rng.permutation(sizes.size) if files is None else file_permutation(rng, files)
        perm_sizes = sizes[order]
        self._ends = np.cumsum(perm_sizes)
        first_pos = self._ends - perm_sizes  # each chunk's first position in the stream
        self._shift = (np.cumsum(sizes) - sizes)[order] - first_pos  # id - position
        bits = rng.bit_generator
        if not isinstance(bits, np.random.PCG64):  # advance() and one draw per double
            raise TypeError(f"expected default_rng's PCG64, got {type(bits).__name__}")
        self._state = bits.state  # the uniforms start right after the permutation

    def ids(self, lo: int, hi: int) -> IntArray:
        """Sample ids at stream positions ``[lo, hi)``."""
        first = int(np.searchsorted(self._ends, lo, side="right"))
        last = int(np.searchsorted(self._ends, hi - 1, side="right")) + 1 if hi > lo else first
        ends = np.minimum(self._ends[first:last], hi)
        counts = np.diff(np.concatenate(([lo], ends)))
        out: IntArray = np.arange(lo, hi, dtype=np.int64) + np.repeat(
            self._shift[first:last], counts
        )
        return out

    def uniforms(self, lo: int, hi: int) -> FloatArray:
        """``rng.random(n)[lo:hi]`` of the generator after the permutation, without the rest."""
        bits = np.random.PCG64(0)
        bits.state = self._state
        bits.advance(lo)  # one 64-bit draw per double
        return np.random.Generator(bits).random(hi - lo)


class _Lane:
    """One lane's samples in emitted order, merged from its stream segment block by block."""

    def __init__(
        self, stream: _Stream, start: int, length: int, *, index: int, window: float, span: float
    ) -> None:
        self.stream, self.start, self.length = stream, start, length
        self.backwards = index % 2 == 1  # odd lanes run back to front (see .order)
        self.base = float(index) * span  # the definition's ``lane * span``, in float64
        self.window = np.float64(window)
        self.margin = math.ceil(window) + 2  # emit positions a sample may move ahead
        self.fed = 0  # emit positions merged so far
        self.keys: FloatArray = np.zeros(0)  # merged, not yet final; in stream order
        self.ids: IntArray = np.zeros(0, np.int64)
        self.ready: IntArray = np.zeros(0, np.int64)  # final, not yet taken
        self.taken = 0  # of ready

    def feed(self, stop: int) -> IntArray:
        """Merge emit positions ``[fed, stop)``; returns the samples that became final."""
        a, b, n = self.fed, stop, self.length
        lo, hi = (n - b, n - a) if self.backwards else (a, b)
        pos = np.arange(lo, hi, dtype=np.int64)
        emit = n - 1 - pos if self.backwards else pos
        u = self.stream.uniforms(self.start + lo, self.start + hi)
        keys = self.base + (emit + u * self.window)
        ids = self.stream.ids(self.start + lo, self.start + hi)
        # pending and new samples side by side in stream order, so a stable sort breaks
        # ties the way the definition's stable sort over the whole stream does
        if self.backwards:
            keys, ids = np.concatenate((keys, self.keys)), np.concatenate((ids, self.ids))
        else:
            keys, ids = np.concatenate((self.keys, keys)), np.concatenate((self.ids, ids))
        final = keys < (self.base + float(b) if b < n else math.inf)
        self.keys, self.ids = keys[~final], ids[~final]
        self.fed = b
        out: IntArray = ids[final][np.argsort(keys[final], kind="stable")]
        return out

    def take(self, k: int) -> IntArray:
        """The lane's next ``k`` samples (fewer only at its end)."""
        while self.ready.size - self.taken < k and self.fed < self.length:
            need = k - (self.ready.size - self.taken)
            new = self.feed(min(self.length, self.fed + max(need, self.margin, MIN_BLOCK)))
            self.ready, self.taken = np.concatenate((self.ready[self.taken :], new)), 0
        out = self.ready[self.taken : self.taken + k]
        self.taken += out.size
        return out

    def skip(self, k: int) -> None:
        """Start at the lane's ``k``-th sample, merging only the last pool's worth before it.

        Every sample emitted before position ``first`` has a key below ``first + window <=
        k - 2``, so it precedes the threshold at ``k``: the samples final after merging
        ``[first, k)`` are the lane's first ``first + len(final)`` (at most ``k``).
        """
        if k == 0:
            return
        first = max(0, k - self.margin)
        self.fed = first
        done = first + self.feed(min(k, self.length)).size
        self.take(k - done)


class EpochOrder:
    """One epoch's canonical global batches, generated on demand (see the module docstring).

    Parameters
    ----------
    chunk_sizes
        Samples per chunk, in storage order.
    spec
        The global batch size, pool, lanes, shuffle and drop_last.
    seed, epoch
        Fix the permutation and the pool's draws.
    files
        Chunks per file, for a dataset of many files: each file's chunks stay together in
        the stream (:func:`.file_order.file_permutation`); ``None``: one dataset.

    Examples
    --------
    >>> order = EpochOrder([3, 2], OrderSpec(2, 0, shuffle=False), seed=0, epoch=0)
    >>> len(order), [b.tolist() for b in order.batches(start=1)]
    (3, [[2, 3], [4]])
    """

    def __init__(
        self, chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int, files: Any = None
    ) -> None:
        self.sizes = as_sizes(chunk_sizes)
        self.files = None if files is None else as_file_chunks(files, self.sizes.size)
        self.spec = spec
        self.seed = check_int("seed", seed, 0)
        self.epoch = check_int("epoch", epoch, 0)
        self.num_samples = int(self.sizes.sum())

    def __len__(self) -> int:
        n, b = self.num_samples, self.spec.batch_size
        return n // b if self.spec.drop_last else ceil_div(n, b)

    def batches(self, start: int = 0) -> Iterator[IntArray]:
        """Global batches ``start``, ``start + 1``, ... (int64 views; the last may be partial).

        Nothing is computed before the first ``next()``; resuming at ``start`` costs the
        first batch's work plus one pool per lane, not the batches before it.
        """
        start = check_int("start", start, 0, len(self))
        return self._generate(start)

    def _generate(self, start: int) -> Iterator[IntArray]:
        n, b, stop = self.num_samples, self.spec.batch_size, len(self)
        full = min(stop, n // b)
        if not self.spec.shuffle:
            for t in range(start, stop):
                yield np.arange(t * b, min(n, (t + 1) * b), dtype=np.int64)
            return
        lanes = self._lanes(start) if start < stop else []
        quotas = lane_quotas(b, self.spec.lanes)
        offsets = (np.cumsum(quotas) - quotas).tolist()
        t, rows = start, 1  # rounds double up to ROUND_SAMPLES: a fast first batch
        while t < full:
            m = min(rows, full - t)
            out = np.empty((m, b), dtype=np.int64)
            for lane, q, off in zip(lanes, quotas.tolist(), offsets, strict=True):
                out[:, off : off + q] = lane.take(m * q).reshape(m, q)
            yield from out
            t, rows = t + m, min(2 * rows, max(1, ROUND_SAMPLES // b))
        if t < stop:  # the partial last batch: what each lane has left
            yield np.concatenate([lane.take(lane.length) for lane in lanes])

    def _lanes(self, start: int) -> list[_Lane]:
        spec, n = self.spec, self.num_samples
        stream = _Stream(self.sizes, np.random.default_rng([self.seed, self.epoch]), self.files)
        quotas = lane_quotas(spec.batch_size, spec.lanes)
        lengths = lane_sizes(n, quotas)
        window = spec.pool * quotas / spec.batch_size  # each lane's share of the pool
        span = float(lengths.max()) + float(window.max()) + 1.0
        firsts = (np.cumsum(lengths) - lengths).tolist()
        lanes = []
        for i, (first, length) in enumerate(zip(firsts, lengths.tolist(), strict=True)):
            lane = _Lane(stream, first, length, index=i, window=float(window[i]), span=span)
            lane.skip(min(length, start * int(quotas[i])))
            lanes.append(lane)
        return lanes

    def rank_batches(self, rank: int, world_size: int, start: int = 0) -> Iterator[IntArray]:
        """Rank ``rank``'s rows of global batches ``start``, ... (:func:`.order.rank_rows`).

        A last batch not divisible by ``world_size`` is padded with the epoch's first
        samples; a resumed pass computes them (one more first batch) only then.
        """
        world = check_int("world_size", world_size, 1)
        r = check_int("rank", rank, 0, world - 1)
        if self.spec.batch_size % world:
            raise ValueError(
                f"the global batch size {self.spec.batch_size} must be divisible by "
                f"world_size {world}"
            )
        return self._rank_rows(self.batches(start), start, r, world)

    def _rank_rows(
        self, batches: Iterator[IntArray], start: int, rank: int, world: int
    ) -> Iterator[IntArray]:
        pad: IntArray | None = None
        for t, batch in enumerate(batches, start):
            if pad is None and t == 0:
                pad = batch[:world].copy()
            elif pad is None and batch.size % world:
                pad = next(self.batches())[:world].copy()
            yield rank_rows(batch, batch if pad is None else pad, rank, world)


def canonical_stream(chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int) -> IntArray:
    """All sample ids of one epoch in global batch order (the last batch kept, whatever
    ``drop_last``), in one array of 8 bytes per sample."""
    whole = EpochOrder(
        chunk_sizes, dataclasses.replace(spec, drop_last=False), seed=seed, epoch=epoch
    )
    out: IntArray = np.concatenate(list(whole.batches()))
    return out


def canonical_batches(
    chunk_sizes: Any, spec: OrderSpec, *, seed: int, epoch: int
) -> list[IntArray]:
    """The epoch's global batches (int64 sample ids), the last one partial unless dropped.

    >>> [b.tolist() for b in canonical_batches([3, 2], OrderSpec(2, 0, shuffle=False),
    ...                                        seed=0, epoch=0)]
    [[0, 1], [2, 3], [4]]
    """
    return list(EpochOrder(chunk_sizes, spec, seed=seed, epoch=epoch).batches())


def rank_batches(
    chunk_sizes: Any,
    spec: OrderSpec,
    *,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
) -> list[IntArray]:
    """Rank ``rank``'s batches of one epoch: its rows of every canonical global batch.

    >>> spec = OrderSpec(batch_size=4, pool=0, shuffle=False)
    >>> [b.tolist() for b in rank_batches([3, 3], spec, seed=0, epoch=0, rank=1, world_size=2)]
    [[2, 3], [5]]
    """
    order = EpochOrder(chunk_sizes, spec, seed=seed, epoch=epoch)
    return list(order.rank_batches(rank, world_size))
