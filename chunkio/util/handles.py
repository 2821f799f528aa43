"""Per-process handles: the one rule every chunkio Dataset follows.

A dataset object carries only what pickles (paths, options); its *handle*, what holds the
open files (a :class:`~chunkio.read.ReadCore` around a backend reader), is created on first use
in each process, keyed by pid, and dropped when the dataset is pickled. So a dataset used in
the parent can be handed to DataLoader workers under fork, spawn or forkserver without sharing
a handle.
"""

from __future__ import annotations

import os
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["PerProcessHandle"]


class _Handle(Protocol):
    pid: int

    def close(self) -> None: ...


H = TypeVar("H", bound=_Handle)


class PerProcessHandle(Generic[H]):
    """Mixin: ``self._handle()`` returns this process's handle, made by ``_open_handle``."""

    _local: H | None = None

    def _open_handle(self) -> H:  # pragma: no cover - supplied by subclasses
        raise NotImplementedError

    def _handle(self) -> H:
        local = self._local
        if local is None or local.pid != os.getpid():
            local = self._open_handle()
            self._local = local
        return local

    def close(self) -> None:
        """Close this process's handle (the next read reopens it)."""
        if self._local is not None and self._local.pid == os.getpid():
            self._local.close()
        self._local = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None  # handles never travel between processes
        return state
