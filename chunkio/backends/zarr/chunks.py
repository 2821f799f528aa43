"""How a Zarr v3 array's chunks are keyed, checked and decoded; chunk files written directly.

zarr-python's synchronous API runs every read through an event-loop thread and a generic codec
pipeline; for the chunk layouts chunkio decodes itself (``bytes`` -> at most one compressor ->
optional ``crc32c``, regular grid, default chunk keys) decoding in the calling thread is
several times faster and lets a chunk decode straight into the caller's buffer.
:class:`ChunkFiles` knows an array's chunk keys and how to check and decode one chunk's bytes;
the read engine (:mod:`chunkio.backends.zarr.engine`) uses it for every read, and
:mod:`chunkio.backends.zarr.writing` writes whole chunks the same way, byte for byte as
zarr would.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError
from .._checksum import crc32c
from ..base import StageClock
from ..codec_table import Decode, zarr2_codec, zarr2_decoder, zarr2_framing, zarr_decoder

__all__ = ["ChunkFiles"]


#: a whole chunk's checked stored bytes -> the decoded chunk (its full chunk shape)
DecodeChunk = Callable[[npt.NDArray[np.uint8]], npt.NDArray[Any]]


@dataclass(frozen=True)
class ChunkFiles:
    """Where one Zarr array keeps its chunks (v3, or v2), and how to check and decode one.

    Chunks whose stored bytes are the chunk's C-order, native-endian bytes behind at most one
    compressor (what chunkio writes, and most files) decode straight into the destination
    (``decompress``); any other chain chunkio can decode (v2 filters, F order, big-endian
    data, transposes, several compressors) goes through ``general``, which returns the chunk.
    """

    array_dir: str
    array_name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    decompress: Decode | None
    checksum: bool
    separator: str
    #: before the coordinates in a chunk key: ``c`` (Zarr v3 default keys) or nothing (v2)
    prefix: str = "c"
    general: DecodeChunk | None = None
    #: what a chunk never written holds (Zarr's contract for arrays chunkio did not write)
    fill_value: Any = 0

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> ChunkFiles | None:
        """The chunk layout of a ``zarr.json`` (or a v2 ``.zarray`` with ``zarr_format: 2``)
        as a dict; ``None`` where only zarr-python decodes the array."""
        try:
            if meta.get("zarr_format") == 2:
                return _build_v2(array_dir, name, meta)
            return _build_v3(array_dir, name, meta)
        except (TypeError, ValueError, KeyError):
            return None  # metadata chunkio does not understand: zarr-python's to judge

    def key(self, coords: tuple[int, ...]) -> str:
        """The chunk's key below the array (``c.0.1``, ``c/0/1``, v2: ``0.1``)."""
        parts = [str(c) for c in coords] or ["0"]
        return self.separator.join([self.prefix, *parts] if self.prefix else parts)

    def path(self, coords: tuple[int, ...]) -> str:
        return os.path.join(self.array_dir, *self.key(coords).split("/"))

    def decode_bytes(
        self,
        data: bytes | memoryview,
        out: npt.NDArray[Any],
        *,
        where: Callable[[], str],
        clock: StageClock | None = None,
    ) -> None:
        """Verify and decode one stored chunk's bytes into ``out``: the whole chunk, or the
        valid rows of an edge chunk (stored padded to the full chunk shape, so decoded aside
        and its rows copied; so is a non-contiguous ``out``). ``where()`` names the chunk in
        errors (built only then: a read decodes thousands of chunks that need no name)."""
        whole = out.shape == self.chunks and out.flags.c_contiguous and out.dtype == self.dtype
        target = out if whole else np.empty(self.chunks, self.dtype)
        t1 = time.perf_counter()
        payload = self._verified(data, where)
        t2 = time.perf_counter()
        flat = target.reshape(-1).view(np.uint8)
        try:
            if self.general is not None:
                target[...] = self.general(payload)
            elif self.decompress is None:
                if payload.size != flat.size:  # else NumPy would broadcast a 1-byte chunk
                    raise ValueError(f"{payload.size} stored bytes, expected {flat.size}")
                flat[...] = payload
            else:
                self.decompress(payload, flat)
        except Exception as err:
            raise CorruptChunkError(
                f"array {self.array_name!r}: {where()} cannot be decoded "
                f"({type(err).__name__}: {err})"
            ) from err
        if not whole:
            out[...] = target[: len(out)]
        if clock is not None:
            clock.checksum += t2 - t1
            clock.decode += time.perf_counter() - t2

    def _verified(
        self, data: bytes | memoryview, where: Callable[[], str]
    ) -> npt.NDArray[np.uint8]:
        name = self.array_name
        if not self.checksum:
            if not data:
                raise CorruptChunkError(f"array {name!r}: {where()} is empty")
            return np.frombuffer(data, dtype=np.uint8)
        if len(data) < 4:
            raise CorruptChunkError(
                f"array {name!r}: {where()} is truncated ({len(data)} bytes, a checksum alone "
                "takes 4)"
            )
        body = np.frombuffer(data, dtype=np.uint8)[:-4]
        if crc32c(body) != int.from_bytes(data[-4:], "little"):
            raise CorruptChunkError(
                f"array {name!r}: {where()} fails its crc32c checksum (the file is corrupt or "
                "truncated)"
            )
        return body


def _build_v3(array_dir: str, name: str, meta: dict[str, Any]) -> ChunkFiles | None:
    codecs = [dict(c) for c in meta.get("codecs") or []]
    grid = meta.get("chunk_grid", {})
    key_enc = meta.get("chunk_key_encoding", {})
    dtype_name = meta.get("data_type")
    if (
        grid.get("name") != "regular"
        or key_enc.get("name") not in ("default", "v2")
        or not isinstance(dtype_name, str)
        or meta.get("shape") is None
    ):
        return None
    dtype = np.dtype(dtype_name)
    chunks = tuple(int(c) for c in grid["configuration"]["chunk_shape"])
    transposes = []
    while codecs and codecs[0].get("name") == "transpose":
        transposes.append(tuple(int(a) for a in codecs.pop(0)["configuration"]["order"]))
    if not codecs or codecs[0].get("name") != "bytes":
        return None
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    rest = codecs[1:]
    checksum = bool(rest) and rest[-1].get("name") == "crc32c"
    rest = rest[:-1] if checksum else rest
    decoders = [d for c in rest if (d := zarr_decoder(c)) is not None]
    if len(decoders) != len(rest) or len(rest) > 1:
        return None  # a codec chunkio does not decode, or a chain of compressors
    stored = dtype.newbyteorder("<" if endian == "little" else ">")
    fast = not transposes and len(rest) <= 1 and (dtype.itemsize == 1 or _native(stored))
    v2_keys = key_enc.get("name") == "v2"
    sep = (key_enc.get("configuration") or {}).get("separator", "." if v2_keys else "/")
    general = None
    if not fast:
        general = _v3_pipeline(decoders[0] if decoders else None, stored, chunks, transposes)
    return ChunkFiles(
        array_dir,
        name,
        tuple(int(n) for n in meta["shape"]),
        chunks,
        dtype,
        decoders[0] if fast and decoders else None,
        checksum,
        sep,
        prefix="" if v2_keys else "c",
        general=general,
        fill_value=fill_value(meta.get("fill_value"), dtype),
    )


def _native(dtype: np.dtype[Any]) -> bool:
    return (dtype.isnative and sys.byteorder == "little") or dtype.itemsize == 1


def _v3_pipeline(
    decoder: Decode | None,
    stored: np.dtype[Any],
    chunks: tuple[int, ...],
    transposes: list[tuple[int, ...]],
) -> DecodeChunk:
    """The compressor undone, the bytes read in their byte order, then the transposes undone
    in reverse (each stored the chunk as ``chunk.transpose(order)``)."""
    shape = chunks
    for order in transposes:
        shape = tuple(shape[a] for a in order)
    nbytes = int(np.prod(chunks, dtype=np.int64)) * stored.itemsize

    def decode(payload: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        data = payload
        if decoder is not None:
            data = np.empty(nbytes, np.uint8)
            decoder(payload, data)
        arr = data.view(stored).reshape(shape)
        for order in reversed(transposes):
            arr = arr.transpose(np.argsort(order))
        return arr

    return decode


def _build_v2(array_dir: str, name: str, meta: dict[str, Any]) -> ChunkFiles | None:
    dtype_name = meta.get("dtype")
    if not isinstance(dtype_name, str):
        return None  # structured dtypes: zarr-python's (and refused for training anyway)
    stored = np.dtype(dtype_name)
    if stored.hasobject:
        return None
    chunks = tuple(int(c) for c in meta["chunks"])
    order = meta.get("order", "C")
    compressor = meta.get("compressor")
    filters = list(meta.get("filters") or [])
    decompress = zarr2_decoder(compressor) if compressor is not None else None
    plain = not filters and (order == "C" or sum(c > 1 for c in chunks) <= 1)
    fast = plain and _native(stored) and (compressor is None or decompress is not None)
    general = None if fast else _v2_pipeline(compressor, filters, stored, chunks, order)
    return ChunkFiles(
        array_dir,
        name,
        tuple(int(n) for n in meta["shape"]),
        chunks,
        stored.newbyteorder("=") if stored.itemsize > 1 else stored,
        decompress if fast else None,
        False,
        str(meta.get("dimension_separator") or "."),
        prefix="",
        general=general,
        fill_value=fill_value(meta.get("fill_value"), stored),
    )


def _v2_pipeline(
    compressor: dict[str, Any] | None,
    filters: list[dict[str, Any]],
    stored: np.dtype[Any],
    chunks: tuple[int, ...],
    order: str,
) -> DecodeChunk:
    """As zarr-python decodes a v2 chunk: the compressor, then the filters in reverse, then the
    bytes as ``dtype`` in the array's order (numcodecs does the decoding; the reader has
    already refused codecs that could run code unless trusted)."""
    codec = None if compressor is None else zarr2_codec(compressor)
    check = None if compressor is None else zarr2_framing(compressor)
    undo = [zarr2_codec(f) for f in reversed(filters)]
    nbytes = math.prod(chunks) * stored.itemsize

    def decode(payload: npt.NDArray[np.uint8]) -> npt.NDArray[Any]:
        if check is not None:  # its framing first: filters may change the size, so only
            check(payload, nbytes)  # a stream cut short is refused here; the reshape checks
        data: Any = payload if codec is None else codec.decode(payload)
        for f in undo:
            data = f.decode(data)
        raw = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else np.asarray(data)
        arr = np.ascontiguousarray(raw).reshape(-1).view(np.uint8).view(stored)
        return arr.reshape(chunks, order="F" if order == "F" else "C")

    return decode


_FILL_WORDS = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def fill_value(value: Any, dtype: np.dtype[Any]) -> Any:
    """A stored ``fill_value`` as a scalar of ``dtype`` (``None``, as zarr-python reads it:
    zero).

    >>> fill_value("NaN", np.dtype("float32")), fill_value(None, np.dtype("int16"))
    (np.float32(nan), np.int16(0))
    """
    if value is None:
        return np.zeros((), dtype)[()]
    if isinstance(value, str):
        value = _FILL_WORDS[value]
    return np.asarray(value).astype(dtype)[()]
