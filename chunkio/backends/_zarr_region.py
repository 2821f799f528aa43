"""Direct decoding of sub-boxes of Zarr v3 arrays chunked along several axes, on local disk.

The N-D counterpart of :mod:`chunkio.backends._zarr_local` (whose compressor table it
shares): volume patches are read as boxes of chunks, and zarr-python's synchronous API
costs milliseconds per call in event-loop round trips, more than decoding a 32^3 chunk. For
the encodings chunkio writes (``bytes`` -> one compressor -> ``crc32c``, C order, regular grid,
default chunk keys, no sharding) each chunk file is read, checked and decoded here, in the
calling thread; anything else goes through zarr. The backend contract tests run both paths.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError, MissingChunkError
from ._zarr_local import Decompress, _compressor

__all__ = ["RegionDecoder"]


@dataclass(frozen=True)
class RegionDecoder:
    """Reads boxes of one local Zarr v3 array, decoding each chunk of the box once."""

    array_dir: str
    array_name: str
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    decompress: Decompress | None
    checksum: bool
    separator: str

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> RegionDecoder | None:
        """A decoder when the array's encoding is one this path handles, else None."""
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
        ):
            return None
        dtype = np.dtype(dtype_name)
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        if dtype.itemsize > 1 and (endian != "little" or sys.byteorder != "little"):
            return None
        rest = codecs[1:]
        checksum = bool(rest) and rest[-1].get("name") == "crc32c"
        rest = rest[:-1] if checksum else rest
        if len(rest) > 1:
            return None
        decompress = _compressor(rest[0]) if rest else None
        if rest and decompress is None:
            return None
        chunks = tuple(int(c) for c in grid.get("configuration", {}).get("chunk_shape", ()))
        sep = (key_enc.get("configuration") or {}).get("separator", "/")
        return cls(array_dir, name, chunks, dtype, decompress, checksum, sep)

    def chunk_path(self, coords: tuple[int, ...]) -> str:
        key = self.separator.join(["c", *map(str, coords)])
        return os.path.join(self.array_dir, *key.split("/"))

    def read_region(self, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        """Decode the chunks of ``region`` and copy their part of it into ``out``."""
        spans = [
            range(s.start // c, -(-s.stop // c)) for s, c in zip(region, self.chunks, strict=True)
        ]
        buf = np.empty(self.chunks, self.dtype)
        for coords in itertools.product(*spans):
            self._decode(coords, buf)
            lo = [c * n for c, n in zip(coords, self.chunks, strict=True)]
            a = [max(s.start, x) for s, x in zip(region, lo, strict=True)]
            z = [min(s.stop, x + n) for s, x, n in zip(region, lo, self.chunks, strict=True)]
            src = tuple(slice(p - x, q - x) for p, q, x in zip(a, z, lo, strict=True))
            dst = tuple(
                slice(p - s.start, q - s.start) for p, q, s in zip(a, z, region, strict=True)
            )
            out[dst] = buf[src]

    def _decode(self, coords: tuple[int, ...], buf: npt.NDArray[Any]) -> None:
        path = self.chunk_path(coords)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError as err:
            raise MissingChunkError(
                f"array {self.array_name!r}: chunk {coords} is missing: {path} does not exist"
            ) from err
        payload = self._verified(data, coords, path)
        target = buf.reshape(-1).view(np.uint8)
        try:
            if self.decompress is None:
                target[...] = payload
            else:
                self.decompress(payload, target)
        except Exception as err:
            raise CorruptChunkError(
                f"array {self.array_name!r}: chunk {coords} in {path} cannot be decoded "
                f"({type(err).__name__}: {err})"
            ) from err

    def _verified(self, data: bytes, coords: tuple[int, ...], path: str) -> npt.NDArray[np.uint8]:
        where = f"array {self.array_name!r}: chunk {coords} in {path}"
        if not self.checksum:
            if not data:
                raise CorruptChunkError(f"{where} is empty")
            return np.frombuffer(data, dtype=np.uint8)
        if len(data) < 4:
            raise CorruptChunkError(f"{where} is truncated ({len(data)} bytes)")
        body = np.frombuffer(data, dtype=np.uint8)[:-4]
        if google_crc32c.value(body) != int.from_bytes(data[-4:], "little"):
            raise CorruptChunkError(f"{where} fails its crc32c checksum (corrupt or truncated)")
        return body
