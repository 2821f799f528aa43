"""One forked child per read: crash and hang isolation for the fuzz runner.

:func:`in_child` forks, runs a function in the child (its own process group, so that loader
workers it starts die with it) and returns ``("done", result)``, ``("crash", signal)`` or
``("hang", None)``. The result travels back pickled through a pipe, length first, so that
workers still holding the pipe open cannot keep the parent waiting for an end of file.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import time
import traceback
from collections.abc import Callable
from typing import Any

_LEN = struct.Struct("<Q")


def in_child(fn: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """``fn()`` run in a forked child: ``("done", value)`` (an exception ``fn`` raises is
    returned as ``{"raised": ...}``), ``("crash", signal_number)`` for a death by signal or
    an exit without a result, or ``("hang", None)`` past ``timeout`` seconds."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's frames
        code = 0
        try:
            os.close(r)
            os.setpgid(0, 0)
            _die_with_parent()
            try:
                value: Any = fn()
            except BaseException as err:  # everything, MemoryError included, is a verdict
                value = {"raised": describe(err)}
            data = pickle.dumps(value)
            os.write(w, _LEN.pack(len(data)))
            view = memoryview(data)
            while view:
                view = view[os.write(w, view) :]
        except BaseException:  # pragma: no cover - the result itself could not be sent
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    try:
        data, status = _receive(r, pid, time.monotonic() + timeout)
    finally:
        os.close(r)
    if data is not None and status is None:
        status = _reap(pid, time.monotonic() + 5.0)
    _kill_group(pid)
    if data is not None:
        return "done", pickle.loads(data)
    if status is None:  # past the timeout: killed, with its whole group
        os.waitpid(pid, 0)
        return "hang", None
    if os.WIFSIGNALED(status):
        return "crash", os.WTERMSIG(status)
    return "crash", -os.WEXITSTATUS(status)  # exited without a result


def _receive(r: int, pid: int, deadline: float) -> tuple[bytes | None, int | None]:
    """The child's result and, where it has ended, its wait status; ``(None, None)`` past
    the deadline. The child is polled too: its loader workers may hold the pipe open after
    it died."""
    buf = b""
    want: int | None = None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r], [], [], 0.05)
        part = os.read(r, 1 << 20) if ready else b""
        buf += part
        if want is None and len(buf) >= _LEN.size:
            want = _LEN.unpack(buf[: _LEN.size])[0]
        if want is not None and len(buf) >= _LEN.size + want:
            return buf[_LEN.size : _LEN.size + want], None
        if not part:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return None, status
    os.killpg(pid, signal.SIGKILL)
    return None, None


def _reap(pid: int, deadline: float) -> int | None:
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.killpg(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _die_with_parent() -> None:
    """Linux: this child is killed when the runner dies (a runner killed by a test's timeout
    leaves no reader behind, hung or not)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_group(pid: int) -> None:
    """Whatever the child left behind in its group (loader workers) is killed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def describe(err: BaseException, store: str = "") -> dict[str, Any]:
    """An exception as the runner records it: its class (and whether it is one of chunkio's
    typed errors), message (a worker's error: its last line, the original's), whether the
    message names ``store`` (a file or folder name), and the traceback."""
    from chunkio.errors import ChunkioError

    text = str(err)
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return {
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "typed": isinstance(err, ChunkioError),
        "message": (text[:200] + " ... " + last[:300]) if "\n" in text else text[:500],
        "names_file": bool(store) and store in text,
        "traceback": "".join(traceback.format_exception(err))[-4000:],
    }
