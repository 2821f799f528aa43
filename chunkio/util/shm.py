"""Named shared-memory segments: created by the main process, attached by workers by name.

Used by the batch ring (:mod:`chunkio.transport.ring`) and by windows' arrays held decoded
once for every worker (:mod:`chunkio.util.shared_stack`). Every segment chunkio creates is named
``/dev/shm/chunkio_<pid>_<random>``; only its creator unlinks it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import numpy.typing as npt

__all__ = ["SHM_PREFIX", "SegmentMapping", "attach", "create", "free_bytes", "populate"]

#: every segment chunkio creates is named ``/dev/shm/chunkio_<pid>_<random>``
SHM_PREFIX = "chunkio_"

#: ``madvise`` advice that maps every page of a range writable now (Linux 5.14+)
_MADV_POPULATE_WRITE = 23


def _madvise() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


_MADVISE = _madvise()


class SegmentMapping:
    """Owns one attached segment; numpy arrays made from it keep it (and so the map) alive.

    ``numpy.asarray`` of an object with ``__array_interface__`` records that object as the
    array's base, so the segment is unmapped only after the last view (a user's tensor
    included) is gone. Viewing ``SharedMemory.buf`` directly would instead make ``close()``
    fail with ``BufferError`` whenever a user still holds a batch.
    """

    def __init__(self, shm: SharedMemory) -> None:
        self.shm = shm
        probe = np.frombuffer(shm.buf, dtype=np.uint8)  # type: ignore[arg-type]
        self.address = int(probe.ctypes.data)
        del probe  # release the buffer export at once, or close() could never succeed
        self.__array_interface__ = {
            "shape": (shm.size,),
            "typestr": "|u1",
            "data": (self.address, False),
            "version": 3,
        }
        self.release_hooks: list[Callable[[], None]] = []

    def bytes(self) -> npt.NDArray[np.uint8]:
        """The whole segment as bytes (a view that keeps the mapping alive)."""
        return np.asarray(self)

    def __del__(self) -> None:
        # hooks first: memory registered with CUDA must be unregistered before it is unmapped
        for hook in reversed(self.release_hooks):
            with contextlib.suppress(Exception):  # nothing useful to do during teardown
                hook()
        self.shm.close()


def attach(name: str) -> SharedMemory:
    """The segment another process created (``FileNotFoundError`` once it is unlinked)."""
    if sys.version_info >= (3, 13):
        # the creator alone tracks (and unlinks) the segment
        return SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
    # Before 3.13 attaching registers the name with the resource tracker again; the tracker
    # keeps a set shared by this process tree, so the creator's unlink still unregisters it.
    return SharedMemory(name=name)


def create(nbytes: int) -> SharedMemory:
    """A new segment of ``nbytes`` (at least 1) that this process must unlink."""
    name = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    return SharedMemory(name=name, create=True, size=max(int(nbytes), 1))


def populate(address: int, nbytes: int) -> bool:
    """Map every page of ``[address, address + nbytes)`` (a shared mapping, page-aligned
    start) writable now, allocating the segment's pages not yet allocated, without changing
    a byte (``MADV_POPULATE_WRITE``). A batch written into never-touched shared pages pays a
    page fault per 4 KiB page (allocate, zero, map: at 128^3 patches the ring's first batches
    ran several times slower); this pays them in one call, at start-up. ``False`` where the
    kernel cannot (before Linux 5.14, not Linux) or refuses (no memory): nothing is done then
    and pages fault in as they are first written, as before.
    """
    if _MADVISE is None or nbytes <= 0:
        return False
    return _MADVISE(address, nbytes, _MADV_POPULATE_WRITE) == 0


def free_bytes() -> int | None:
    """Free bytes of ``/dev/shm`` (a too-small one fails later, as SIGBUS in a worker);
    ``None`` where there is none to measure (not Linux)."""
    if not os.path.isdir("/dev/shm"):
        return None
    return int(shutil.disk_usage("/dev/shm").free)
