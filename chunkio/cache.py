"""A per-process LRU cache of decoded chunks, bounded in bytes."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy.typing as npt

__all__ = ["ChunkCache"]


class ChunkCache:
    """Decoded chunks keyed by ``(array, chunk)``; least recently used evicted first.

    >>> import numpy as np
    >>> c = ChunkCache(max_bytes=32)
    >>> c.put(("x", 0), np.zeros(2, np.int64)); c.put(("x", 1), np.ones(2, np.int64))
    >>> c.get(("x", 0)) is not None, c.nbytes
    (True, 32)
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache size must be >= 0 bytes; got {max_bytes}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict[tuple[str, int], npt.NDArray[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def keys_for(self, array: str) -> set[int]:
        return {chunk for name, chunk in self._items if name == array}

    def get(self, key: tuple[str, int]) -> npt.NDArray[Any] | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: tuple[str, int], value: npt.NDArray[Any]) -> None:
        if value.nbytes > self.max_bytes or key in self._items:
            return
        self._items[key] = value
        self.nbytes += value.nbytes
        while self.nbytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.nbytes -= old.nbytes
