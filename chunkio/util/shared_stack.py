"""Arrays held decoded whole in shared memory, filled by several processes together.

A loader whose window fields' arrays fit ``Workers(hold_bytes)`` keeps them decoded across
epochs, stacked ``(rows, variables, *shape)`` (:func:`chunkio.read.windows.held_stack`).
Without workers the stack is the process's own memory. With workers, the main process creates
one shared-memory segment per stack (:class:`HeldSegments`, before the workers start) and the
workers fill it together: the stack is cut into blocks of whole chunks of one variable; a
worker claims a free block, decodes it and marks it ready, then waits for the blocks others
claimed. Each chunk is decoded once for all workers (not once per worker), memory does
not grow with the number of workers, and the first batches come after ``1 / workers`` of the
whole decode.

A claim reads a block's state and marks it claimed as one step, under an ``flock`` of the
segment held for just that (a process that found a block free re-checks it there, so it never
claims a block another process claimed or finished meanwhile; the kernel drops the lock of a
process that dies). So each block is decoded once, and a ready block is never written again
while others read it, with one exception: a block whose claimer died (or is stuck for
:data:`STALL_S`) is decoded by whoever waits for it (a stuck claimer may still finish it too,
with the same bytes). A worker whose decode fails frees its block again. Where ``flock``
is refused (a filesystem without it) claims go unlocked: two workers claiming a block at
the same instant then both decode it.

Segment layout: the stack ``(rows, V, *shape)``, then one state byte per block, then the id of
the process that claimed each block (``int64``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .numeric import ceil_div
from .shm import SegmentMapping, attach, create, free_bytes

__all__ = ["HeldSegments", "StackShape", "fill_shared", "lane_blocks"]

#: rows read per call when a variable is read into its lane of a stack (a bounded temporary)
BLOCK_BYTES = 4 << 20
#: a block claimed this long ago by a live process that has not finished is decoded here too
STALL_S = 30.0
#: how long a worker sleeps between looks at the blocks others are decoding
POLL_S = 0.0005
FREE, CLAIMED, READY = 0, 1, 2
_ALIGN = 64


def lane_blocks(
    num_rows: int, chunk_rows: int, row_nbytes: int, block_bytes: int
) -> list[tuple[int, int]]:
    """Row ranges ``[a, b)`` of whole chunks (the last may be short), about ``block_bytes``
    each: the units a variable is read into its lane in.

    >>> lane_blocks(10, 3, 1 << 20, 4 << 20)
    [(0, 3), (3, 6), (6, 9), (9, 10)]
    >>> lane_blocks(10, 3, 1, 4 << 20)
    [(0, 10)]
    >>> lane_blocks(10, 1, 1, 4), lane_blocks(5, 1, 1, 1)
    ([(0, 4), (4, 8), (8, 10)], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
    """
    per_chunk = max(1, chunk_rows)
    step = per_chunk * max(1, block_bytes // (max(1, row_nbytes) * per_chunk))
    return [(a, min(a + step, num_rows)) for a in range(0, num_rows, step)]


@dataclass(frozen=True)
class StackShape:
    """The stack of one window field's variables: ``(num_rows, len(arrays), *sample_shape)``."""

    arrays: tuple[str, ...]
    #: rows per chunk of each array
    chunk_rows: tuple[int, ...]
    num_rows: int
    sample_shape: tuple[int, ...]
    dtype: str
    #: about how many bytes of one variable a block holds (:func:`lane_blocks`)
    block_bytes: int

    @property
    def row_nbytes(self) -> int:
        return int(np.prod(self.sample_shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def blocks(self) -> list[tuple[int, int, int]]:
        """``(variable, first row, end row)`` of every block, variable by variable."""
        return [
            (j, a, b)
            for j, rows in enumerate(self.chunk_rows)
            for a, b in lane_blocks(self.num_rows, rows, self.row_nbytes, self.block_bytes)
        ]

    @property
    def data_nbytes(self) -> int:
        return self.num_rows * len(self.arrays) * self.row_nbytes

    def offsets(self) -> tuple[int, int, int]:
        """Byte offsets of the block states and the claimers' ids, and the segment's size."""
        n = len(self.blocks)
        states = ceil_div(self.data_nbytes, _ALIGN) * _ALIGN
        pids = states + ceil_div(n, _ALIGN) * _ALIGN
        return states, pids, pids + 8 * n


class HeldSegments:
    """The main process's segments of a loader's stacks (it alone unlinks them: at
    :meth:`close` or when garbage collected)."""

    def __init__(self, shapes: Sequence[StackShape]) -> None:
        self._segments = []
        try:
            for shape in shapes:
                self._segments.append(seg := create(shape.offsets()[2]))
                _reserve(seg)
        except BaseException:
            _unlink(self._segments)
            raise
        #: arrays -> segment name: what the workers attach to (pickles with the dataset)
        self.names = {s.arrays: seg.name for s, seg in zip(shapes, self._segments, strict=True)}
        self._finalizer = weakref.finalize(self, _unlink, self._segments)

    @classmethod
    def if_room(cls, shapes: Sequence[StackShape]) -> HeldSegments | None:
        """Segments for ``shapes``, or ``None`` when ``/dev/shm`` is too small for them."""
        free = free_bytes()
        if free is not None and free < sum(s.offsets()[2] for s in shapes):
            return None
        try:
            return cls(shapes)
        except OSError:  # ENOSPC while reserving: another process took the room meanwhile
            return None

    def close(self) -> None:
        """Unlink the segments (memory is returned when the last worker unmaps it)."""
        self._finalizer()


def _reserve(segment: Any) -> None:
    """Allocate the segment's pages now: ``/dev/shm`` pages are otherwise taken as the workers
    first write them, so a ``/dev/shm`` that looked large enough could run out under them
    (SIGBUS), and the batch ring's own check of the room left would not count this segment."""
    fd = getattr(segment, "_fd", -1)
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, segment.size)


def _unlink(segments: list[Any]) -> None:
    for seg in segments:
        with contextlib.suppress(FileNotFoundError):
            seg.unlink()
        seg.close()
    segments.clear()


def fill_shared(
    name: str, shape: StackShape, read_block: Callable[[npt.NDArray[Any], int, int, int], None]
) -> npt.NDArray[Any] | None:
    """The stack in segment ``name``, every block decoded (by this process or another), or
    ``None`` when the segment is gone (its loader closed) or is not the size ``shape`` needs.
    ``read_block(stack, j, a, b)`` decodes rows ``a:b`` of variable ``j`` into the stack."""
    states_at, pids_at, nbytes = shape.offsets()
    try:
        shm = attach(name)
    except FileNotFoundError:
        return None
    if shm.size < nbytes:
        shm.close()
        return None
    raw = SegmentMapping(shm).bytes()  # views keep the mapping alive
    stack = raw[: shape.data_nbytes].view(np.dtype(shape.dtype))
    stack = stack.reshape((shape.num_rows, len(shape.arrays), *shape.sample_shape))
    blocks = shape.blocks
    states = raw[states_at : states_at + len(blocks)]
    pids = raw[pids_at:nbytes].view(np.int64)
    me = os.getpid()
    lock = _ClaimLock(getattr(shm, "_fd", -1))

    def takeable(k: int, stalled: bool) -> bool:
        state = states[k]
        return bool(state == FREE or (state == CLAIMED and (stalled or not _alive(pids[k]))))

    def claim_and_read(k: int, stalled: bool) -> bool:
        """Decode block ``k`` if it is still ``takeable`` once this process holds the lock."""
        with lock:
            if not takeable(k, stalled):
                return False  # claimed (or finished) by another process since it was seen
            pids[k] = me
            states[k] = CLAIMED
        try:
            read_block(stack, *blocks[k])
        except BaseException:
            with lock:
                if pids[k] == me:  # not taken over meanwhile (see STALL_S)
                    states[k] = FREE  # another process may try (and name the error itself)
            raise
        states[k] = READY
        return True

    # start at a random block, so that workers starting together claim different blocks
    start = secrets.randbelow(len(blocks)) if blocks else 0
    for k in [*range(start, len(blocks)), *range(start)]:
        if states[k] == FREE:  # looked at without the lock first: most blocks are taken
            claim_and_read(k, stalled=False)
    waiting_since = time.monotonic()
    while True:
        pending = np.flatnonzero(states != READY)
        if not len(pending):
            return stack
        stalled = time.monotonic() - waiting_since > STALL_S
        for k in pending.tolist():
            if takeable(k, stalled) and claim_and_read(k, stalled):
                waiting_since = time.monotonic()
        time.sleep(POLL_S)


class _ClaimLock:
    """An exclusive ``flock`` of a segment, through one attach's own file descriptor (so it
    excludes other processes and other attaches in this one); a no-op where the descriptor or
    ``flock`` is missing."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except OSError:  # not supported here: claims go unlocked from now on
                self.fd = -1

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)


def _alive(pid: Any) -> bool:
    """Whether process ``pid`` still exists (a zombie counts as alive: :data:`STALL_S`
    covers it)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True
