"""Concurrent byte-range reads from object stores and HTTP (fsspec), with retries and a cache.

:class:`RangeFetcher` reads many ``(key, start, stop)`` ranges below one root url
(``s3://bucket/prefix``, ``http(s)://host/path``, ``file:///path`` or a local path) at once::

    f = RangeFetcher("s3://bucket/data.zarr", storage_options={"anon": True})
    a, b = f.cat_ranges([("image/c/0/0", 0, 4096), ("zarr.json", None, None)])

* Concurrency: async filesystems (s3fs, HTTP) run up to ``max_concurrency`` requests at once on
  fsspec's event loop; others use that many threads.
* Retries: transient failures (5xx / SlowDown, connection reset or refused, timeouts, cut
  bodies) are retried ``retries`` times with exponential backoff (``backoff_s * 2**attempt``,
  jittered). s3fs's and botocore's own retries are switched off so that attempts are counted
  (``stats.requests``, ``stats.retries``) and bounded in one place; aiohttp still sends an
  idempotent request again once when its connection drops (a stale keep-alive connection),
  which a server sees as a second request within one attempt.
* Errors name the full url and range: :class:`RemoteNotFoundError` (404, NoSuchKey,
  NoSuchBucket), :class:`RemoteAccessError` (403, bad or expired credentials),
  :class:`RemoteTimeoutError` (no answer within ``timeout_s``, after the retries),
  :class:`RemoteError` for everything else.
* Cache (``cache_dir`` and ``cache_bytes > 0``): every fetched range is kept as one file,
  written atomically (temp file + ``os.replace``), so several processes can share a directory;
  hits touch the file's mtime and the least recently used files are deleted when the directory
  grows past ``cache_bytes`` (checked by this process when its own writes could have crossed
  the limit, so with several writers the limit is approximate). Entries are keyed by
  (root url, key, start, stop) and, for local files, the file's size and mtime; remote objects
  are taken as immutable (chunkio datasets are written once), which saves a HEAD per object.
  Failed reads are never cached.
* Pickles (DataLoader workers); the fsspec filesystem is created lazily in each process
  (``skip_instance_cache``: an async filesystem made before ``fork`` is unusable after it).

Measured (``python -m chunkio.testing.servers``): 256 ranges of 64 KiB of one object, moto in
a child process on loopback, every request through :mod:`chunkio.testing.servers`' ``LatencyProxy``
(0 or 20 ms added per request); best of 3; a shared 2-core machine (load 2.5-3), two runs::

    client    added latency  concurrency   requests/s    MiB/s
    s3fs       0 ms            1              178-187     11-12
    s3fs       0 ms           16              229-245     14-15
    s3fs       0 ms           64              221-271     14-17
    s3fs      20 ms            1               36          2.3
    s3fs      20 ms            4              124-129      8
    s3fs      20 ms           16              239-316     15-20
    s3fs      20 ms           32              212-320     13-20
    s3fs      20 ms           64              235-325     15-20
    obstore    0 ms            1              204-320     13-20
    obstore    0 ms           16              260-285     16-18
    obstore   20 ms            1               39-40       2.4-2.5
    obstore   20 ms           16              228-352     14-22

With 20 ms per request, one request at a time is latency-bound (~1/RTT: 36/s); 16 in flight
are 7-9x faster and reach what the server (moto, pure Python, sharing the 2 cores with client
and proxy) can answer at all, so 32 or 64 add nothing here. Real object stores take tens of ms
to a first byte but scale out, so concurrency matters more there, not less; 16 is the default:
enough to hide the latency of one reader, and few enough per process when a DataLoader runs
many workers (raise it for a single reader far away). s3fs is used, not obstore: both are
server-bound at the same rates here (obstore's Rust client only shows at concurrency 1 without
latency), and s3fs is the fsspec stack zarr already uses (one set of storage options and
credentials, http/local/gcs/... through the same code) without another compiled dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import random
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from chunkio.errors import (
    OptionalDependencyError,
    RemoteAccessError,
    RemoteError,
    RemoteNotFoundError,
    RemoteTimeoutError,
)

__all__ = [
    "FetchStats",
    "RangeFetcher",
    "RemoteAccessError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteTimeoutError",
]

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


_NOT_FOUND, _ACCESS, _TIMEOUT, _TRANSIENT, _FATAL = (
    "notfound",
    "access",
    "timeout",
    "retry",
    "fatal",
)
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "NotFound", "404", "NoSuchVersion"}
_ACCESS_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "AccountProblem",
    "403",
    "401",
}
_TRANSIENT_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "503",
    "500",
}
_TRANSIENT_NAMES = {  # by class name: no import of the optional packages needed
    "ClientConnectionError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "ClientOSError",
    "HTTPClientError",
    "EndpointConnectionError",
    "ConnectionClosedError",
    "IncompleteRead",
    "ResponseParserError",
    "ProxyConnectionError",
}
_TIMEOUT_NAMES = {"ReadTimeoutError", "ConnectTimeoutError", "FSTimeoutError", "ServerTimeoutError"}


def _status_and_code(exc: BaseException) -> tuple[int | None, str | None]:
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, Mapping):
        err = response.get("Error", {}) or {}
        meta = response.get("ResponseMetadata", {}) or {}
        status = meta.get("HTTPStatusCode")
        return (int(status) if status is not None else None), err.get("Code")
    status = getattr(exc, "status", None)  # aiohttp ClientResponseError
    if isinstance(status, int):
        return status, None
    return None, None


def _classify(exc: BaseException) -> str:
    """What kind of failure ``exc`` is, looking through its causes."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        status, code = _status_and_code(e)
        if code in _NOT_FOUND_CODES or status in (404, 410):
            return _NOT_FOUND
        if code in _ACCESS_CODES or status in (401, 403):
            return _ACCESS
        if code in _TRANSIENT_CODES or (status is not None and (status >= 500 or status == 429)):
            return _TRANSIENT
    for e in chain:
        names = {cls.__name__ for cls in type(e).__mro__}
        if isinstance(e, asyncio.TimeoutError | TimeoutError) or names & _TIMEOUT_NAMES:
            return _TIMEOUT
        if isinstance(e, FileNotFoundError):
            return _NOT_FOUND
        if isinstance(e, PermissionError):
            return _ACCESS
        if isinstance(e, ConnectionError) or names & _TRANSIENT_NAMES:
            return _TRANSIENT
        if isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT):
            return _TRANSIENT
    return _FATAL


def _describe(url: str, start: int | None, stop: int | None) -> str:
    if start is None and stop is None:
        return url
    if start is not None and start < 0 and stop is None:
        return f"{url} [last {-start} bytes]"
    return f"{url} [bytes {start or 0}:{'' if stop is None else stop}]"


def _wrap(exc: BaseException, what: str, attempts: int) -> RemoteError:
    kind = _classify(exc)
    detail = f"{type(exc).__name__}: {exc}"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    err: RemoteError
    if kind == _NOT_FOUND:
        err = RemoteNotFoundError(errno.ENOENT, f"not found: {what} ({detail})")
    elif kind == _ACCESS:
        err = RemoteAccessError(errno.EACCES, f"access denied: {what} ({detail})")
    elif kind == _TIMEOUT:
        err = RemoteTimeoutError(errno.ETIMEDOUT, f"timed out{tries}: {what} ({detail})")
    else:
        err = RemoteError(errno.EIO, f"remote read failed{tries}: {what} ({detail})")
    return err


def _check_range(start: int | None, stop: int | None) -> None:
    if stop is not None and stop < 0:
        raise ValueError(f"stop must be >= 0 or None, got {stop}")
    if start is not None and start < 0 and stop is not None:
        raise ValueError(f"a negative start (suffix) needs stop=None, got ({start}, {stop})")


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
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.max_concurrency = max_concurrency
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
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
        self._cache_estimate: int | None = None  # bytes in cache_dir as this process believes

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_lock", "_fs", "_pid", "_executor", "_cache_estimate"):
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
            config.setdefault("connect_timeout", self.timeout_s)
            config.setdefault("read_timeout", self.timeout_s)
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

    # -- retries --------------------------------------------------------------------------------

    def _delay(self, attempt: int) -> float:
        return float(self.backoff_s * (2**attempt) * (0.5 + random.random()))

    async def _retry_async(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        attempt = 0
        while True:
            self._count(requests=1)
            try:
                return await asyncio.wait_for(op(), self.timeout_s)
            except Exception as exc:
                kind = _classify(exc)
                if kind not in (_TRANSIENT, _TIMEOUT) or attempt >= self.retries:
                    raise _wrap(exc, what, attempt + 1) from exc
            self._count(retries=1)
            await asyncio.sleep(self._delay(attempt))
            attempt += 1

    def _retry_sync(self, op: Callable[[], T], what: str) -> T:
        attempt = 0
        while True:
            self._count(requests=1)
            try:
                return op()
            except Exception as exc:
                kind = _classify(exc)
                if kind not in (_TRANSIENT, _TIMEOUT) or attempt >= self.retries:
                    raise _wrap(exc, what, attempt + 1) from exc
            self._count(retries=1)
            time.sleep(self._delay(attempt))
            attempt += 1

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
        reqs = [(str(k), s, e) for k, s, e in requests]
        for _, s, e in reqs:
            _check_range(s, e)
        out: list[bytes | None] = [None] * len(reqs)
        todo: list[int] = []
        for i, (key, start, stop) in enumerate(reqs):
            if start is not None and stop is not None and 0 <= stop <= start:
                out[i] = b""
                continue
            hit = self._cache_get(key, start, stop)
            if hit is not None:
                out[i] = hit
            else:
                todo.append(i)
        if todo:
            results = self._fetch_many([reqs[i] for i in todo])
            first_error: BaseException | None = None
            for i, res in zip(todo, results, strict=True):
                if isinstance(res, BaseException):
                    first_error = first_error or res
                    continue
                out[i] = res
                self._cache_put(*reqs[i], res)
            if first_error is not None:
                raise first_error
        return [b if b is not None else b"" for b in out]

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
                info: dict[str, Any] = await self._retry_async(lambda: fs._info(path), what)
                return info

            return self._run(go)
        info: dict[str, Any] = self._retry_sync(lambda: self.fs.info(path), what)
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
        path, what = self._path(key), _describe(self.full_url(key), start, stop)
        try:
            data = self._retry_sync(lambda: self.fs.cat_file(path, start=start, end=stop), what)
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
            path, what = self._path(key), _describe(self.full_url(key), start, stop)
            async with sem:
                try:
                    data = await self._retry_async(
                        lambda: fs._cat_file(path, start=start, end=stop), what
                    )
                except RemoteError as e:
                    return e
            data = self._check_length(bytes(data), start, stop)
            self._count(bytes=len(data))
            return data

        return list(await asyncio.gather(*(one(r) for r in reqs)))

    # -- cache ----------------------------------------------------------------------------------

    @property
    def _caching(self) -> bool:
        return self.cache_dir is not None and self.cache_bytes > 0

    def _cache_file(self, key: str, start: int | None, stop: int | None) -> str:
        cache_dir = self._cache_dir()
        version = ""
        if self.protocol == "file":  # cheap: size + mtime of the local file
            with contextlib.suppress(OSError):
                st = os.stat(self._path(key))
                version = f"{st.st_size}:{st.st_mtime_ns}"
        ident = f"{self.protocol}://{self.root}\0{key.lstrip('/')}\0{start}\0{stop}\0{version}"
        digest = hashlib.sha256(ident.encode()).hexdigest()
        return os.path.join(cache_dir, digest[:2], digest[2:] + ".bin")

    def _cache_get(self, key: str, start: int | None, stop: int | None) -> bytes | None:
        if not self._caching:
            return None
        path = self._cache_file(key, start, stop)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)  # most recently used
        except OSError:  # absent, or evicted by another process meanwhile
            self._count(cache_misses=1)
            return None
        self._count(cache_hits=1)
        return data

    def _cache_put(self, key: str, start: int | None, stop: int | None, data: bytes) -> None:
        if not self._caching or len(data) > self.cache_bytes:
            return
        path = self._cache_file(key, start, stop)
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:  # a full or read-only cache must not fail the read
            return
        with self._lock:
            if self._cache_estimate is None:
                self._cache_estimate = self._cache_scan()[0]
            else:
                self._cache_estimate += len(data)
            over = self._cache_estimate > self.cache_bytes
        if over:
            self._cache_evict()

    def _cache_dir(self) -> str:
        if self.cache_dir is None:  # only called while caching
            raise RuntimeError(f"{self.url}: this RangeFetcher has no cache_dir")
        return self.cache_dir

    def _cache_scan(self) -> tuple[int, list[tuple[float, int, str]]]:
        cache_dir = self._cache_dir()
        total, entries = 0, []
        now = time.time()
        with contextlib.suppress(OSError), os.scandir(cache_dir) as top:
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

    def _cache_evict(self) -> None:
        """Delete least recently used files until the directory holds <= 90 % of the limit."""
        total, entries = self._cache_scan()
        target = int(self.cache_bytes * 0.9)
        evicted = 0
        if total > self.cache_bytes:
            entries.sort()
            for _, size, path in entries:
                if total <= target:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    evicted += 1
                total -= size
        with self._lock:
            self._cache_estimate = total
        if evicted:
            self._count(cache_evictions=evicted)
