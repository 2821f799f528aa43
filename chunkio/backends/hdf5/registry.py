"""Every HDF5 reader of this process, closed before it forks and before it exits.

HDF5 state must not cross a fork (pytorch/pytorch#11887, h5py#934): each reader registers
itself (:func:`register`), and just before this process forks every one is closed with its
lock held until the fork is done, so no thread reopens a file in between; a reader reopens
lazily on its next read. At exit they are closed before libhdf5's own exit handler runs.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Protocol

__all__ = ["open_hdf5_readers", "register"]


class _Reader(Protocol):
    _lock: threading.Lock

    @property
    def is_open(self) -> bool: ...

    def close(self) -> None: ...

    def _close_locked(self) -> None: ...


_readers: weakref.WeakSet[_Reader] = weakref.WeakSet()
_readers_lock = threading.Lock()
_held_at_fork: list[_Reader] = []


def register(reader: _Reader) -> None:
    """Close ``reader`` before this process forks and before it exits."""
    with _readers_lock:
        _readers.add(reader)


def open_hdf5_readers() -> int:
    """Number of HDF5 readers holding an open file in this process (for tests)."""
    return sum(1 for r in list(_readers) if r.is_open)


def _close_all_before_fork() -> None:
    # Take every reader's lock (waiting for reads in other threads to finish), close its file
    # and keep the lock until the fork is done, so no thread can reopen a file in between.
    with _readers_lock:
        readers = list(_readers)
    for reader in readers:
        reader._lock.acquire()
        _held_at_fork.append(reader)
        reader._close_locked()


def _release_after_fork() -> None:
    while _held_at_fork:
        _held_at_fork.pop()._lock.release()


os.register_at_fork(
    before=_close_all_before_fork,
    after_in_parent=_release_after_fork,
    after_in_child=_release_after_fork,
)


def _close_all_at_exit() -> None:
    # h5py objects still alive when the HDF5 library terminates (its own exit handler, after
    # Python's) are closed by HDF5 itself, in no particular order: a virtual dataset's creation
    # property list closed after the lists it refers to crashes the process (a segfault as a
    # spawned DataLoader worker exits). Closing every reader first releases them in order.
    with _readers_lock:
        readers = list(_readers)
    for reader in readers:
        reader.close()


atexit.register(_close_all_at_exit)
