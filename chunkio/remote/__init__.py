"""Byte ranges from object stores and HTTP (fsspec), in three parts that wrap each other:

* :mod:`~chunkio.remote.fetcher`: :class:`RangeFetcher`, concurrent range requests below one
  url, one fsspec filesystem per process;
* :mod:`~chunkio.remote.retry`: which failures are retried, how, and the typed errors;
* :mod:`~chunkio.remote.cache`: :class:`~chunkio.remote.cache.DiskCache`, a shared on-disk
  cache of fetched ranges that wraps the fetching.

Modules here may import :mod:`chunkio.util` and :mod:`chunkio.errors` only.
"""

from __future__ import annotations

from chunkio.errors import RemoteAccessError, RemoteError, RemoteNotFoundError, RemoteTimeoutError

from .fetcher import FetchStats, RangeFetcher

__all__ = [
    "FetchStats",
    "RangeFetcher",
    "RemoteAccessError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteTimeoutError",
]
