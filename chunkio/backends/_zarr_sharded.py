"""Sharded Zarr v3 arrays on a local filesystem, read and written by chunkio itself.

A sharded array (codec ``sharding_indexed``, :mod:`._zarr_shard`) stores many *inner* chunks
in one object, a *shard*, followed by an index of ``(offset, nbytes)`` pairs. chunkio shards
along the sample axis only, so inner chunk ``c`` (chunkio's sample chunk) is inner chunk
``c % n`` of shard ``c // n``. Reading one is: the shard's index (read once per process and
shard, kept while the file's identity is unchanged), then one ``pread`` of its bytes, checked
and decoded exactly like an unsharded chunk file. Writing encodes whole shards - each inner
chunk as :class:`~._zarr_local.LocalChunkEncoder` encodes a chunk file - and writes each shard
atomically, byte for byte what zarr-python writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import CorruptChunkError, MissingChunkError
from ._zarr_local import ChunkFiles, LocalChunkEncoder, whole_units, write_file
from ._zarr_shard import InnerChunk, ShardLayout, inner_range, parse_index, shard_layout
from .base import StageClock

__all__ = ["LocalShardDecoder", "LocalShardEncoder", "inner_meta"]


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


@dataclass
class LocalShardDecoder:
    """Reads and decodes inner chunks of an array sharded along axis 0 only."""

    files: ChunkFiles  # the inner chunks (codecs, shape); ``files.path`` names shard objects
    layout: ShardLayout
    #: shard -> (file identity, each inner chunk's (start, stop) or None), this process's cache
    _indexes: dict[int, tuple[tuple[int, int, int], list[tuple[int, int] | None]]] = field(
        default_factory=dict
    )

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalShardDecoder | None:
        layout = shard_layout(meta, where=f"array {name!r}")
        if layout is None or layout.inner_chunks[1:] != tuple(meta["shape"])[1:]:
            return None  # unsharded, or split along more than the sample axis
        files = ChunkFiles.build(array_dir, name, inner_meta(meta, layout))
        if files is None:
            return None
        return cls(files, layout)

    @property
    def chunk_rows(self) -> int:
        return self.layout.inner_chunks[0]

    def shard_path(self, shard: int) -> str:
        return self.files.path((shard, *(0 for _ in self.files.shape[1:])))

    def chunk_path(self, chunk: int) -> str:
        """The shard object that holds inner chunk ``chunk``."""
        return self.shard_path(chunk // self.layout.n_inner)

    def _index(self, shard: int, fd: int, path: str) -> list[tuple[int, int] | None]:
        st = os.fstat(fd)
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._indexes.get(shard)
        if cached is not None and cached[0] == identity:
            return cached[1]
        start, stop = self.layout.index_span(st.st_size)
        where = f"array {self.files.array_name!r}: shard {shard} in {path}"
        tail = os.pread(fd, stop - max(start, 0), max(start, 0)) if st.st_size else b""
        index = parse_index(
            tail,
            self.layout.n_inner,
            where=where,
            shard_size=st.st_size,
            checksum=self.layout.index_checksum,
            index_location=self.layout.index_location,
        )
        spans = [inner_range(index, i) for i in range(self.layout.n_inner)]
        self._indexes[shard] = (identity, spans)
        return spans

    def exists(self, chunk: int) -> bool:
        """Whether inner chunk ``chunk`` is stored (its shard exists and indexes it)."""
        shard, i = divmod(chunk, self.layout.n_inner)
        path = self.shard_path(shard)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return False
        try:
            return self._index(shard, fd, path)[i] is not None
        except CorruptChunkError:
            return False
        finally:
            os.close(fd)

    def read_chunk_into(
        self, chunk: int, out: npt.NDArray[Any], clock: StageClock | None = None
    ) -> None:
        """Decode inner chunk ``chunk`` into ``out`` (its valid rows only)."""
        rows_per = self.chunk_rows
        rows = min(rows_per, self.files.shape[0] - chunk * rows_per)
        shard, i = divmod(chunk, self.layout.n_inner)
        path = self.shard_path(shard)
        what = f"{chunk} (samples {chunk * rows_per}..{chunk * rows_per + rows - 1})"
        name = self.files.array_name
        t0 = time.perf_counter()
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as err:
            raise MissingChunkError(
                f"array {name!r}: chunk {what} is missing: shard {path} does not exist"
            ) from err
        try:
            span = self._index(shard, fd, path)[i]
            if span is None:
                raise MissingChunkError(
                    f"array {name!r}: chunk {what} is missing from shard {path} (its index "
                    "entry is empty)"
                )
            data = _pread(fd, span[0], span[1] - span[0])
        finally:
            os.close(fd)
        if len(data) != span[1] - span[0]:
            raise CorruptChunkError(
                f"array {name!r}: chunk {what} in shard {path}: read {len(data)} of "
                f"{span[1] - span[0]} bytes (the shard is truncated)"
            )
        if clock is not None:
            clock.read += time.perf_counter() - t0
        where = f"chunk {what} (inner chunk {i} of shard {path})"
        self.files.decode_bytes(data, out, where=where, clock=clock)


@dataclass(frozen=True)
class LocalShardEncoder:
    """Encodes and writes whole shards of an array sharded along axis 0 only."""

    decoder: LocalShardDecoder
    chunk: LocalChunkEncoder  # encodes one inner chunk

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalShardEncoder | None:
        decoder = LocalShardDecoder.build(array_dir, name, meta)
        if decoder is None:
            return None
        chunk = LocalChunkEncoder.build(array_dir, name, inner_meta(meta, decoder.layout))
        return None if chunk is None else cls(decoder, chunk)

    @property
    def shard_rows(self) -> int:
        return self.decoder.layout.shard_shape[0]

    def covers(self, start: int, data: npt.NDArray[Any]) -> bool:
        """Whether ``data`` at row ``start`` is whole shards (the array's last may be short)."""
        return whole_units(self.decoder.files, self.shard_rows, start, data)

    def write_rows(self, start: int, data: npt.NDArray[Any]) -> None:
        """Write the shards that rows ``start .. start + len(data)`` fill (see :meth:`covers`).

        As zarr-python does, an inner chunk wholly past the array's end is not stored and the
        one that straddles it is padded with the fill value (zero)."""
        inner_rows, n_inner = self.decoder.layout.inner_chunks[0], self.decoder.layout.n_inner
        for first in range(0, len(data), self.shard_rows):
            part = data[first : first + self.shard_rows]
            inner = [
                self._inner(part[k * inner_rows : (k + 1) * inner_rows]) for k in range(n_inner)
            ]
            self._write_shard((start + first) // self.shard_rows, inner)

    def write_runs(self, runs: Sequence[tuple[int, npt.NDArray[Any]]]) -> bool:
        """Write the shards holding runs ``(start, rows)`` of whole inner chunks, and nothing
        else (the inner chunks between them are not stored); ``False``, writing nothing, if a
        run is not whole inner chunks of this array."""
        files, inner_rows = self.decoder.files, self.decoder.layout.inner_chunks[0]
        if not all(whole_units(files, inner_rows, start, rows) for start, rows in runs):
            return False
        n_inner = self.decoder.layout.n_inner
        shards: dict[int, list[InnerChunk | None]] = {}
        for start, rows in runs:
            for k in range(0, len(rows), inner_rows):
                chunk = (start + k) // inner_rows
                inner = shards.setdefault(chunk // n_inner, [None] * n_inner)
                inner[chunk % n_inner] = self._inner(rows[k : k + inner_rows])
        for shard, inner in sorted(shards.items()):
            self._write_shard(shard, inner)
        return True

    def _inner(self, rows: npt.NDArray[Any]) -> InnerChunk | None:
        """One inner chunk as stored (its body and crc32c), the array's last zero padded."""
        if not len(rows):
            return None
        block = np.ascontiguousarray(rows)
        if len(block) < self.decoder.layout.inner_chunks[0]:
            padded = np.zeros(self.decoder.layout.inner_chunks, block.dtype)
            padded[: len(block)] = block
            block = padded
        body, check = self.chunk.encode_chunk(block)
        return memoryview(body).cast("B"), b"" if check is None else check.to_bytes(4, "little")

    def _write_shard(self, shard: int, inner: Sequence[InnerChunk | None]) -> None:
        path = self.decoder.shard_path(shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(path, self.decoder.layout.parts(inner), None)


def _pread(fd: int, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    while len(data) < size:  # short reads: large spans, or signals
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data
