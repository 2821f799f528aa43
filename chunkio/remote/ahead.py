"""Fetches started before the reads that need them, shared by every remote read engine.

Over a network a read's chunks cost a round trip however fast they decode; a loader knows its
next batches, so their chunks can be on the way while this one decodes. :class:`FetchAhead`
runs a read engine's own fetch function (one concurrent round of range requests) on a few
background threads for announced chunks; the read that needs them takes what arrived (waiting
for what is on the way) and fetches the rest itself. A fetch ahead that failed is simply done
again by the read, which raises its error where it belongs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["PREFETCH_BATCHES", "FetchAhead"]

#: announced batches fetched at the same time (each one's requests are concurrent already)
PREFETCH_BATCHES = 4

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


class FetchAhead(Generic[K, P]):
    """``fetch(keys) -> {key: payload}`` run ahead for announced keys (chunks)."""

    def __init__(self, fetch: Callable[[list[K]], Mapping[K, P]]) -> None:
        self._fetch = fetch
        self._ahead: dict[K, Future[Mapping[K, P]]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def start(self, keys: Iterable[K]) -> None:
        """Start fetching ``keys`` not on the way yet, in the background (returns at once)."""
        with self._lock:
            todo = sorted(set(keys) - set(self._ahead))  # type: ignore[type-var]
            if not todo:
                return
            if self._pool is None:
                # several announced batches in flight at once: with a slow link one at a time
                # left a worker ~1 batch of requests outstanding (bench_remote, 20 ms)
                self._pool = ThreadPoolExecutor(PREFETCH_BATCHES, "chunkio-prefetch")
            future = self._pool.submit(self._fetch, todo)
            for key in todo:
                self._ahead[key] = future

    def take(self, wanted: Sequence[K]) -> dict[K, P]:
        """The payloads of ``wanted``: those fetched ahead (waited for), the rest now."""
        got: dict[K, P] = {}
        if self._ahead:
            with self._lock:
                ahead = {k: self._ahead.pop(k) for k in wanted if k in self._ahead}
            for key, future in ahead.items():
                with contextlib.suppress(Exception):  # fetched again below, raising its error
                    found = future.result()
                    if key in found:
                        got[key] = found[key]
        todo = [k for k in wanted if k not in got]
        if todo:
            got.update(self._fetch(todo))
        return got

    def close(self) -> None:
        """Stop the background fetches (those running finish; queued ones are dropped)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._ahead.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
