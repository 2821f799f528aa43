"""Where a Zarr array's stored objects come from: local files, or an object store's byte ranges.

The one Zarr read engine (:mod:`chunkio.backends.zarr.engine`) asks a :class:`ByteSource` for
objects by key (``"c.0.1"``, relative to the array) as whole objects, byte ranges or suffixes,
a whole read's worth in one call: locally that is one ``read``/``pread`` per request, remotely
one concurrent round of range requests (:class:`~chunkio.remote.RangeFetcher`). Nothing here
knows chunks, shards or codecs.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Protocol

from ...remote import RangeFetcher

__all__ = [
    "ByteSource",
    "LocalFiles",
    "RemoteObjects",
    "Request",
    "Version",
    "describe",
    "is_remote",
]

#: ``(key, start, stop)``: ``None, None`` the whole object; ``-n, None`` its last ``n`` bytes
Request = tuple[str, int | None, int | None]
#: ``(stamp, size)`` of a stored object: the stamp changes when the object is replaced (``None``
#: where objects never change under a reader); the size in bytes where known without a request
Version = tuple[Hashable, int | None]

#: inner chunks of one remote shard at most this many bytes apart are fetched in one request
REMOTE_MERGE_GAP = 256 << 10


def describe(location: object) -> str:
    """A store location as messages name it: its path or URL, else the store object's repr."""
    return location if isinstance(location, str) else repr(location)


def is_remote(location: object) -> bool:
    """Whether ``location`` is a URL of a remote filesystem (not a local path or ``file://``)."""
    if not isinstance(location, str) or "://" not in location:
        return False
    return location.split("://", 1)[0] not in ("file", "local", "memory")


class ByteSource(Protocol):
    """Stored objects of one array, by key."""

    #: ranges of one object at most this many bytes apart are read as one (None: never)
    merge_gap: int | None
    #: a read's chunks are fetched in one round (a network), else one at a time, each decoded
    #: before the next is read
    batches: bool
    #: fetching ahead of a read pays (a network): :meth:`ArrayEngine.prefetch` does work
    prefetches: bool

    def where(self, key: str) -> str:
        """The path or URL of ``key``, for messages."""
        ...

    def fetch(self, requests: Sequence[Request]) -> list[bytes | None]:
        """The bytes of each request, in order; ``None`` where the object does not exist."""
        ...

    def version(self, key: str) -> Version:
        """What cached shard indexes are kept by (see :data:`Version`)."""
        ...

    def exists(self, key: str) -> bool: ...


class LocalFiles:
    """An array folder on a local filesystem."""

    #: each chunk read and decoded while hot in the CPU's caches: merged reads of whole runs
    #: of chunks, decoded after, measured ~10% slower on 1 MiB chunks (benchmarks/ab.py)
    merge_gap: int | None = None
    batches = False
    prefetches = False

    def __init__(self, array_dir: str) -> None:
        self.array_dir = array_dir
        self._paths: dict[str, str] = {}  # key -> path: asked for every chunk read

    def where(self, key: str) -> str:
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= 1 << 16:  # bounded: an array may have millions of chunks
                self._paths.clear()
            path = self._paths[key] = os.path.join(self.array_dir, *key.split("/"))
        return path

    def fetch(self, requests: Sequence[Request]) -> list[bytes | None]:
        return [self._read(self.where(key), start, stop) for key, start, stop in requests]

    def version(self, key: str) -> Version:
        try:
            st = os.stat(self.where(key))
        except FileNotFoundError:
            return None, None
        return (st.st_ino, st.st_mtime_ns), st.st_size

    def exists(self, key: str) -> bool:
        return os.path.exists(self.where(key))

    @staticmethod
    def _read(path: str, start: int | None, stop: int | None) -> bytes | None:
        """One ``read`` into a fresh buffer: on Linux measured faster than reading into a
        reused one (and a chunk's bytes never outlive its decode)."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        try:
            if start is None or stop is None:
                size = os.fstat(fd).st_size
                first = 0 if start is None else max(size + start, 0)
                return _pread(fd, first, size - first)
            return _pread(fd, start, stop - start)
        finally:
            os.close(fd)


def _pread(fd: int, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    while len(data) < size:  # short reads: large spans, or signals
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


class RemoteObjects:
    """An array below a URL, fetched by :class:`~chunkio.remote.RangeFetcher` (retries, the
    optional download cache and the request counts live there)."""

    merge_gap: int | None = REMOTE_MERGE_GAP
    batches = True
    prefetches = True

    def __init__(self, fetcher: RangeFetcher, prefix: str) -> None:
        self.fetcher = fetcher
        self.prefix = prefix.strip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        return self.fetcher.full_url(self._key(key))

    def fetch(self, requests: Sequence[Request]) -> list[bytes | None]:
        return self.fetcher.cat_ranges_or_none([(self._key(k), a, b) for k, a, b in requests])

    def version(self, key: str) -> Version:
        return None, None  # a remote reader assumes the dataset is not rewritten under it

    def exists(self, key: str) -> bool:
        return self.fetcher.exists(self._key(key))
