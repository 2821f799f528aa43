"""The indexes of one sharded Zarr array's shards: read once per process, kept while unchanged.

Used by the read engine to locate inner chunks, and by the zarr-python path to tell a missing
inner chunk (which zarr-python reads back as the fill value) from a stored one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError, MissingChunkError
from .shard import ShardLayout, inner_range, parse_index
from .sources import ByteSource, Version

__all__ = ["Coords", "ShardIndexes"]

Coords = tuple[int, ...]


def shard_number(coords: Coords) -> int | Coords:
    """A chunk or shard as messages name it: its number along the sample axis where the other
    coordinates are 0, else its grid coordinates."""
    return coords if any(coords[1:]) else coords[0]


class ShardIndexes:
    """Where the inner chunks of one sharded array lie in their shards."""

    def __init__(
        self, source: ByteSource, layout: ShardLayout, key: Callable[[Coords], str], name: str
    ) -> None:
        self.source = source
        self.layout = layout
        self.grid = layout.grid  # inner chunks per shard along each axis
        self.key = key
        self.name = name
        #: shard coords -> (the object's version, its index), this process's cache
        self._cache: dict[Coords, tuple[Version, npt.NDArray[np.uint64]]] = {}
        self._lock = threading.Lock()  # prefetch threads would otherwise read an index twice

    def shard_of(self, coords: Coords) -> tuple[Coords, int]:
        """The shard holding chunk ``coords``, and the chunk's number in the shard's index
        (C order of the shard's grid of inner chunks)."""
        shard, number = [], 0
        for c, g in zip(coords, self.grid, strict=True):
            q, r = divmod(c, g)
            shard.append(q)
            number = number * g + r
        return tuple(shard), number

    def coords_of(self, shard: Coords, number: int) -> Coords:
        """The grid coordinates of inner chunk ``number`` of ``shard``."""
        local = []
        for g in reversed(self.grid):
            number, r = divmod(number, g)
            local.append(r)
        return tuple(s * g + i for s, g, i in zip(shard, self.grid, reversed(local), strict=True))

    def known(self, shard: Coords) -> bool:
        return shard in self._cache

    def remember(self, shard: Coords, version: Version, index: npt.NDArray[np.uint64]) -> None:
        with self._lock:
            self._cache[shard] = (version, index)

    def get(self, shard: Coords) -> npt.NDArray[np.uint64]:
        """The index of ``shard``: cached while its object is unchanged, else read."""
        key = self.key(shard)
        version = self.source.version(key)
        cached = self._cache.get(shard)
        if cached is not None and cached[0] == version:
            return cached[1]
        with self._lock:
            cached = self._cache.get(shard)
            if cached is not None and cached[0] == version:
                return cached[1]
            layout = self.layout
            size = layout.index_nbytes
            span = (0, size) if layout.index_location == "start" else (-size, None)
            (tail,) = self.source.fetch([(key, *span)])
            if tail is None:
                raise MissingChunkError(
                    f"array {self.name!r}: shard {self.source.where(key)} does not exist"
                )
            where = f"array {self.name!r}: shard {shard_number(shard)} in {self.source.where(key)}"
            index = parse_index(
                tail,
                layout.n_inner,
                where=where,
                shard_size=version[1],
                checksum=layout.index_checksum,
                index_location=layout.index_location,
            )
            self._cache[shard] = (version, index)
            return index

    def stored(self, coords: Coords) -> bool:
        """Whether chunk ``coords`` is stored (its shard exists and indexes it)."""
        shard, number = self.shard_of(coords)
        try:
            return inner_range(self.get(shard), number) is not None
        except (MissingChunkError, CorruptChunkError):
            return False
