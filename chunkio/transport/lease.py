"""A batch on loan from a transport, with the callback that returns its memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Lease", "as_lease"]


def _noop() -> None:
    return None


class Lease:
    """``batch`` stays valid until ``release()`` is called; release is idempotent and drops
    the lease's reference to the batch (a batch nobody else holds then counts as not kept).

    >>> freed = []
    >>> lease = Lease("batch", lambda: freed.append(1))
    >>> lease.release(); lease.release(); freed
    [1]
    """

    __slots__ = ("_release", "batch")

    def __init__(self, batch: Any, release: Callable[[], None] = _noop) -> None:
        self.batch = batch
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        release, self._release = self._release, None
        self.batch = None
        if release is not None:
            release()


def as_lease(item: Any) -> Lease:
    """``item`` itself if it is a :class:`Lease`, else a lease over memory nobody reuses."""
    return item if isinstance(item, Lease) else Lease(item)
