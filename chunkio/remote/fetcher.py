"""Concurrent byte-range reads below one url (fsspec), the fetching part of :mod:`chunkio.remote`.

:class:`RangeFetcher` reads many ``(key, start, stop)`` ranges below one root url
(``s3://bucket/prefix``, ``http(s)://host/path``, ``file:///path`` or a local path) at once::

    f = RangeFetcher("s3://bucket/data.zarr", storage_options={"anon": True})
    a, b = f.cat_ranges([("image/c/0/0", 0, 4096), ("zarr.json", None, None)])

* Concurrency: async filesystems (s3fs, HTTP) run up to ``max_concurrency`` requests at once on
  fsspec's event loop; others use that many threads. 16 by default: with 20 ms of latency per
  request, 16 in flight were 7-9x one at a time against a loopback S3 server, and more added
  nothing there (range requests: ``python -m benchmarks.bench_ranges``; the loader end to end:
  ``benchmarks/bench_remote.py``; the figures are in README.md, "Choosing the defaults").
* Retries: :class:`~chunkio.remote.retry.RetryPolicy`. s3fs's and botocore's own retries are
  switched off so that attempts are counted (``stats.requests``, ``stats.retries``) and bounded
  in one place; aiohttp still sends an idempotent request again once when its connection drops
  (a stale keep-alive connection), which a server sees as a second request within one attempt.
* Cache (``cache_dir`` and ``cache_bytes > 0``): :class:`~chunkio.remote.cache.DiskCache` wraps
  the fetching. Remote objects are taken as immutable (chunkio datasets are written once),
  which saves a HEAD per object; a local file's entries are keyed by its size and mtime too.
* Pickles (DataLoader workers); the fsspec filesystem is created lazily in each process
  (``skip_instance_cache``: an async filesystem made before ``fork`` is unusable after it).

s3fs is used, not obstore: both were server-bound at the same rates against moto on loopback,
and s3fs is the fsspec stack zarr already uses (one set of storage options and credentials,
http/local/gcs/... through the same code) without another compiled dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from chunkio.errors import OptionalDependencyError, RemoteError, RemoteNotFoundError

from .cache import DiskCache
from .retry import RetryPolicy, describe_range

__all__ = ["FetchStats", "RangeFetcher"]

T = TypeVar("T")
Range = tuple[str, int | None, int | None]


@dataclass
class FetchStats:
    """Counters of one :class:`RangeFetcher` in this process."""

    requests: int = 0  # requests sent, retries included (cache hits are not requests)
    bytes: int = 0  # payload bytes received
    retries: int = 0  # attempts repeated after a transient failure
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_range(start: int | None, stop: int | None) -> None:
    if stop is not None and stop < 0:
        raise ValueError(f"stop must be >= 0 or None, got {stop}")
    if start is not None and start < 0 and stop is not None:
        raise ValueError(f"a negative start (suffix) needs stop=None, got ({start}, {stop})")


def _first_error_raised(results: list[bytes | BaseException | None]) -> list[bytes | None]:
    for res in results:
        if isinstance(res, BaseException):
            raise res
    return [r for r in results if not isinstance(r, BaseException)]


class RangeFetcher:
    """Concurrent, retried, optionally cached byte-range reads below one root url.

    ``url``: ``s3://bucket/prefix``, ``http(s)://host/path``, ``file:///path``, a local path,
    or anything else fsspec knows; keys are relative to it (``""``: the url itself).
    ``storage_options`` go to the fsspec filesystem (s3fs: ``key``, ``secret``, ``anon``,
    ``client_kwargs={"endpoint_url": ...}``, ...). ``timeout_s`` bounds each attempt.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        max_concurrency: int = 16,
        retries: int = 4,
        backoff_s: float = 0.05,
        timeout_s: float = 30.0,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int = 0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.max_concurrency = max_concurrency
        self.retry = RetryPolicy(retries, backoff_s, timeout_s)
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.cache_bytes = cache_bytes
        self.protocol, self.root = self._split(url)
        self.stats = FetchStats()
        self._init_process_state()

    # -- per-process state (not pickled) --------------------------------------------------------

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._fs: Any = None
        self._pid = -1
        self._executor: ThreadPoolExecutor | None = None
        self._cache: DiskCache | None = None
        if self.cache_dir is not None and self.cache_bytes > 0:
            self._cache = DiskCache(
                self.cache_dir, self.cache_bytes, ident=self._cache_ident, count=self._count
            )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_lock", "_fs", "_pid", "_executor", "_cache"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_process_state()

    def close(self) -> None:
        """Close this process's connections now (else at garbage collection); reusable after."""
        with self._lock:
            fs, self._fs = self._fs, None
            executor, self._executor = self._executor, None
            mine = self._pid == os.getpid()
        if executor is not None:
            executor.shutdown(wait=False)
        if fs is None or not mine or not getattr(fs, "async_impl", False):
            return
        from fsspec.asyn import sync

        creator = getattr(fs, "_s3creator", None)  # s3fs
        session = getattr(fs, "_session", None)  # fsspec's HTTPFileSystem
        with contextlib.suppress(Exception):
            if creator is not None and getattr(fs, "_s3", None) is not None:
                sync(fs.loop, creator.__aexit__, None, None, None, timeout=5)
                fs._s3 = None
            elif session is not None and not getattr(session, "closed", True):
                sync(fs.loop, session.close, timeout=5)

    def __enter__(self) -> RangeFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RangeFetcher({self.url!r}, max_concurrency={self.max_concurrency})"

    @staticmethod
    def _split(url: str) -> tuple[str, str]:
        try:
            from fsspec.core import split_protocol
        except ImportError as e:  # pragma: no cover - fsspec comes with zarr
            raise OptionalDependencyError("remote reads need fsspec: pip install fsspec") from e
        protocol, path = split_protocol(url)
        if protocol is None or protocol in ("file", "local"):
            return "file", os.path.abspath(os.path.expanduser(path))
        if protocol in ("http", "https"):
            return protocol, url.rstrip("/")
        if protocol == "s3a":
            protocol = "s3"
        return protocol, path.rstrip("/")

    def _options(self) -> dict[str, Any]:
        opts = dict(self.storage_options)
        if self.protocol in ("s3", "s3a"):
            # one place retries and bounds attempts: botocore's own are off (s3fs's: below)
            opts.setdefault("max_concurrency", 1)  # whole objects: no extra HEAD first
            config = dict(opts.get("config_kwargs") or {})
            config.setdefault("retries", {"total_max_attempts": 1})
            config.setdefault("connect_timeout", self.retry.timeout_s)
            config.setdefault("read_timeout", self.retry.timeout_s)
            # botocore pools 10 connections by default: fewer than max_concurrency
            config.setdefault("max_pool_connections", max(10, self.max_concurrency))
            opts["config_kwargs"] = config
        return opts

    @property
    def fs(self) -> Any:
        """This process's fsspec filesystem (made on first use, again after a fork)."""
        pid = os.getpid()
        if self._fs is None or self._pid != pid:
            with self._lock:
                if self._fs is None or self._pid != pid:
                    try:
                        import fsspec

                        fs = fsspec.filesystem(
                            self.protocol, skip_instance_cache=True, **self._options()
                        )
                        if self.protocol == "s3":
                            fs.retries = 1  # s3fs's own retry loop (a class attribute)
                        self._fs = fs
                    except ImportError as e:
                        raise OptionalDependencyError(
                            f"reading {self.url} needs the fsspec backend for "
                            f"{self.protocol!r}: pip install 'chunkio[remote]' ({e})"
                        ) from e
                    self._executor = None
                    self._pid = pid
        return self._fs

    def _path(self, key: str) -> str:
        key = key.lstrip("/")
        if not key:
            return self.root
        return f"{self.root}/{key}"

    def full_url(self, key: str) -> str:
        path = self._path(key)
        if self.protocol in ("http", "https"):
            return path
        return f"{self.protocol}://{path}"

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _run(self, coro_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        from fsspec.asyn import sync

        fs = self.fs
        return sync(fs.loop, coro_fn, *args, timeout=None)  # type: ignore[no-any-return]

    def _is_async(self) -> bool:
        return bool(getattr(self.fs, "async_impl", False))

    # -- public API -----------------------------------------------------------------------------

    def cat_ranges(self, requests: Sequence[Range]) -> list[bytes]:
        """Bytes of each ``(key, start, stop)``, fetched concurrently, in order.

        ``start``/``stop`` as in slicing (``stop`` exclusive; ``None``: from the start / to the
        end); a negative ``start`` with ``stop=None`` is the last ``-start`` bytes. The first
        failure (after its retries) is raised; the ranges that did arrive are cached anyway.
        """
        return [b"" if b is None else b for b in self._ranges(requests, missing_ok=False)]

    def cat_ranges_or_none(self, requests: Sequence[Range]) -> list[bytes | None]:
        """:meth:`cat_ranges`, with ``None`` for each object that does not exist (other
        failures are raised)."""
        return self._ranges(requests, missing_ok=True)

    def _ranges(self, requests: Sequence[Range], *, missing_ok: bool) -> list[bytes | None]:
        reqs = [(str(k), s, e) for k, s, e in requests]
        for _, s, e in reqs:
            _check_range(s, e)
        out: list[bytes | None] = [b""] * len(reqs)
        todo = [i for i, (_, s, e) in enumerate(reqs) if s is None or e is None or e > s >= 0]
        if not todo:
            return out
        wanted = [reqs[i] for i in todo]

        def fetch(ranges: list[Range]) -> list[bytes | BaseException | None]:
            results = self._fetch_many(ranges)
            if not missing_ok:
                return list(results)
            return [None if isinstance(r, RemoteNotFoundError) else r for r in results]

        if self._cache is not None:
            got = self._cache.cat_ranges(wanted, fetch)
        else:
            got = _first_error_raised(fetch(wanted))
        for i, data in zip(todo, got, strict=True):
            out[i] = data
        return out

    def get(self, key: str) -> bytes:
        """The whole object ``key``."""
        return self.cat_ranges([(key, None, None)])[0]

    def get_objects(self, keys: Sequence[str]) -> list[bytes | None]:
        """Whole objects ``keys``, fetched concurrently and never cached (metadata documents:
        they change when a dataset is rewritten); ``None`` for each one that does not exist.
        Any other failure (after its retries) is raised."""
        results = self._fetch_many([(str(k), None, None) for k in keys])
        out: list[bytes | None] = []
        for res in results:
            if isinstance(res, RemoteNotFoundError):
                out.append(None)
            elif isinstance(res, BaseException):
                raise res
            else:
                out.append(res)
        return out

    def size(self, key: str) -> int:
        """Size in bytes of ``key`` (one HEAD / stat)."""
        info = self._info(key)
        size = info.get("size")
        if size is None:
            raise RemoteError(errno.EIO, f"no size known for {self.full_url(key)}")
        return int(size)

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists (access and other errors are raised, not ``False``)."""
        try:
            self._info(key)
        except RemoteNotFoundError:
            return False
        return True

    def _info(self, key: str) -> dict[str, Any]:
        path, what = self._path(key), self.full_url(key)
        if self._is_async():
            fs = self.fs

            async def go() -> dict[str, Any]:
                info: dict[str, Any] = await self.retry.run_async(
                    lambda: fs._info(path), what, self._count
                )
                return info

            return self._run(go)
        info: dict[str, Any] = self.retry.run_sync(lambda: self.fs.info(path), what, self._count)
        return info

    # -- fetching -------------------------------------------------------------------------------

    def _fetch_many(self, reqs: list[Range]) -> list[bytes | BaseException]:
        if self._is_async():
            return self._run(self._fetch_many_async, reqs)
        if len(reqs) == 1 or self.max_concurrency == 1:
            return [self._fetch_one_sync(r) for r in reqs]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.max_concurrency, "chunkio-remote")
        futures = [self._executor.submit(self._fetch_one_sync, r) for r in reqs]
        return [f.result() for f in futures]

    def _check_length(self, data: bytes, start: int | None, stop: int | None) -> bytes:
        # a server that ignores Range answers 200 with the whole object: cut it here
        if start is not None and start >= 0 and stop is not None and len(data) > stop - start:
            return data[start:stop]
        return data

    def _fetch_one_sync(self, req: Range) -> bytes | BaseException:
        key, start, stop = req
        path, what = self._path(key), describe_range(self.full_url(key), start, stop)
        try:
            data = self.retry.run_sync(
                lambda: self.fs.cat_file(path, start=start, end=stop), what, self._count
            )
        except RemoteError as e:
            return e
        data = self._check_length(bytes(data), start, stop)
        self._count(bytes=len(data))
        return data

    async def _fetch_many_async(self, reqs: list[Range]) -> list[bytes | BaseException]:
        fs = self.fs
        sem = asyncio.Semaphore(self.max_concurrency)

        async def one(req: Range) -> bytes | BaseException:
            key, start, stop = req
            path, what = self._path(key), describe_range(self.full_url(key), start, stop)
            async with sem:
                try:
                    data = await self.retry.run_async(
                        lambda: fs._cat_file(path, start=start, end=stop), what, self._count
                    )
                except RemoteError as e:
                    return e
            data = self._check_length(bytes(data), start, stop)
            self._count(bytes=len(data))
            return data

        return list(await asyncio.gather(*(one(r) for r in reqs)))

    def _cache_ident(self, key: str, start: int | None, stop: int | None) -> str:
        """What a range is cached under: root url, key, range and, for a local file (cheap to
        ask), its size and mtime."""
        version = ""
        if self.protocol == "file":
            with contextlib.suppress(OSError):
                st = os.stat(self._path(key))
                version = f"{st.st_size}:{st.st_mtime_ns}"
        return f"{self.protocol}://{self.root}\0{key.lstrip('/')}\0{start}\0{stop}\0{version}"
