"""Named shared-memory segments: created by the main process, attached by workers by name.

Used by the batch ring (:mod:`chunkio.transport.ring`) and by windows' arrays held decoded
once for every worker (:mod:`chunkio.util.shared_stack`). Every segment chunkio creates is named
``/dev/shm/chunkio_<pid>_<random>``; only its creator unlinks it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import numpy.typing as npt

__all__ = ["SHM_PREFIX", "SegmentMapping", "attach", "create", "free_bytes"]

#: every segment chunkio creates is named ``/dev/shm/chunkio_<pid>_<random>``
SHM_PREFIX = "chunkio_"


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


def free_bytes() -> int | None:
    """Free bytes of ``/dev/shm`` (a too-small one fails later, as SIGBUS in a worker);
    ``None`` where there is none to measure (not Linux)."""
    if not os.path.isdir("/dev/shm"):
        return None
    return int(shutil.disk_usage("/dev/shm").free)
