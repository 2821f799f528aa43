"""Direct chunk decoding for Zarr v3 arrays on a local filesystem.

zarr-python's synchronous API runs every read through an event-loop thread and a generic codec
pipeline; for the chunk layouts chunkio writes (``bytes`` -> one compressor -> ``crc32c``)
reading the chunk file and decoding it in the calling thread is several times faster and lets
a chunk decode straight into the caller's buffer. Arrays with any other codec chain use the
zarr API instead (see :mod:`chunkio.backends._zarr`); both paths are checked against each
other by the backend contract tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError, MissingChunkError

__all__ = ["LocalChunkDecoder"]

Decompress = Callable[[Any, Any], Any]


def _compressor(codec: dict[str, Any]) -> Decompress | None:
    name, conf = codec["name"], codec.get("configuration") or {}
    if name == "zstd":
        return numcodecs.Zstd(level=int(conf.get("level", 0))).decode  # type: ignore[no-any-return]
    if name == "blosc":
        return numcodecs.Blosc().decode  # type: ignore[no-any-return]
    if name == "gzip":
        return numcodecs.GZip().decode  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class LocalChunkDecoder:
    """Reads and decodes whole chunks of one array along axis 0 from a local directory."""

    array_dir: str
    array_name: str
    chunk_rows: int
    num_rows: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    decompress: Decompress | None
    checksum: bool
    separator: str

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalChunkDecoder | None:
        """Return a decoder when the array's encoding is one this fast path handles, else None."""
        codecs = list(meta.get("codecs") or [])
        grid = meta.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape")
        shape = meta.get("shape")
        key_enc = meta.get("chunk_key_encoding", {})
        if not codecs or codecs[0].get("name") != "bytes" or grid is None or shape is None:
            return None
        if key_enc.get("name") != "default":
            return None
        dtype = (
            np.dtype(meta.get("data_type", "V")) if isinstance(meta.get("data_type"), str) else None
        )
        if (
            dtype is None
            or dtype.byteorder == ">"
            or (dtype.itemsize > 1 and sys.byteorder != "little")
        ):
            return None
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        if dtype.itemsize > 1 and endian != "little":
            return None
        rest = codecs[1:]
        checksum = bool(rest) and rest[-1].get("name") == "crc32c"
        if checksum:
            rest = rest[:-1]
        decompress = None
        if rest:
            if len(rest) > 1:
                return None
            decompress = _compressor(rest[0])
            if decompress is None:
                return None
        if list(grid[1:]) != list(shape[1:]):
            return None  # chunked along more than the sample axis
        sep = (key_enc.get("configuration") or {}).get("separator", "/")
        return cls(
            array_dir,
            name,
            int(grid[0]),
            int(shape[0]),
            tuple(shape[1:]),
            dtype,
            decompress,
            checksum,
            sep,
        )

    def chunk_path(self, chunk: int) -> str:
        key = self.separator.join(["c", str(chunk), *("0" for _ in self.row_shape)])
        return os.path.join(self.array_dir, *key.split("/"))

    def read_chunk_into(self, chunk: int, out: npt.NDArray[Any]) -> None:
        """Decode chunk ``chunk`` into ``out`` (its valid rows only)."""
        path = self.chunk_path(chunk)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError as err:
            raise MissingChunkError(
                f"array {self.array_name!r}: chunk {chunk} (samples "
                f"{chunk * self.chunk_rows}..) is missing: {path} does not exist"
            ) from err
        payload = self._verified(data, chunk, path)
        rows = min(self.chunk_rows, self.num_rows - chunk * self.chunk_rows)
        full = rows == self.chunk_rows and out.flags.c_contiguous
        target = out if full else np.empty((self.chunk_rows, *self.row_shape), self.dtype)
        try:
            if self.decompress is None:
                target.reshape(-1).view(np.uint8)[...] = payload
            else:
                self.decompress(payload, target.reshape(-1).view(np.uint8))
        except Exception as err:
            raise CorruptChunkError(
                f"array {self.array_name!r}: chunk {chunk} in {path} cannot be decoded "
                f"({type(err).__name__}: {err})"
            ) from err
        if not full:
            out[...] = target[:rows]

    def _verified(self, data: bytes, chunk: int, path: str) -> npt.NDArray[np.uint8]:
        if not self.checksum:
            if not data:
                raise CorruptChunkError(
                    f"array {self.array_name!r}: chunk {chunk} in {path} is empty"
                )
            return np.frombuffer(data, dtype=np.uint8)
        if len(data) < 4:
            raise CorruptChunkError(
                f"array {self.array_name!r}: chunk {chunk} in {path} is truncated "
                f"({len(data)} bytes, a checksum alone takes 4)"
            )
        body = np.frombuffer(data, dtype=np.uint8)[:-4]
        stored = int.from_bytes(data[-4:], "little")
        if google_crc32c.value(body) != stored:
            raise CorruptChunkError(
                f"array {self.array_name!r}: chunk {chunk} in {path} fails its crc32c checksum "
                "(the file is corrupt or truncated)"
            )
        return body
