"""A per-process cache of decoded chunks: fixed slots in one buffer, so a batch is one gather.

Chunks are decoded straight into free slots (no staging copy, no cache copy); a batch's rows
are then gathered from the buffer with a single ``np.take``. When slots run out, the least
recently used chunk the current batch does not need is evicted; a batch needing more chunks
than there are slots grows the buffer. With the canonical order's sliding mixing pool
(:mod:`chunkio.sampling.order`) and a capacity from
:func:`chunkio.sampling.order.pool_capacity_chunks`, every
chunk is decoded about once per epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray

__all__ = ["DecodedChunkCache"]


class DecodedChunkCache:
    """Slots of ``rows_per_chunk`` rows each, holding decoded chunks of one array.

    Bookkeeping is a few NumPy arrays (chunk -> slot, slot -> chunk, slot -> last use), so
    admitting a batch's chunks costs a handful of vectorised calls, not Python work per chunk.

    >>> cache = DecodedChunkCache(rows_per_chunk=2, sample_shape=(), dtype="i8", capacity=2)
    >>> slots, runs = cache.admit(np.array([3, 5]))
    >>> slots.tolist(), runs
    ([0, 1], [([3, 5], 0)])
    >>> cache.admit(np.array([5, 7]))[0].tolist()   # 5 is held; 7 takes 3's slot
    [1, 0]
    """

    def __init__(
        self, *, rows_per_chunk: int, sample_shape: tuple[int, ...], dtype: Any, capacity: int
    ) -> None:
        self.rows_per_chunk = int(rows_per_chunk)
        self._shape = tuple(sample_shape)
        self._dtype = np.dtype(dtype)
        self.capacity = max(1, int(capacity))
        #: the slots' memory: ``buffer`` is its first ``capacity`` slots (see :meth:`reserve`)
        self._room: npt.NDArray[Any] = np.empty(
            (self.capacity * self.rows_per_chunk, *self._shape), self._dtype
        )
        self.buffer: npt.NDArray[Any] = self._room
        self._slot_of: IntArray = np.full(0, -1, np.int64)  # chunk -> slot (-1: not held)
        self._chunk_in: IntArray = np.full(self.capacity, -1, np.int64)  # slot -> chunk
        self._used: IntArray = np.zeros(self.capacity, np.int64)  # slot -> last admit
        self._tick = 0
        # slots from here on have never held a chunk, and those freed by forget(): free slots
        # are found without scanning every slot (a 1 GiB cache of small chunks has 10^5+ slots)
        self._fresh = 0
        self._freed: list[int] = []

    def __contains__(self, chunk: int) -> bool:
        return 0 <= chunk < len(self._slot_of) and bool(self._slot_of[chunk] >= 0)

    def __len__(self) -> int:
        return int(np.count_nonzero(self._chunk_in >= 0))

    def admit(self, needed: IntArray) -> tuple[IntArray, list[tuple[list[int], int]]]:
        """Slots for ``needed`` (sorted unique chunk ids) and the reads that fill the new ones.

        Returns ``(slots, runs)``: ``slots[i]`` holds ``needed[i]``; each run is
        ``(chunks, first_slot)``, chunks (ascending) to decode into consecutive slots from
        ``first_slot``. Free slots go first (lowest first), then those of the least recently
        used chunks the batch does not need. Until the runs are read, call :meth:`forget` on
        failure.
        """
        needed = np.asarray(needed, dtype=np.int64)
        if len(needed) > self.capacity:
            self._grow(len(needed))
        if len(needed) and needed[-1] >= len(self._slot_of):
            grown = np.full(max(int(needed[-1]) + 1, 2 * len(self._slot_of)), -1, np.int64)
            grown[: len(self._slot_of)] = self._slot_of
            self._slot_of = grown
        self._tick += 1
        slots = self._slot_of[needed]
        miss = slots < 0
        if not miss.any():  # every chunk held (most admits): they become most recently used
            self._used[slots] = self._tick
            return slots, []
        self._used[slots[~miss]] = self._tick  # hits become most recently used
        missing = needed[miss]
        take = self._free_slots(missing.size)
        gone = self._chunk_in[take]
        self._slot_of[gone[gone >= 0]] = -1
        self._chunk_in[take] = missing
        self._slot_of[missing] = take
        self._used[take] = self._tick
        slots[miss] = take
        # chunks landing in consecutive slots are read as one run (ascending ids, so only the
        # dataset's last, shorter chunk can end a run early); a batch misses a few chunks, so
        # Python ints here, not a split into arrays of one or two
        runs: list[tuple[list[int], int]] = []
        last = -2
        for chunk, slot in zip(missing.tolist(), take.tolist(), strict=True):
            if slot == last + 1:
                runs[-1][0].append(chunk)
            else:
                runs.append(([chunk], slot))
            last = slot
        return slots, runs

    def _free_slots(self, count: int) -> IntArray:
        """``count`` slots, ascending: free ones first, then the least recently used chunks'
        that the current admit does not need."""
        free: list[int] = []
        if self._freed:
            freed = sorted(self._freed)  # all below self._fresh: free slots stay ascending
            free, self._freed = freed[:count], freed[count:]
        fresh = min(max(0, count - len(free)), self.capacity - self._fresh)
        if fresh:
            free += range(self._fresh, self._fresh + fresh)
            self._fresh += fresh
        if len(free) >= count:
            return np.array(free, np.int64)
        used = self._chunk_in[: self._fresh]
        held = np.flatnonzero((used >= 0) & (self._used[: self._fresh] != self._tick))
        order = np.argsort(self._used[held], kind="stable")[: count - len(free)]
        if len(free) + order.size < count:  # pragma: no cover - admit() grows first
            raise RuntimeError("decoded chunk cache has no slot to evict")
        evicted = held[order]
        if free:
            evicted = np.concatenate([np.array(free, np.int64), evicted])
        evicted.sort()
        return evicted

    def forget(self, chunks: list[int]) -> None:
        """Drop ``chunks`` (their slots hold nothing valid, e.g. after a failed read)."""
        for c in chunks:
            if c in self:
                slot = int(self._slot_of[c])
                self._chunk_in[slot] = -1
                self._slot_of[c] = -1
                self._freed.append(slot)

    def grow_to(self, capacity: int, *, prefault: bool = False) -> None:
        """At least ``capacity`` slots from the next :meth:`admit` on (held chunks keep
        theirs); ``prefault``: the new slots written through once now (:func:`_touched`), for
        a cache about to fill."""
        if capacity > self.capacity:
            old = self.capacity * self.rows_per_chunk
            self._grow(capacity)
            if prefault:
                _touched(self.buffer[old:])

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` slots without a new buffer when the cache grows to them
        (held chunks keep their slots). Growing past the room writes a new buffer through
        (the copy, and the first writes of its memory: several decodes' worth per chunk);
        reserved slots cost nothing until used, pages are written as slots fill.

        >>> cache = DecodedChunkCache(rows_per_chunk=1, sample_shape=(), dtype="i8", capacity=1)
        >>> cache.reserve(4)
        >>> room = cache.buffer.base
        >>> _ = cache.admit(np.array([0, 1, 2]))
        >>> cache.capacity, len(cache.buffer), cache.buffer.base is room
        (3, 3, True)
        """
        if capacity * self.rows_per_chunk > len(self._room):
            room = np.empty((capacity * self.rows_per_chunk, *self._shape), self._dtype)
            room[: len(self.buffer)] = self.buffer
            self._room = room
            self.buffer = room[: len(self.buffer)]

    def rows(self, slot: int, count: int) -> npt.NDArray[Any]:
        """The first ``count`` rows of ``slot``, to decode into."""
        start = slot * self.rows_per_chunk
        return self.buffer[start : start + count]

    def _grow(self, capacity: int) -> None:
        self.reserve(capacity)
        self.buffer = self._room[: capacity * self.rows_per_chunk]
        extra = capacity - self.capacity
        self._chunk_in = np.concatenate([self._chunk_in, np.full(extra, -1, np.int64)])
        self._used = np.concatenate([self._used, np.zeros(extra, np.int64)])
        self.capacity = capacity


def _touched(buffer: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``buffer`` with every page written once. A fresh allocation is mapped lazily: the first
    write to each page faults, and a chunk decoded into never-written slots cost several times
    its decode (a patch cache of 128 MiB read 1.5x-2x slower per patch until it had been
    written through); one pass here pays the faults at memory speed, once."""
    buffer.reshape(-1).view(np.uint8).fill(0)
    return buffer
