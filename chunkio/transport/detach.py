"""Kept batches stay intact: the memory under a batch still viewed when its slot comes round.

A batch the ring hands out is a set of views of a shared-memory slot, and every view a user
makes of it (slices, ``.numpy()``, views of views, a dict of them) points at the same
addresses. Those addresses cannot be re-pointed, so when a slot comes round while some of its
views are alive, the memory under them is changed instead (Linux): the region is copied into
fresh private pages, which ``mremap`` moves over the same addresses in one step. Every view
reads the same bytes before and after, and workers never write them again; the ring then maps
the slot's shared region afresh, at another address, for its next batches.

:class:`KeptViews` tells which regions need it: the arrays a batch's tensors were made from
(``torch.from_numpy`` holds its array for as long as any tensor or ``.numpy()`` view of that
memory lives) are watched through weak references. A batch nobody kept costs one weak
reference per field and no copy.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PAGE", "KeptViews", "can_detach", "map_region", "privatise"]

#: regions are moved page by page: a field region that may be detached owns whole pages
PAGE = mmap.PAGESIZE

_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mremap.restype = ctypes.c_void_p
        libc.mremap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):  # a libc without mremap
        return None
    return libc


_LIBC = _libc()


def can_detach() -> bool:
    """Whether this platform can move a kept batch's memory out of the ring (Linux)."""
    return _LIBC is not None


def privatise(address: int, nbytes: int) -> None:
    """Replace the pages at ``[address, address + nbytes)`` by private copies of themselves.

    Views of that memory keep their addresses and contents; writes to the shared memory that
    was there no longer reach them. ``address`` and ``nbytes`` must be page-aligned. Raises
    ``OSError`` when the kernel refuses (nothing changed then).
    """
    if _LIBC is None:
        raise OSError("moving pages needs Linux (mremap)")
    if address % PAGE or nbytes % PAGE or nbytes <= 0:
        raise ValueError(
            f"a region to privatise must be whole pages of {PAGE} bytes; "
            f"got address {address:#x} and {nbytes} bytes"
        )
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    fresh = _LIBC.mmap(None, nbytes, prot, flags, -1, 0)
    if fresh in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"mmap of {nbytes} private bytes failed")
    ctypes.memmove(fresh, address, nbytes)
    # one step: a view read in another thread sees the shared or the private page, same bytes
    moved = _LIBC.mremap(fresh, nbytes, nbytes, _MREMAP_MAYMOVE | _MREMAP_FIXED, address)
    if moved != address:
        errno = ctypes.get_errno()
        _LIBC.munmap(fresh, nbytes)
        raise OSError(errno, f"mremap over {address:#x} ({nbytes} bytes) failed")


def map_region(name: str, offset: int, nbytes: int) -> npt.NDArray[np.uint8]:
    """Bytes ``[offset, offset + nbytes)`` of shared-memory segment ``name``, mapped anew.

    The array keeps the mapping alive (unmapped when the last view of it is gone).
    """
    fd = os.open(os.path.join("/dev/shm", name.lstrip("/")), os.O_RDWR)
    try:
        region = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, offset=offset)
    finally:
        os.close(fd)  # the mapping holds its own reference to the memory
    return np.frombuffer(region, dtype=np.uint8)


class KeptViews:
    """Which of the arrays last handed out of each slot are still viewed, and which fields a
    consumer keeps so steadily that copying them at once is cheaper.

    A field kept at ``streak`` slot reuses in a row is handed out as copies (fresh memory,
    not watched) for the next ``copies`` batches, then as a watched view again, to see
    whether it is still kept: a consumer that keeps every batch (or every label) costs one
    copy per batch, and the pages moved stay few, instead of one region moved and one
    mapping made per batch (a process may hold only so many mappings, ``vm.max_map_count``).

    >>> kept = KeptViews(2)
    >>> a, b = np.zeros(3), np.zeros(3)
    >>> out = kept.hand_out(0, {"x": a, "y": b})
    >>> out["x"] is a, out["y"] is b  # views, watched
    (True, True)
    >>> del a, out
    >>> kept.take(0), kept.take(0)
    (['y'], [])
    """

    def __init__(self, num_slots: int, *, streak: int = 2, copies: int = 64) -> None:
        self._refs: list[list[tuple[str, weakref.ref[Any]]]] = [[] for _ in range(num_slots)]
        self._streak, self._copies = streak, copies
        self._kept_in_a_row: dict[str, int] = {}
        self._copies_left: dict[str, int] = {}
        self.copied = 0  # field arrays handed out as copies

    def hand_out(
        self, slot: int, arrays: dict[str, npt.NDArray[Any]]
    ) -> dict[str, npt.NDArray[Any]]:
        """What ``slot``'s batch is made of from now on: ``arrays`` (one view per field,
        watched), except fields kept steadily of late, which are copied."""
        out, refs = {}, []
        for name, a in arrays.items():
            left = self._copies_left.get(name, 0)
            if left:
                self._copies_left[name] = left - 1
                out[name] = a.copy(order="K")  # in the slot's memory order (channels last)
                self.copied += 1
            else:
                out[name] = a
                refs.append((name, weakref.ref(a)))
        self._refs[slot] = refs
        return out

    def take(self, slot: int) -> list[str]:
        """The fields of ``slot``'s last batch still viewed; forgets them."""
        refs, self._refs[slot] = self._refs[slot], []
        alive = []
        for name, ref in refs:
            kept = ref() is not None
            run = self._kept_in_a_row[name] = self._kept_in_a_row.get(name, 0) + 1 if kept else 0
            if run >= self._streak:
                self._copies_left[name] = self._copies
            if kept:
                alive.append(name)
        return alive
