"""The streamed stack's slots: which row chunk each holds, least recently used first.

A batch of a streamed window field reaches a dozen row chunks, almost all of them already in
the cache. :class:`~chunkio.read.cache.DecodedChunkCache` admits them with about twenty NumPy
calls whatever the count (built for patch caches of 10^5 slots); here a dict in
least-recently-used order does it in a few Python operations a chunk (``docs/benchmarks.md``,
windows: a quarter to a tenth of the time). Slots are
``(variables, rows_per_chunk, row size)`` blocks of one buffer, so a batch stays one gather.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["StreamSlots"]


class StreamSlots:
    """``capacity`` slots of shape ``slot_shape`` in one buffer, each holding one chunk.

    >>> slots = StreamSlots((2,), "i8", 2)
    >>> slots.admit([3, 5])
    ([0, 1], [(3, 0), (5, 1)])
    >>> slots.admit([5, 7])   # 5 is held; 7 takes the slot of 3, the least recently used
    ([1, 0], [(7, 0)])
    >>> slots.admit([1, 5, 7])   # more chunks than slots: the buffer grows, held slots kept
    ([2, 1, 0], [(1, 2)])
    """

    def __init__(self, slot_shape: tuple[int, ...], dtype: Any, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        #: the slots' memory, ``(capacity, *slot_shape)`` (pages written as slots fill; a
        #: growth copies the whole old buffer)
        self.buffer: npt.NDArray[Any] = np.empty((self.capacity, *slot_shape), dtype)
        #: chunk -> slot, least recently admitted first
        self._slot: OrderedDict[int, int] = OrderedDict()
        #: slots holding nothing, the lowest last (taken first)
        self._free = list(range(self.capacity - 1, -1, -1))

    def __contains__(self, chunk: int) -> bool:
        return chunk in self._slot

    def __len__(self) -> int:
        return len(self._slot)

    def admit(self, chunks: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
        """The slot of each of ``chunks`` (distinct), and ``(chunk, slot)`` for those that
        were not held: read them into their slots, or :meth:`forget` them on failure.

        Free slots go first, then those of the least recently admitted chunks that
        ``chunks`` does not name; more chunks than slots grow the buffer."""
        table = self._slot
        slots = [-1] * len(chunks)
        missing = []
        for i, chunk in enumerate(chunks):
            slot = table.get(chunk)
            if slot is None:
                missing.append(i)
            else:  # most recently used now: the chunks a batch needs are never evicted
                table.move_to_end(chunk)
                slots[i] = slot
        if not missing:
            return slots, []
        if len(chunks) > self.capacity:
            self._grow(len(chunks))
        fills = []
        free = self._free
        for i in missing:
            # the table's first entries are chunks this batch did not name (those it names
            # were moved last above, or are added last here): room for every missing one,
            # as the capacity is at least len(chunks)
            slot = free.pop() if free else table.popitem(last=False)[1]
            chunk = chunks[i]
            table[chunk] = slots[i] = slot
            fills.append((chunk, slot))
        return slots, fills

    def forget(self, chunks: list[int]) -> None:
        """Drop ``chunks`` (their slots hold nothing valid, e.g. after a failed read)."""
        for chunk in chunks:
            slot = self._slot.pop(chunk, None)
            if slot is not None:
                self._free.append(slot)
        self._free.sort(reverse=True)

    def _grow(self, capacity: int) -> None:
        grown = np.empty((capacity, *self.buffer.shape[1:]), self.buffer.dtype)
        grown[: self.capacity] = self.buffer
        self.buffer = grown
        self._free = list(range(capacity - 1, self.capacity - 1, -1)) + self._free
        self.capacity = capacity
