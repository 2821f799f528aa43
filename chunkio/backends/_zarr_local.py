"""Direct chunk decoding and encoding for Zarr v3 arrays on a local filesystem.

zarr-python's synchronous API runs every read through an event-loop thread and a generic codec
pipeline; for the chunk layouts chunkio writes (``bytes`` -> one compressor -> ``crc32c``,
regular grid, default chunk keys, no sharding) reading the chunk file and decoding it in the
calling thread is several times faster and lets a chunk decode straight into the caller's
buffer. :class:`ChunkFiles` knows where an array's chunks are and how to check and decode one;
:class:`LocalChunkDecoder` reads whole sample-axis chunks, and
:mod:`chunkio.backends._zarr_region` reads N-D boxes. Arrays with any other encoding use the
zarr API (:mod:`chunkio.backends._zarr`); the backend contract tests check both paths agree.
:class:`LocalChunkEncoder` writes whole chunks the same way, byte for byte as zarr would.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError, MissingChunkError
from ._checksum import crc32c
from .base import StageClock

__all__ = ["ChunkFiles", "LocalChunkDecoder", "LocalChunkEncoder", "whole_units", "write_file"]

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
class ChunkFiles:
    """Where one local Zarr v3 array keeps its chunks, and how to check and decode one."""

    array_dir: str
    array_name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    decompress: Decompress | None
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
        decompress = _compressor(rest[0]) if len(rest) == 1 else None
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

    def path(self, coords: tuple[int, ...]) -> str:
        key = self.separator.join(["c", *map(str, coords)])
        return os.path.join(self.array_dir, *key.split("/"))

    def decode(
        self,
        coords: tuple[int, ...],
        target: npt.NDArray[Any],
        *,
        what: str,
        clock: StageClock | None = None,
        path: str | None = None,
    ) -> None:
        """Read, verify and decode chunk ``coords`` into ``target`` (see :meth:`decode_bytes`)."""
        path = path or self.path(coords)
        t0 = time.perf_counter()
        data = _read_file(path, self.array_name, what)
        if clock is not None:
            clock.read += time.perf_counter() - t0
        self.decode_bytes(data, target, where=f"chunk {what} in {path}", clock=clock)

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


def _read_file(path: str, array: str, what: str) -> bytes:
    """The whole file with one ``read`` into a fresh buffer: on Linux measured faster than
    reading into a reused one (and a chunk's bytes never outlive its decode)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as err:
        raise MissingChunkError(
            f"array {array!r}: chunk {what} is missing: {path} does not exist"
        ) from err
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size)
        while len(data) < size:  # pragma: no cover - reads of >2 GiB come in pieces
            more = os.read(fd, size - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


@dataclass(frozen=True)
class LocalChunkDecoder:
    """Reads and decodes whole chunks of an array chunked along axis 0 only."""

    files: ChunkFiles
    #: chunk ``c`` lives at ``prefix + str(c) + suffix`` (computed once, not per chunk)
    prefix: str = ""
    suffix: str = ""

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalChunkDecoder | None:
        files = ChunkFiles.build(array_dir, name, meta)
        if files is None or files.chunks[1:] != files.shape[1:]:
            return None  # chunked along more than the sample axis: see _zarr_region
        suffix = "".join(files.separator + "0" for _ in files.shape[1:]).replace("/", os.sep)
        first = files.path((0, *(0 for _ in files.shape[1:])))
        return cls(files, first[: len(first) - len(suffix) - 1], suffix)

    @property
    def chunk_rows(self) -> int:
        return self.files.chunks[0]

    def chunk_path(self, chunk: int) -> str:
        return self.prefix + str(chunk) + self.suffix

    def exists(self, chunk: int) -> bool:
        return os.path.exists(self.chunk_path(chunk))

    def read_chunk_into(
        self, chunk: int, out: npt.NDArray[Any], clock: StageClock | None = None
    ) -> None:
        """Decode chunk ``chunk`` into ``out`` (its valid rows only)."""
        step = self.chunk_rows
        rows = min(step, self.files.shape[0] - chunk * step)
        what = f"{chunk} (samples {chunk * step}..{chunk * step + rows - 1})"
        self.files.decode((chunk,), out, what=what, clock=clock, path=self.chunk_path(chunk))


Compress = Callable[[Any], Any]

_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _compressor_for_writing(codec: dict[str, Any]) -> Compress | None:
    """numcodecs' encoder configured exactly as zarr-python configures the same codec."""
    name, conf = codec["name"], codec.get("configuration") or {}
    if name == "zstd":
        zstd = numcodecs.Zstd(level=int(conf.get("level", 0)), checksum=bool(conf.get("checksum")))
        return zstd.encode  # type: ignore[no-any-return]
    if name == "blosc" and conf.get("shuffle", "noshuffle") in _BLOSC_SHUFFLE:
        typesize = conf.get("typesize")
        blosc = numcodecs.Blosc(
            cname=str(conf.get("cname", "lz4")),
            clevel=int(conf.get("clevel", 5)),
            shuffle=_BLOSC_SHUFFLE[conf.get("shuffle", "noshuffle")],
            blocksize=int(conf.get("blocksize", 0)),
            typesize=None if typesize is None else int(typesize),
        )
        return blosc.encode  # type: ignore[no-any-return]
    if name == "gzip":
        return numcodecs.GZip(level=int(conf.get("level", 5))).encode  # type: ignore[no-any-return]
    return None


@dataclass(frozen=True)
class LocalChunkEncoder:
    """Encodes and writes whole chunks of an array chunked along axis 0 only.

    The writing twin of :class:`LocalChunkDecoder`, for the same chunk layouts: zarr-python
    spends about a millisecond of event-loop and codec-pipeline overhead per chunk, which
    dominated conversions of small fields (a label chunk holds a few bytes). The files are
    byte for byte what zarr-python writes (tests compare them), edge chunks padded with the
    fill value as zarr pads them. Writes that do not cover whole chunks use the zarr API.
    """

    decoder: LocalChunkDecoder
    compress: Compress | None

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalChunkEncoder | None:
        decoder = LocalChunkDecoder.build(array_dir, name, meta)
        if decoder is None or meta.get("fill_value") not in (0, 0.0, False):
            return None
        codecs = list(meta["codecs"])[1:]
        if codecs and codecs[-1].get("name") == "crc32c":
            codecs = codecs[:-1]
        compress = _compressor_for_writing(codecs[0]) if codecs else None
        if codecs and compress is None:
            return None
        return cls(decoder, compress)

    def covers(self, start: int, data: npt.NDArray[Any]) -> bool:
        """Whether ``data`` at row ``start`` is whole chunks (the array's last may be short)."""
        return whole_units(self.decoder.files, self.decoder.files.chunks[0], start, data)

    def write_rows(self, start: int, data: npt.NDArray[Any]) -> None:
        """Write the chunks that rows ``start .. start + len(data)`` fill (see :meth:`covers`)."""
        files = self.decoder.files
        rows = files.chunks[0]
        made: set[str] = set()
        for first in range(0, len(data), rows):
            part = np.ascontiguousarray(data[first : first + rows])
            if len(part) < rows:
                padded = np.zeros(files.chunks, files.dtype)
                padded[: len(part)] = part
                part = padded
            body, check = self.encode_chunk(part)
            path = self.decoder.chunk_path((start + first) // rows)
            folder = os.path.dirname(path)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            write_file(path, body, check)

    def encode_chunk(self, part: npt.NDArray[Any]) -> tuple[Any, int | None]:
        """One full, C-contiguous chunk's stored bytes: the compressed body and its crc32c
        (``None`` without a checksum codec), which follows the body in the stored object."""
        payload = part.reshape(-1).view(np.uint8)
        body = payload if self.compress is None else self.compress(payload)
        check = crc32c(np.frombuffer(body, np.uint8)) if self.decoder.files.checksum else None
        return body, check


#: buffers per writev (POSIX guarantees at least 16; Linux takes 1024)
_IOV_MAX = 512


def _write_all(fd: int, views: list[memoryview]) -> None:
    """``writev`` the views, again from where a short write stopped."""
    views = [v for v in views if v.nbytes]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        while views and done >= views[0].nbytes:
            done -= views[0].nbytes
            views.pop(0)
        if done:
            views[0] = views[0][done:]


def whole_units(files: ChunkFiles, rows: int, start: int, data: npt.NDArray[Any]) -> bool:
    """Whether ``data`` written at row ``start`` of the array of ``files`` is whole units of
    ``rows`` rows (chunks or shards; the array's last may be short), of its dtype and shape."""
    stop = start + len(data)
    return (
        start % rows == 0
        and (len(data) % rows == 0 or stop == files.shape[0])
        and stop <= files.shape[0]
        and data.dtype == files.dtype
        and data.shape[1:] == files.shape[1:]
    )


def write_file(path: str, body: Any, checksum: int | None) -> None:
    """Write a chunk file atomically, as zarr's LocalStore does: a ``.partial`` file, renamed.

    ``body`` is a buffer, or a list of buffers written one after the other (no copy into one
    ``bytes``). A killed writer leaves the old file or the new one, never half of one (resume
    relies on it: see :attr:`chunkio.backends.Storage.atomic_chunks`).
    """
    tmp = f"{path}.{os.urandom(8).hex()}.partial"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            parts = list(body) if isinstance(body, list) else [body]
            if checksum is not None:
                parts.append(checksum.to_bytes(4, "little"))
            _write_all(fd, [memoryview(p).cast("B") for p in parts])
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
