"""A per-process pool of decoded chunks: fixed slots in one buffer, so a batch is one gather.

Chunks are decoded straight into free slots (no staging copy, no cache copy); a batch's rows
are then gathered from the buffer with a single ``np.take``. When slots run out, the least
recently used chunk the current batch does not need is evicted; a batch needing more chunks
than there are slots grows the buffer. With the canonical order's sliding mixing pool
(:mod:`chunkio.order`) and a capacity from :func:`chunkio.order.pool_capacity_chunks`, every
chunk is decoded about once per epoch.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ChunkPool"]

IntArray = npt.NDArray[np.int64]


class ChunkPool:
    """Slots of ``rows_per_chunk`` rows each, holding decoded chunks of one array.

    >>> pool = ChunkPool(rows_per_chunk=2, sample_shape=(), dtype=np.dtype("i8"), capacity=2)
    >>> slots, runs = pool.admit(np.array([3, 5]))
    >>> slots.tolist(), runs
    ([0, 1], [([3, 5], 0)])
    >>> pool.admit(np.array([5, 7]))[0].tolist()   # 5 is held; 7 takes 3's slot
    [1, 0]
    """

    def __init__(
        self, *, rows_per_chunk: int, sample_shape: tuple[int, ...], dtype: Any, capacity: int
    ) -> None:
        self.rows_per_chunk = int(rows_per_chunk)
        self._shape = tuple(sample_shape)
        self._dtype = np.dtype(dtype)
        self.capacity = max(1, int(capacity))
        self.buffer: npt.NDArray[Any] = np.empty(
            (self.capacity * self.rows_per_chunk, *self._shape), self._dtype
        )
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # chunk -> slot, LRU first
        self._free = list(range(self.capacity - 1, -1, -1))  # pop() gives the lowest

    def __contains__(self, chunk: int) -> bool:
        return chunk in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)

    def admit(self, needed: IntArray) -> tuple[IntArray, list[tuple[list[int], int]]]:
        """Slots for ``needed`` (sorted unique chunk ids) and the reads that fill the new ones.

        Returns ``(slots, runs)``: ``slots[i]`` holds ``needed[i]``; each run is
        ``(chunks, first_slot)``, chunks (ascending) to decode into consecutive slots from
        ``first_slot``. Until the runs are read, call :meth:`forget` on failure.
        """
        if len(needed) > self.capacity:
            self._grow(len(needed))
        missing = [int(c) for c in needed.tolist() if c not in self._slot_of]
        keep = set(needed.tolist())
        for c in needed.tolist():  # hits become most recently used
            if c in self._slot_of:
                self._slot_of.move_to_end(c)
        for c in missing:
            self._slot_of[c] = self._take_slot(keep)
        slots = np.fromiter((self._slot_of[int(c)] for c in needed), np.int64, len(needed))
        runs: list[tuple[list[int], int]] = []
        for c in missing:  # ascending, like their slots when the pool is filled in order
            s = self._slot_of[c]
            if runs and runs[-1][1] + len(runs[-1][0]) == s:
                runs[-1][0].append(c)
            else:
                runs.append(([c], s))
        return slots, runs

    def forget(self, chunks: list[int]) -> None:
        """Drop ``chunks`` (their slots hold nothing valid, e.g. after a failed read)."""
        for c in chunks:
            slot = self._slot_of.pop(c, None)
            if slot is not None:
                self._free.append(slot)

    def rows(self, slot: int, count: int) -> npt.NDArray[Any]:
        """The first ``count`` rows of ``slot``, to decode into."""
        start = slot * self.rows_per_chunk
        return self.buffer[start : start + count]

    def _take_slot(self, keep: set[int]) -> int:
        if self._free:
            return self._free.pop()
        for chunk in self._slot_of:  # least recently used first
            if chunk not in keep:
                return self._slot_of.pop(chunk)
        raise RuntimeError("chunk pool has no slot to evict")  # admit() grows first

    def _grow(self, capacity: int) -> None:
        old = self.buffer
        self.buffer = np.empty((capacity * self.rows_per_chunk, *self._shape), self._dtype)
        self.buffer[: len(old)] = old
        self._free = list(range(capacity - 1, self.capacity - 1, -1)) + self._free
        self.capacity = capacity
