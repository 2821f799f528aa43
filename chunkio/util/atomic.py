"""Files written whole or not at all: a temporary file beside the target, renamed over it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["write_atomically"]

#: buffers per writev (POSIX guarantees at least 16; Linux takes 1024)
_IOV_MAX = 512


def write_atomically(path: str, parts: Sequence[Any], *, temp: str) -> None:
    """Write the buffers ``parts`` one after the other (one ``writev``, no copy into one
    ``bytes``) to ``temp``, which must not exist, then rename it to ``path``: a reader, or a
    process resuming after this one was killed, finds the old file or the new one, never half
    of one. On any failure ``temp`` is removed."""
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            _write_all(fd, [memoryview(p).cast("B") for p in parts])
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _write_all(fd: int, views: list[memoryview]) -> None:
    """``writev`` the views, again from where a short write stopped."""
    views = [v for v in views if v.nbytes]
    while views:
        done = os.writev(fd, views[:_IOV_MAX])
        while views and done >= views[0].nbytes:
            done -= views[0].nbytes
            views.pop(0)
        if done:
            views[0] = views[0][done:]
