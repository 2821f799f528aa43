"""A disk cache of fetched byte ranges that wraps a fetch, as fsspec's caching filesystems wrap
a filesystem: :meth:`DiskCache.cat_ranges` answers what it holds and passes the rest on.

Every fetched range is kept as one file, written atomically (temp file + ``os.replace``), so
several processes can share a directory; hits touch the file's mtime and the least recently used
files are deleted when the directory grows past ``limit`` bytes (checked by this process when
its own writes could have crossed the limit, so with several writers the limit is approximate).
Entries are keyed by a string the fetcher gives per range (its url, range and, for local files,
size and mtime). Failed reads are never cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence

from ..util.atomic import write_atomically

__all__ = ["DiskCache", "Fetch", "Range"]

#: ``(key, start, stop)``, as :meth:`chunkio.remote.RangeFetcher.cat_ranges` takes them
Range = tuple[str, int | None, int | None]
#: fetch ranges: each one's bytes, ``None`` for an object that does not exist (where the
#: caller asked so), or the error it failed with
Fetch = Callable[[list[Range]], list[bytes | BaseException | None]]


class DiskCache:
    """Byte ranges in ``directory``, at most about ``limit`` bytes in all."""

    def __init__(
        self,
        directory: str,
        limit: int,
        *,
        ident: Callable[[str, int | None, int | None], str],
        count: Callable[..., None],
    ) -> None:
        self.directory = directory
        self.limit = limit
        self._ident = ident  # the string a range is cached under
        self._count = count  # hits, misses and evictions go to the fetcher's statistics
        self._lock = threading.Lock()
        self._estimate: int | None = None  # bytes in the directory as this process believes

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.pop("_lock")
        state["_estimate"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def cat_ranges(self, requests: Sequence[Range], fetch: Fetch) -> list[bytes | None]:
        """Each range's bytes: from the cache, or fetched (all misses in one call) and kept
        (``None``: no such object, as ``fetch`` says). The first failure is raised; the ranges
        that did arrive are kept anyway."""
        out: list[bytes | None] = [self.get(*r) for r in requests]
        todo = [i for i, b in enumerate(out) if b is None]
        if todo:
            results = fetch([requests[i] for i in todo])
            first_error: BaseException | None = None
            for i, res in zip(todo, results, strict=True):
                if isinstance(res, BaseException):
                    first_error = first_error or res
                elif res is not None:
                    out[i] = res
                    self.put(*requests[i], res)
            if first_error is not None:
                raise first_error
        return out

    def _file(self, key: str, start: int | None, stop: int | None) -> str:
        digest = hashlib.sha256(self._ident(key, start, stop).encode()).hexdigest()
        return os.path.join(self.directory, digest[:2], digest[2:] + ".bin")

    def get(self, key: str, start: int | None, stop: int | None) -> bytes | None:
        path = self._file(key, start, stop)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)  # most recently used
        except OSError:  # absent, or evicted by another process meanwhile
            self._count(cache_misses=1)
            return None
        self._count(cache_hits=1)
        return data

    def put(self, key: str, start: int | None, stop: int | None, data: bytes) -> None:
        if len(data) > self.limit:
            return
        path = self._file(key, start, stop)
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            temp = os.path.join(directory, f".tmp-{os.urandom(8).hex()}")
            write_atomically(path, [data], temp=temp)  # processes share the directory
        except OSError:  # a full or read-only cache must not fail the read
            return
        with self._lock:
            if self._estimate is None:
                self._estimate = self._scan()[0]
            else:
                self._estimate += len(data)
            over = self._estimate > self.limit
        if over:
            self._evict()

    def _scan(self) -> tuple[int, list[tuple[float, int, str]]]:
        total, entries = 0, []
        now = time.time()
        with contextlib.suppress(OSError), os.scandir(self.directory) as top:
            for sub in top:
                if not sub.is_dir():
                    continue
                with contextlib.suppress(OSError), os.scandir(sub.path) as files:
                    for e in files:
                        try:
                            st = e.stat()
                        except OSError:
                            continue
                        if e.name.startswith(".tmp-"):
                            if now - st.st_mtime > 3600:  # left by a killed writer
                                with contextlib.suppress(OSError):
                                    os.unlink(e.path)
                            continue
                        total += st.st_size
                        entries.append((st.st_mtime, st.st_size, e.path))
        return total, entries

    def _evict(self) -> None:
        """Delete least recently used files until the directory holds <= 90 % of the limit."""
        total, entries = self._scan()
        target = int(self.limit * 0.9)
        evicted = 0
        if total > self.limit:
            entries.sort()
            for _, size, path in entries:
                if total <= target:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    evicted += 1
                total -= size
        with self._lock:
            self._estimate = total
        if evicted:
            self._count(cache_evictions=evicted)
