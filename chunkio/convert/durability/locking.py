"""One converter per destination: an ``flock`` on a sibling lock file.

``flock`` locks belong to the open file and the kernel drops them when the holder dies, even
by SIGKILL, so a lock file left behind never blocks anyone; the pid written into it is only
there to name the holder in the error.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

from ...errors import DestinationBusyError

__all__ = ["DestinationLock"]


class DestinationLock:
    """Exclusive, non-blocking lock at ``lock_path`` guarding ``target``.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> a = DestinationLock(os.path.join(d, ".x.lock"), "x")
    >>> a.acquire()
    >>> DestinationLock(os.path.join(d, ".x.lock"), "x").acquire()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chunkio.errors.DestinationBusyError: x: another conversion (pid ...) is writing ...
    >>> a.release()
    """

    def __init__(self, lock_path: str, target: str) -> None:
        self.lock_path = lock_path
        self.target = target
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DestinationBusyError` at once."""
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise DestinationBusyError(
                    f"{self.target}: another conversion (pid {holder}) is writing this "
                    f"destination; it holds the lock {self.lock_path}"
                ) from err
            # A releasing holder unlinks the file while still locking it: had we opened that
            # inode just before, our lock would be on a file nobody else can see. Retry.
            try:
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then drop the lock (idempotent)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)
        os.close(self._fd)
        self._fd = None
