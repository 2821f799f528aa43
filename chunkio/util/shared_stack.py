"""Arrays held decoded whole in shared memory, filled by several processes together.

A loader whose window fields' arrays fit ``Workers(hold_bytes)`` keeps them decoded across
epochs, stacked ``(rows, variables, *shape)`` (:func:`chunkio.read.windows.held_stack`).
Without workers the stack is the process's own memory. With workers, the main process creates
one shared-memory segment per stack (:class:`HeldSegments`, before the workers start) and the
workers fill it together: the stack is cut into blocks of whole chunks (below); a worker
claims a free block, decodes it and marks it ready, then waits for the blocks others claimed.
Each chunk is decoded once for all workers (not once per worker), memory does
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

A block is a run of rows of all the variables when they are chunked alike (then one contiguous
run of the segment): its variables are decoded into a private buffer of at most
:data:`BLOCK_BYTES` and written into the segment's file with one ``pwrite``, not through the
mapping. Written through the mapping, each 4 KiB page of ``/dev/shm`` costs a write fault in
the process that writes it (huge pages are off for shared memory on many systems); ``pwrite``
copies into the same pages with none (a third of the CPU for 468 MiB here, the private copy
included: ``docs/benchmarks.md``), and readers map them later a 64 KiB run per fault. A
streamed cache's slot, one row chunk of every variable, is written with one ``pwrite``
straight from it (:meth:`_BlockWriter.put`: the held part of a stack past the budget lays its
chunks out as slots, :class:`chunkio.read.windows.held.HeldPart`). A block whose one row chunk of
all the variables exceeds :data:`BLOCK_BYTES`, and variables chunked apart along time, are
filled variable by variable through the mapping (the private buffer would be a chunk of every
variable in every worker at once). Where the system refuses ``pwrite`` on the segment (macOS:
``ESPIPE`` on a POSIX shared-memory descriptor) the segment is written through the mapping
from then on.

Segment layout: the stack ``(rows, V, *shape)``, then one state byte per block, then when each
block was claimed (``float64``, :func:`time.monotonic`, the same clock in every process), then
the id of the process that claimed it (``int64``).
"""

from __future__ import annotations

import contextlib
import errno
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

__all__ = [
    "BlockReader",
    "HeldSegments",
    "SharedStack",
    "StackShape",
    "fill_local",
    "fill_shared",
    "lane_blocks",
]

#: bytes of a block (of all the variables, or of one: :attr:`StackShape.blocks`), about, unless
#: one row chunk is larger: a block of all the variables is decoded through a private buffer of
#: at most this (a larger one variable by variable, through the mapping: :class:`_BlockWriter`)
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
    def alike(self) -> bool:
        """Whether every variable has the same rows per chunk (blocks then span them all)."""
        return len(set(self.chunk_rows)) <= 1

    @property
    def blocks(self) -> list[tuple[int | None, int, int]]:
        """``(variable, first row, end row)`` of every block: ``(None, a, b)``, rows ``a:b``
        of every variable, when they are chunked :attr:`alike` (one contiguous run of the
        stack); else variable by variable."""
        if self.alike and self.arrays:
            row = len(self.arrays) * self.row_nbytes
            spans = lane_blocks(self.num_rows, self.chunk_rows[0], row, self.block_bytes)
            return [(None, a, b) for a, b in spans]
        return [
            (j, a, b)
            for j, rows in enumerate(self.chunk_rows)
            for a, b in lane_blocks(self.num_rows, rows, self.row_nbytes, self.block_bytes)
        ]

    def stack_of(self, raw: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The stack ``(num_rows, V, *sample_shape)`` over the first bytes of ``raw``."""
        data = raw[: self.data_nbytes].view(np.dtype(self.dtype))
        return data.reshape((self.num_rows, len(self.arrays), *self.sample_shape))

    @property
    def data_nbytes(self) -> int:
        return self.num_rows * len(self.arrays) * self.row_nbytes

    def offsets(self) -> tuple[int, int, int]:
        """Byte offsets of the block states and the claimers' ids, and the segment's size (the
        claim times lie between the states and the ids: :meth:`times_at`)."""
        n = len(self.blocks)
        pids = self.times_at() + ceil_div(8 * n, _ALIGN) * _ALIGN
        return self.states_at(), pids, pids + 8 * n

    def states_at(self) -> int:
        return ceil_div(self.data_nbytes, _ALIGN) * _ALIGN

    def times_at(self) -> int:
        """Byte offset of the blocks' claim times."""
        return self.states_at() + ceil_div(len(self.blocks), _ALIGN) * _ALIGN


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


#: ``read_block(out, j, a, b)``: decode rows ``a:b`` of variable ``j`` into ``out``, an array
#: ``(b - a, *sample_shape)`` of the stack's dtype (a strided view, as a rule)
BlockReader = Callable[[npt.NDArray[Any], int, int, int], None]


def fill_local(shape: StackShape, read_block: BlockReader) -> npt.NDArray[Any]:
    """The stack ``shape`` in this process's own memory, every block decoded by
    ``read_block``."""
    stack = np.empty((shape.num_rows, len(shape.arrays), *shape.sample_shape), shape.dtype)
    for j, a, b in shape.blocks:
        for v in range(len(shape.arrays)) if j is None else (j,):
            read_block(stack[a:b, v], v, a, b)
    return stack


class _BlockWriter:
    """Decodes a block of a stack in segment ``name``: rows of every variable into a private
    buffer of at most :data:`BLOCK_BYTES`, then into the segment's file with ``pwrite`` (no page
    faults here); a block of one variable, one larger than :data:`BLOCK_BYTES`, or with no
    usable file descriptor (``fd`` -1, or set so at the first ``pwrite`` refused), through the
    mapping."""

    def __init__(self, shape: StackShape, stack: npt.NDArray[Any], fd: int, name: str) -> None:
        self.shape, self.stack, self.fd, self.name = shape, stack, fd, name
        self.rows: npt.NDArray[Any] | None = None

    def __call__(self, read_block: BlockReader, j: int | None, a: int, b: int) -> None:
        variables = len(self.shape.arrays)
        if j is not None or self.fd < 0 or self._nbytes(b - a) > BLOCK_BYTES:
            for v in range(variables) if j is None else (j,):
                read_block(self.stack[a:b, v], v, a, b)
            return
        if self.rows is None or len(self.rows) < b - a:
            self.rows = np.empty((b - a, *self.stack.shape[1:]), dtype=self.stack.dtype)
        rows = self.rows[: b - a]
        for v in range(variables):
            read_block(rows[:, v], v, a, b)
        self.put(rows, a)

    def _nbytes(self, rows: int) -> int:
        return rows * len(self.shape.arrays) * self.shape.row_nbytes

    def put(self, rows: npt.NDArray[Any], a: int) -> None:
        """Rows ``a:a + len(rows)`` of every variable, ``rows`` (C-contiguous), into the
        stack."""
        if not self._pwrite(_bytes(rows), self._nbytes(a)):
            self.stack[a : a + len(rows)] = rows

    def _pwrite(self, data: memoryview, offset: int) -> bool:
        """``data`` written from ``offset`` of the segment's file, however many calls the
        kernel takes (a signal may cut one short), or ``False``: no descriptor, or the system
        refused the first call (then the segment is written through the mapping from now on;
        a ``pwrite`` refused mid-way leaves bytes the mapping's write then replaces)."""
        if self.fd < 0:
            return False
        while len(data):
            try:
                done = os.pwrite(self.fd, data, offset)
            except InterruptedError:
                continue
            except OSError:  # ESPIPE on macOS's shared memory, EINVAL, ENOSYS: not a file here
                self.fd = -1
                return False
            if done <= 0:  # never for a regular file with room: do not loop forever
                raise OSError(
                    errno.EIO,
                    f"shared-memory segment {self.name!r}: pwrite of {len(data)} bytes at "
                    f"offset {offset} wrote nothing",
                )
            offset += done
            data = data[done:]
        return True


def _bytes(data: npt.NDArray[Any]) -> memoryview:
    """The bytes of ``data`` (C-contiguous), whatever its dtype (a datetime has no buffer)."""
    return data.reshape(-1).view(np.uint8).data


def fill_shared(name: str, shape: StackShape, read_block: BlockReader) -> npt.NDArray[Any] | None:
    """The stack in segment ``name``, every block decoded (by this process or another), or
    ``None`` when the segment is gone (its loader closed) or is not the size ``shape`` needs.
    ``read_block(out, j, a, b)`` decodes rows ``a:b`` of variable ``j`` into ``out``."""
    shared = SharedStack.attach(name, shape)
    return None if shared is None else shared.fill(read_block)


class SharedStack:
    """This process's attach of a stack's segment: the stack, and its blocks' states and
    claimers (:meth:`attach`)."""

    def __init__(self, shm: Any, shape: StackShape) -> None:
        states_at, pids_at, nbytes = shape.offsets()
        raw = SegmentMapping(shm).bytes()  # views keep the mapping alive
        times_at = shape.times_at()
        self.shape = shape
        #: ``(num_rows, V, *sample_shape)``: a block's rows are valid once it is ``READY``
        self.stack = shape.stack_of(raw)
        self.blocks = shape.blocks
        self.states = raw[states_at : states_at + len(self.blocks)]
        self.pids = raw[pids_at:nbytes].view(np.int64)
        #: when each block was claimed (:func:`time.monotonic`: one clock for all processes)
        self.claimed_at = raw[times_at : times_at + 8 * len(self.blocks)].view(np.float64)
        fd = getattr(shm, "_fd", -1)
        self.write = _BlockWriter(shape, self.stack, fd, str(getattr(shm, "name", "?")))
        self._lock = _ClaimLock(fd)
        self._me = os.getpid()

    @classmethod
    def attach(cls, name: str, shape: StackShape) -> SharedStack | None:
        """Segment ``name`` as stack ``shape``, or ``None``: gone (its loader closed), or
        smaller than ``shape`` needs."""
        try:
            shm = attach(name)
        except FileNotFoundError:
            return None
        if shm.size < shape.offsets()[2]:
            shm.close()
            return None
        return cls(shm, shape)

    def takeable(self, k: int, stalled: bool = False, *, stale: bool = False) -> bool:
        """Whether block ``k`` is free, or claimed by a process that died (or by any, when
        ``stalled``; or :data:`STALL_S` ago or more, when ``stale``)."""
        state = self.states[k]
        if state != CLAIMED:
            return bool(state == FREE)
        old = stale and time.monotonic() - float(self.claimed_at[k]) >= STALL_S
        return bool(stalled or old or not _alive(self.pids[k]))

    def claim(self, k: int, stalled: bool = False, *, stale: bool = False) -> bool:
        """Claim block ``k`` if it is still :meth:`takeable` once this process holds the
        lock (then :meth:`ready` or :meth:`release` it)."""
        with self._lock:
            if not self.takeable(k, stalled, stale=stale):
                return False  # claimed (or finished) by another process since it was seen
            self.pids[k] = self._me
            self.claimed_at[k] = time.monotonic()
            self.states[k] = CLAIMED
        return True

    def ready(self, k: int) -> None:
        """Block ``k``, claimed here, is written: others may read it from now on."""
        self.states[k] = READY

    def release(self, k: int) -> None:
        """Block ``k``, claimed here, was not written: free it for another process (unless
        one took it over meanwhile: see :data:`STALL_S`)."""
        with self._lock:
            if self.pids[k] == self._me:
                self.states[k] = FREE  # another process may try (and name the error itself)

    def fill(self, read_block: BlockReader) -> npt.NDArray[Any]:
        """The stack, every block decoded by ``read_block`` here or by another process."""
        blocks, states = self.blocks, self.states

        def claim_and_read(k: int, stalled: bool) -> bool:
            if not self.claim(k, stalled):
                return False
            try:
                self.write(read_block, *blocks[k])
            except BaseException:
                self.release(k)
                raise
            self.ready(k)
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
                return self.stack
            stalled = time.monotonic() - waiting_since > STALL_S
            for k in pending.tolist():
                if self.takeable(k, stalled) and claim_and_read(k, stalled):
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
