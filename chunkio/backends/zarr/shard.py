"""A sharded Zarr v3 array's layout, read from its ``zarr.json``: :func:`shard_layout` checks the
``sharding_indexed`` codec and gives a :class:`ShardLayout` (inner chunks, shard shape, index
location and codecs); :func:`inner_meta` is the document an unsharded array of the inner chunks
would have.

The shard format itself (building a shard, parsing and checking its index) is pure and lives in
:mod:`.shard_format`; its names are re-exported here for the modules that read shards.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import FormatError
from .shard_format import (
    EMPTY,
    INDEX_CODECS,
    Chunk,
    IndexLocation,
    InnerChunk,
    check_index,
    encode_shard,
    index_nbytes,
    inner_range,
    merged_ranges,
    morton_order,
    parse_index,
    shard_parts,
    sharding_codec,
)

__all__ = [
    "EMPTY",
    "INDEX_CODECS",
    "Chunk",
    "IndexLocation",
    "InnerChunk",
    "ShardLayout",
    "check_index",
    "encode_shard",
    "index_nbytes",
    "inner_meta",
    "inner_range",
    "merged_ranges",
    "morton_order",
    "parse_index",
    "shard_layout",
    "shard_parts",
    "sharding_codec",
]


@dataclass(frozen=True)
class ShardLayout:
    """How a sharded Zarr v3 array lays out its shards (from :func:`shard_layout`)."""

    #: shape of one inner chunk (the unit of encoding and decoding)
    inner_chunks: tuple[int, ...]
    #: shape of one shard (one stored object; the array's ``chunk_grid``)
    shard_shape: tuple[int, ...]
    #: the inner chunks' codec chain, as ``zarr.json`` declares it
    inner_codecs: list[dict[str, Any]]
    index_location: IndexLocation
    index_codecs: list[dict[str, Any]]
    #: whether the index ends with a crc32c
    index_checksum: bool

    @property
    def grid(self) -> tuple[int, ...]:
        """Inner chunks per shard along each axis."""
        return tuple(s // c for s, c in zip(self.shard_shape, self.inner_chunks, strict=True))

    @property
    def n_inner(self) -> int:
        """Inner chunks per shard."""
        return math.prod(self.grid)

    @property
    def index_nbytes(self) -> int:
        return index_nbytes(self.n_inner, checksum=self.index_checksum)

    def index_span(self, shard_size: int) -> tuple[int, int]:
        """``(start, stop)`` of the index in a shard of ``shard_size`` bytes."""
        if self.index_location == "start":
            return 0, self.index_nbytes
        return shard_size - self.index_nbytes, shard_size

    def parse_index(
        self, data: bytes | bytearray | memoryview | npt.NDArray[Any], *, where: str
    ) -> npt.NDArray[np.uint64]:
        """The checked index of a whole shard object ``data``."""
        view = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        view = view.reshape(-1).view(np.uint8)
        size = view.size
        if size < self.index_nbytes:
            head = view
        else:
            start, stop = self.index_span(size)
            head = view[start:stop]
        return parse_index(
            head,
            self.n_inner,
            where=where,
            shard_size=size,
            checksum=self.index_checksum,
            index_location=self.index_location,
        )

    def encode(self, inner: Sequence[InnerChunk | None]) -> bytes:
        """:func:`encode_shard` for this layout."""
        return b"".join(self.parts(inner))

    def parts(self, inner: Sequence[InnerChunk | None]) -> list[Chunk]:
        """:func:`shard_parts` for this layout."""
        return shard_parts(
            inner,
            grid=self.grid,
            index_location=self.index_location,
            checksum=self.index_checksum,
        )


def shard_layout(meta: Mapping[str, Any], *, where: str = "array") -> ShardLayout | None:
    """The shard layout of an array from its ``zarr.json`` dict, ``None`` if it is not sharded.

    Raises :class:`~chunkio.errors.FormatError` for sharded arrays chunkio cannot read: other
    codecs around ``sharding_indexed``, nested sharding, index codecs other than ``bytes``
    (little endian) with an optional ``crc32c``, or shards not split evenly.
    """
    codecs = list(meta.get("codecs") or [])
    names = [c.get("name") for c in codecs]
    if "sharding_indexed" not in names:
        return None
    if len(codecs) != 1:
        raise FormatError(
            f"{where}: codecs {names} put other codecs around 'sharding_indexed'; chunkio reads "
            "shards declared as the only codec"
        )
    conf = codecs[0].get("configuration") or {}
    grid = meta.get("chunk_grid") or {}
    if grid.get("name") != "regular":
        raise FormatError(f"{where}: sharded array with chunk grid {grid.get('name')!r}")
    try:
        shard_shape = tuple(int(s) for s in grid["configuration"]["chunk_shape"])
        inner = tuple(int(c) for c in conf["chunk_shape"])
        inner_codecs = [dict(c) for c in conf["codecs"]]
    except (KeyError, TypeError, ValueError) as err:
        raise FormatError(f"{where}: malformed sharding_indexed configuration {conf!r}") from err
    if len(inner) != len(shard_shape) or any(
        c <= 0 or s <= 0 or s % c for s, c in zip(shard_shape, inner, strict=False)
    ):
        raise FormatError(
            f"{where}: shard shape {shard_shape} is not a whole number of inner chunks {inner}"
        )
    nested = [c.get("name") for c in inner_codecs]
    if "sharding_indexed" in nested:
        raise FormatError(
            f"{where}: nested sharding (inner codecs {nested}); chunkio reads one level of shards"
        )
    location = conf.get("index_location", "end")
    if location not in ("start", "end"):
        raise FormatError(f"{where}: shard index_location {location!r} is neither start nor end")
    index_codecs = [dict(c) for c in conf.get("index_codecs") or []]
    index_names = [c.get("name") for c in index_codecs]
    endian = (index_codecs[0].get("configuration") or {}).get("endian") if index_codecs else None
    if index_names not in (["bytes"], ["bytes", "crc32c"]) or endian not in (None, "little"):
        raise FormatError(
            f"{where}: shard index codecs {index_codecs}; chunkio reads 'bytes' (little endian) "
            "optionally followed by 'crc32c'"
        )
    return ShardLayout(
        inner_chunks=inner,
        shard_shape=shard_shape,
        inner_codecs=inner_codecs,
        index_location=location,
        index_codecs=index_codecs,
        index_checksum=index_names[-1] == "crc32c",
    )


def inner_meta(meta: dict[str, Any], layout: ShardLayout) -> dict[str, Any]:
    """The ``zarr.json`` an unsharded array of the inner chunks would have (its codecs)."""
    return {
        **meta,
        "codecs": layout.inner_codecs,
        "chunk_grid": {
            "name": "regular",
            "configuration": {"chunk_shape": list(layout.inner_chunks)},
        },
    }
