"""How a Zarr v3 array's chunks are keyed, checked and decoded; chunk files written directly.

zarr-python's synchronous API runs every read through an event-loop thread and a generic codec
pipeline; for the chunk layouts chunkio decodes itself (``bytes`` -> at most one compressor ->
optional ``crc32c``, regular grid, default chunk keys) decoding in the calling thread is
several times faster and lets a chunk decode straight into the caller's buffer.
:class:`ChunkFiles` knows an array's chunk keys and how to check and decode one chunk's bytes;
the read engine (:mod:`chunkio.backends._zarr_engine`) uses it for every read, and
:mod:`chunkio.backends._zarr_writing` writes whole chunks the same way, byte for byte as
zarr would.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError
from ._checksum import crc32c
from .base import StageClock
from .codecs import Decode, zarr_decoder

__all__ = ["ChunkFiles"]


@dataclass(frozen=True)
class ChunkFiles:
    """Where one local Zarr v3 array keeps its chunks, and how to check and decode one."""

    array_dir: str
    array_name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    decompress: Decode | None
    checksum: bool
    separator: str

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> ChunkFiles | None:
        """Return the layout when the array's encoding is one this fast path handles."""
        codecs = list(meta.get("codecs") or [])
        grid = meta.get("chunk_grid", {})
        key_enc = meta.get("chunk_key_encoding", {})
        dtype_name = meta.get("data_type")
        if (
            not codecs
            or codecs[0].get("name") != "bytes"
            or grid.get("name") != "regular"
            or key_enc.get("name") != "default"
            or not isinstance(dtype_name, str)
            or meta.get("shape") is None
        ):
            return None
        dtype = np.dtype(dtype_name)
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        if dtype.itemsize > 1 and (endian != "little" or sys.byteorder != "little"):
            return None
        rest = codecs[1:]
        checksum = bool(rest) and rest[-1].get("name") == "crc32c"
        rest = rest[:-1] if checksum else rest
        decompress = zarr_decoder(rest[0]) if len(rest) == 1 else None
        if len(rest) > 1 or (rest and decompress is None):
            return None
        return cls(
            array_dir,
            name,
            tuple(int(s) for s in meta["shape"]),
            tuple(int(c) for c in grid.get("configuration", {}).get("chunk_shape", ())),
            dtype,
            decompress,
            checksum,
            (key_enc.get("configuration") or {}).get("separator", "/"),
        )

    def key(self, coords: tuple[int, ...]) -> str:
        """The chunk's key below the array (``c.0.1`` or ``c/0/1``)."""
        return self.separator.join(["c", *map(str, coords)])

    def path(self, coords: tuple[int, ...]) -> str:
        return os.path.join(self.array_dir, *self.key(coords).split("/"))

    def decode_bytes(
        self,
        data: bytes | memoryview,
        out: npt.NDArray[Any],
        *,
        where: str,
        clock: StageClock | None = None,
    ) -> None:
        """Verify and decode one stored chunk's bytes into ``out``: the whole chunk, or the
        valid rows of an edge chunk (stored padded to the full chunk shape, so decoded aside
        and its rows copied; so is a non-contiguous ``out``)."""
        whole = out.shape == self.chunks and out.flags.c_contiguous
        target = out if whole else np.empty(self.chunks, self.dtype)
        t1 = time.perf_counter()
        payload = self._verified(data, f"array {self.array_name!r}: {where}")
        t2 = time.perf_counter()
        flat = target.reshape(-1).view(np.uint8)
        try:
            if self.decompress is None:
                flat[...] = payload
            else:
                self.decompress(payload, flat)
        except Exception as err:
            raise CorruptChunkError(
                f"array {self.array_name!r}: {where} cannot be decoded "
                f"({type(err).__name__}: {err})"
            ) from err
        if not whole:
            out[...] = target[: len(out)]
        if clock is not None:
            clock.checksum += t2 - t1
            clock.decode += time.perf_counter() - t2

    def _verified(self, data: bytes | memoryview, where: str) -> npt.NDArray[np.uint8]:
        if not self.checksum:
            if not data:
                raise CorruptChunkError(f"{where} is empty")
            return np.frombuffer(data, dtype=np.uint8)
        if len(data) < 4:
            raise CorruptChunkError(
                f"{where} is truncated ({len(data)} bytes, a checksum alone takes 4)"
            )
        body = np.frombuffer(data, dtype=np.uint8)[:-4]
        if crc32c(body) != int.from_bytes(data[-4:], "little"):
            raise CorruptChunkError(
                f"{where} fails its crc32c checksum (the file is corrupt or truncated)"
            )
        return body
