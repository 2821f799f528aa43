"""Chunks of a remote Zarr v3 array (S3, HTTP, ... through fsspec), fetched by byte ranges.

zarr-python's generic path reads a remote array one chunk request at a time and, for shards,
through ``oindex``; here the chunks a read needs are fetched together, concurrently, by
:class:`~chunkio.remote.RangeFetcher`: whole chunk objects of an unsharded array, or, of a
sharded one, the shard's index once per process (a suffix range) and then the byte ranges of
the inner chunks, neighbours merged into one request. Each chunk's bytes are then checked and
decoded exactly like a local chunk file's (:class:`~._zarr_local.ChunkFiles`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import MissingChunkError
from ..remote import RangeFetcher, RemoteNotFoundError
from ._zarr_local import ChunkFiles
from ._zarr_shard import ShardLayout, inner_range, merged_ranges, parse_index, shard_layout
from ._zarr_sharded import inner_meta
from .base import StageClock

__all__ = ["MERGE_GAP", "PREFETCH_BATCHES", "RemoteChunkReader", "is_remote"]

#: inner chunks of one shard at most this many bytes apart are fetched in one request
MERGE_GAP = 256 << 10
#: announced batches fetched at the same time (each one's requests are concurrent already)
PREFETCH_BATCHES = 4


def is_remote(location: Any) -> bool:
    """Whether ``location`` is a URL of a remote filesystem (not a local path or ``file://``)."""
    if not isinstance(location, str) or "://" not in location:
        return False
    return location.split("://", 1)[0] not in ("file", "local", "memory")


@dataclass
class RemoteChunkReader:
    """Reads whole sample-axis chunks of one remote array chunked along axis 0 only."""

    fetcher: RangeFetcher
    key: str  # the array's key below the fetcher's url
    files: ChunkFiles  # the (inner) chunks' codecs
    layout: ShardLayout | None
    _indexes: dict[int, npt.NDArray[np.uint64]] = field(default_factory=dict)
    #: chunk -> its bytes being fetched ahead of the read that needs them (:meth:`prefetch`)
    _ahead: dict[int, Future[dict[int, bytes | memoryview]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _index_lock: threading.Lock = field(default_factory=threading.Lock)
    _pool: ThreadPoolExecutor | None = None

    @classmethod
    def build(
        cls, fetcher: RangeFetcher, key: str, name: str, meta: dict[str, Any]
    ) -> RemoteChunkReader | None:
        layout = shard_layout(meta, where=f"array {name!r}")
        files = ChunkFiles.build("", name, inner_meta(meta, layout) if layout else meta)
        if files is None or files.chunks[1:] != files.shape[1:]:
            return None
        return cls(fetcher, key, files, layout)

    @property
    def chunk_rows(self) -> int:
        return self.files.chunks[0]

    def _object_key(self, index: int) -> str:
        coords = (index, *(0 for _ in self.files.shape[1:]))
        return f"{self.key}/" + self.files.separator.join(["c", *map(str, coords)])

    @property
    def _shards(self) -> ShardLayout:
        """The shard layout (the methods that use it run for sharded arrays only)."""
        if self.layout is None:  # pragma: no cover - only sharded arrays have shards
            raise TypeError(f"array {self.files.array_name!r} is not sharded")
        return self.layout

    def _shard_indexes(self, shards: list[int]) -> None:
        """Fetch (concurrently) and check the indexes of ``shards`` not cached yet."""
        with self._index_lock:  # prefetch threads would otherwise fetch an index twice
            self._fetch_indexes([s for s in shards if s not in self._indexes])

    def _fetch_indexes(self, todo: list[int]) -> None:
        layout = self._shards
        if not todo:
            return
        size = layout.index_nbytes
        span = (0, size) if layout.index_location == "start" else (-size, None)
        try:
            tails = self.fetcher.cat_ranges([(self._object_key(s), *span) for s in todo])
        except RemoteNotFoundError as err:
            raise MissingChunkError(f"array {self.files.array_name!r}: {err}") from err
        for s, tail in zip(todo, tails, strict=True):
            url = self.fetcher.full_url(self._object_key(s))
            where = f"array {self.files.array_name!r}: shard {url}"
            self._indexes[s] = parse_index(
                tail,
                layout.n_inner,
                where=where,
                checksum=layout.index_checksum,
                index_location=layout.index_location,
            )

    def exists(self, chunk: int) -> bool:
        if self.layout is None:
            return self.fetcher.exists(self._object_key(chunk))
        shard, i = divmod(chunk, self.layout.n_inner)
        try:
            self._shard_indexes([shard])
        except MissingChunkError:
            return False
        return inner_range(self._indexes[shard], i) is not None

    def prefetch(self, chunks: list[int]) -> None:
        """Start fetching ``chunks`` in the background (a later read waits for them)."""
        with self._lock:
            todo = sorted({c for c in chunks if c not in self._ahead})
            if not todo:
                return
            if self._pool is None:
                # several announced batches in flight at once: with a slow link one at a time
                # left a worker ~1 batch of requests outstanding (bench_remote, 20 ms)
                self._pool = ThreadPoolExecutor(PREFETCH_BATCHES, "chunkio-prefetch")
            future = self._pool.submit(self._fetch, todo)
            for c in todo:
                self._ahead[c] = future

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._ahead.clear()

    def read_ranges(
        self,
        ranges: list[tuple[int, int]],
        out: npt.NDArray[Any],
        clock: StageClock | None = None,
    ) -> None:
        """Rows ``ranges`` (whole chunks, as chunkio reads them) into ``out``, in order."""
        step = self.chunk_rows
        wanted: list[tuple[int, int, int]] = []  # (chunk, rows, offset in out)
        offset = 0
        for start, stop in ranges:
            for first in range(start, stop, step):
                rows = min(step, stop - first)
                wanted.append((first // step, rows, offset))
                offset += rows
        t0 = time.perf_counter()
        payloads = self._fetched([c for c, _, _ in wanted])
        if clock is not None:
            clock.read += time.perf_counter() - t0
        for chunk, rows, at in wanted:
            where = f"chunk {chunk} at {self.fetcher.full_url(self._object_key(chunk))}"
            if self.layout is not None:
                shard = self._object_key(chunk // self.layout.n_inner)
                where = f"chunk {chunk} in shard {self.fetcher.full_url(shard)}"
            self.files.decode_bytes(payloads[chunk], out[at : at + rows], where=where, clock=clock)

    def _fetched(self, chunks: list[int]) -> dict[int, bytes | memoryview]:
        """The bytes of ``chunks``: prefetched ones (waited for), the others fetched now."""
        with self._lock:
            ahead = {c: self._ahead.pop(c) for c in chunks if c in self._ahead}
        got: dict[int, bytes | memoryview] = {}
        for c, future in ahead.items():
            with contextlib.suppress(Exception):  # fetched again below, raising its error
                got[c] = future.result()[c]
        missing = [c for c in chunks if c not in got]
        if missing:
            got.update(self._fetch(missing))
        return got

    def _fetch(self, chunks: list[int]) -> dict[int, bytes | memoryview]:
        """The stored bytes of ``chunks``: one concurrent batch of requests."""
        name = self.files.array_name
        unique = sorted(set(chunks))
        if self.layout is None:
            keys = [(self._object_key(c), None, None) for c in unique]
            try:
                got = self.fetcher.cat_ranges(keys)
            except RemoteNotFoundError as err:
                raise MissingChunkError(f"array {name!r}: {err}") from err
            return dict(zip(unique, got, strict=True))
        n = self.layout.n_inner
        by_shard: dict[int, list[int]] = {}
        for c in unique:
            by_shard.setdefault(c // n, []).append(c % n)
        # a shard read whole (small arrays, read entirely): one GET instead of index + range
        whole = [s for s, inner in by_shard.items() if self._wants_all(s, inner)]
        out = self._fetch_whole(whole)
        rest = {s: inner for s, inner in by_shard.items() if s not in whole}
        if not rest:
            return out
        self._shard_indexes(sorted(rest))
        requests: list[tuple[str, int, int]] = []
        members: list[tuple[int, int, list[int]]] = []  # (shard, start, inner chunks)
        for shard, inner in sorted(rest.items()):
            self._check_present(shard, inner)
            for start, stop, group in merged_ranges(self._indexes[shard], inner, gap=MERGE_GAP):
                requests.append((self._object_key(shard), start, stop))
                members.append((shard, start, group))
        try:
            blobs = self.fetcher.cat_ranges(requests)
        except RemoteNotFoundError as err:
            raise MissingChunkError(f"array {name!r}: {err}") from err
        for (shard, start, group), blob in zip(members, blobs, strict=True):
            view = memoryview(blob)
            for i in group:
                a, b = inner_range(self._indexes[shard], i) or (0, 0)
                out[shard * n + i] = view[a - start : b - start]
        return out

    def _inner_count(self, shard: int) -> int:
        """Inner chunks of ``shard`` within the array (the last shard may be partial)."""
        n = self._shards.n_inner
        return min(n, -(-self.files.shape[0] // self.chunk_rows) - shard * n)

    def _wants_all(self, shard: int, inner: list[int]) -> bool:
        """Whether ``inner`` is every chunk of ``shard`` and its index is not known yet."""
        return shard not in self._indexes and len(inner) == self._inner_count(shard)

    def _fetch_whole(self, shards: list[int]) -> dict[int, bytes | memoryview]:
        """Every inner chunk of ``shards``, each shard fetched whole (its index checked against
        the object's size: an entry past its end is named as such)."""
        layout = self._shards
        if not shards:
            return {}
        n, name = layout.n_inner, self.files.array_name
        keys = [self._object_key(s) for s in shards]
        try:
            blobs = self.fetcher.cat_ranges([(k, None, None) for k in keys])
        except RemoteNotFoundError as err:
            raise MissingChunkError(f"array {name!r}: {err}") from err
        out: dict[int, bytes | memoryview] = {}
        for shard, key, blob in zip(shards, keys, blobs, strict=True):
            where = f"array {name!r}: shard {self.fetcher.full_url(key)}"
            self._indexes[shard] = index = layout.parse_index(blob, where=where)
            inner = list(range(self._inner_count(shard)))
            self._check_present(shard, inner)
            view = memoryview(blob)
            for i in inner:
                a, b = inner_range(index, i) or (0, 0)
                out[shard * n + i] = view[a:b]
        return out

    def _check_present(self, shard: int, inner: list[int]) -> None:
        index, n = self._indexes[shard], self._shards.n_inner
        empty = [i for i in inner if inner_range(index, i) is None]
        if empty:
            raise MissingChunkError(
                f"array {self.files.array_name!r}: chunk {shard * n + empty[0]} is missing from "
                f"shard {self.fetcher.full_url(self._object_key(shard))} (empty index entry)"
            )
