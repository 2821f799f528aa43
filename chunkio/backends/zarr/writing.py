"""Whole chunks and shards of local Zarr v3 arrays, encoded and written by chunkio itself.

zarr-python spends about a millisecond of event-loop and codec-pipeline overhead per chunk,
which dominated conversions of small fields. :class:`LocalChunkEncoder` writes chunk files and
:class:`LocalShardEncoder` whole shards (each inner chunk encoded as a chunk file would be,
then the index), byte for byte what zarr-python writes; each object is written atomically
(:func:`write_file`). Writes that do not cover whole chunks or shards use the zarr API.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.storage import LocalStore

from ...util.atomic import write_atomically
from .._checksum import crc32c
from ..base import ArraySpec, Writer
from ..codec_table import zarr_compressors, zarr_encoder
from .chunks import ChunkFiles
from .shard import InnerChunk, ShardLayout, inner_meta, shard_layout
from .sources import describe

__all__ = [
    "CHUNK_KEY_ENCODING",
    "LocalChunkEncoder",
    "LocalShardEncoder",
    "ZarrWriter",
    "whole_units",
    "write_file",
]

Compress = Callable[[Any], Any]


@dataclass(frozen=True)
class LocalChunkEncoder:
    """Encodes and writes whole chunks of an array chunked along axis 0 only.

    zarr-python spends about a millisecond of event-loop and codec-pipeline overhead per
    chunk, which dominated conversions of small fields (a label chunk holds a few bytes). The
    files are byte for byte what zarr-python writes (tests compare them), edge chunks padded
    with the fill value as zarr pads them. Writes that do not cover whole chunks use the zarr
    API. Reading is :mod:`chunkio.backends.zarr.engine`'s.
    """

    files: ChunkFiles
    compress: Compress | None

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalChunkEncoder | None:
        files = ChunkFiles.build(array_dir, name, meta)
        if (
            files is None
            or files.chunks[1:] != files.shape[1:]
            or meta.get("fill_value") not in (0, 0.0, False)
        ):
            return None
        codecs = list(meta["codecs"])[1:]
        if codecs and codecs[-1].get("name") == "crc32c":
            codecs = codecs[:-1]
        compress = zarr_encoder(codecs[0]) if codecs else None
        if codecs and compress is None:
            return None
        return cls(files, compress)

    def chunk_path(self, chunk: int) -> str:
        """The file of sample-axis chunk ``chunk``."""
        return self.files.path((chunk, *(0 for _ in self.files.shape[1:])))

    def covers(self, start: int, data: npt.NDArray[Any]) -> bool:
        """Whether ``data`` at row ``start`` is whole chunks (the array's last may be short)."""
        return whole_units(self.files, self.files.chunks[0], start, data)

    def write_rows(self, start: int, data: npt.NDArray[Any]) -> None:
        """Write the chunks that rows ``start .. start + len(data)`` fill (see :meth:`covers`)."""
        files = self.files
        rows = files.chunks[0]
        made: set[str] = set()
        for first in range(0, len(data), rows):
            part = np.ascontiguousarray(data[first : first + rows])
            if len(part) < rows:
                padded = np.zeros(files.chunks, files.dtype)
                padded[: len(part)] = part
                part = padded
            body, check = self.encode_chunk(part)
            path = self.chunk_path((start + first) // rows)
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
        check = crc32c(np.frombuffer(body, np.uint8)) if self.files.checksum else None
        return body, check


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
    parts = list(body) if isinstance(body, list) else [body]
    if checksum is not None:
        parts.append(checksum.to_bytes(4, "little"))
    write_atomically(path, parts, temp=f"{path}.{os.urandom(8).hex()}.partial")


@dataclass(frozen=True)
class LocalShardEncoder:
    """Encodes and writes whole shards of an array sharded along axis 0 only."""

    files: ChunkFiles  # the inner chunks (codecs, shape); ``files.path`` names shard objects
    layout: ShardLayout
    chunk: LocalChunkEncoder  # encodes one inner chunk

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> LocalShardEncoder | None:
        layout = shard_layout(meta, where=f"array {name!r}")
        if layout is None or layout.inner_chunks[1:] != tuple(meta["shape"])[1:]:
            return None  # unsharded, or split along more than the sample axis
        chunk = LocalChunkEncoder.build(array_dir, name, inner_meta(meta, layout))
        return None if chunk is None else cls(chunk.files, layout, chunk)

    @property
    def shard_rows(self) -> int:
        return self.layout.shard_shape[0]

    def shard_path(self, shard: int) -> str:
        return self.files.path((shard, *(0 for _ in self.files.shape[1:])))

    def covers(self, start: int, data: npt.NDArray[Any]) -> bool:
        """Whether ``data`` at row ``start`` is whole shards (the array's last may be short)."""
        return whole_units(self.files, self.shard_rows, start, data)

    def write_rows(self, start: int, data: npt.NDArray[Any]) -> None:
        """Write the shards that rows ``start .. start + len(data)`` fill (see :meth:`covers`).

        As zarr-python does, an inner chunk wholly past the array's end is not stored and the
        one that straddles it is padded with the fill value (zero)."""
        inner_rows, n_inner = self.layout.inner_chunks[0], self.layout.n_inner
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
        inner_rows = self.layout.inner_chunks[0]
        if not all(whole_units(self.files, inner_rows, start, rows) for start, rows in runs):
            return False
        n_inner = self.layout.n_inner
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
        if len(block) < self.layout.inner_chunks[0]:
            padded = np.zeros(self.layout.inner_chunks, block.dtype)
            padded[: len(block)] = block
            block = padded
        body, check = self.chunk.encode_chunk(block)
        return memoryview(body).cast("B"), b"" if check is None else check.to_bytes(4, "little")

    def _write_shard(self, shard: int, inner: Sequence[InnerChunk | None]) -> None:
        path = self.shard_path(shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(path, self.layout.parts(inner), None)


#: Chunk files are named ``c.<i>.<j>...`` in the array's folder (Zarr v3's default encoding
#: with its ``"."`` separator) rather than nested ``c/<i>/<j>/...`` folders: a new chunk costs
#: a file, not a folder per chunk per field to create and fsync (measured: mkdir and directory
#: fsyncs were ~20% of a 224 px image conversion). Any Zarr v3 reader reads both.
CHUNK_KEY_ENCODING: dict[str, Any] = {"name": "default", "separator": "."}


class ZarrWriter(Writer):
    """Creates and fills a chunkio Zarr v3 group (each process opens its own)."""

    def __init__(self, location: Any, *, storage_options: Mapping[str, Any] | None = None) -> None:
        self.location = describe(location)
        self._group = zarr.open_group(
            store=location,
            mode="a",
            zarr_format=3,
            storage_options=None if storage_options is None else dict(storage_options),
        )
        self._arrays: dict[str, Any] = {}
        self._encoders: dict[str, LocalChunkEncoder | LocalShardEncoder | None] = {}

    def create(self, spec: ArraySpec) -> None:
        self._encoders.pop(spec.name, None)
        shards = None
        if spec.shard_chunks is not None and spec.shard_chunks > 1:
            shards = (spec.shard_chunks * spec.chunks[0], *spec.chunks[1:])
        self._arrays[spec.name] = self._group.create_array(
            spec.name,
            shape=spec.shape,
            dtype=spec.dtype,
            chunks=spec.chunks,
            shards=shards,
            compressors=zarr_compressors(spec.compression),
            fill_value=0,
            overwrite=True,
            # An all-zero chunk must still be stored, so "missing" never means "zeros".
            config={"write_empty_chunks": True},
            chunk_key_encoding=CHUNK_KEY_ENCODING,
        )

    def _array(self, name: str) -> Any:
        arr = self._arrays.get(name)
        if arr is None:
            arr = zarr.open_array(
                self._group.store,
                path=f"{self._group.path}/{name}".strip("/"),
                mode="r+",
            )
            # open_array ignores `config` for an existing array (zarr 3.1): without this, a
            # worker's writer would silently skip all-zero chunks, which then read as missing.
            arr = arr.with_config({"write_empty_chunks": True})
            self._arrays[name] = arr
        return arr

    def write_block(self, name: str, start: int, data: npt.NDArray[Any]) -> None:
        encoder = self._encoder(name)
        if encoder is not None and encoder.covers(start, data):
            encoder.write_rows(start, data)
        else:
            self._array(name)[start : start + len(data)] = data

    def write_runs(self, name: str, runs: Sequence[tuple[int, npt.NDArray[Any]]]) -> bool:
        encoder = self._encoder(name)
        return isinstance(encoder, LocalShardEncoder) and encoder.write_runs(runs)

    def _encoder(self, name: str) -> LocalChunkEncoder | LocalShardEncoder | None:
        """Whole chunks (or shards) of a local array are encoded and written here, not
        through zarr."""
        if name not in self._encoders:
            arr = self._array(name)
            store = arr.store
            encoder: LocalChunkEncoder | LocalShardEncoder | None = None
            if isinstance(store, LocalStore):
                array_dir = os.path.join(str(store.root), *arr.path.split("/"))
                meta = arr.metadata.to_dict()
                if shard_layout(meta) is not None:
                    encoder = LocalShardEncoder.build(array_dir, name, meta)
                else:
                    encoder = LocalChunkEncoder.build(array_dir, name, meta)
            self._encoders[name] = encoder
        return self._encoders[name]

    def write_region(self, name: str, region: tuple[Any, ...], data: npt.NDArray[Any]) -> None:
        self._array(name)[region] = data

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        self._group.update_attributes(dict(attrs))

    def attrs(self) -> dict[str, Any]:
        return dict(self._group.attrs)

    def close(self) -> None:
        self._arrays.clear()
        self._encoders.clear()
