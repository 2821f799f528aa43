"""Stacked window variables held decoded: whole, or their first chunks past the budget.

A loader holds a window field's stacked variables whole when they fit ``Workers(hold_bytes)``
(:func:`chunkio.read.windows.held_stack`). When they do not, the budget left beside the
streamed caches still holds their first whole row chunks (:class:`HeldPart`), in the loader's
shared-memory segment for all the workers, kept across epochs, so that each later pass
decodes only the chunks past them. The part is filled by the streamed cache itself: a row
chunk of the part is written there (by one ``pwrite`` of the cache slot, a chunk a block)
right after a batch first decodes it into that slot, by whichever process decodes it
first, and read from there once written. So a first epoch decodes what ``hold_bytes=0``
decodes, with no fill before the first batch and no copy out of the part of what it just put
there; later epochs copy held chunks from the part instead of decoding them.

A process writes into the part only within its credit, so that no epoch costs more than
``hold_bytes=0``'s: a write (about 200 µs of CPU for a 576 KiB row chunk of 3 variables, which
the epoch that writes it seldom reads again: each chunk is read about once an epoch) is
bought by a seed, one write and then a sixteenth of one for each chunk of the part the
process decodes (the first epoch's writes: 0.5% of its CPU, where writing the whole part took
5%), and by two writes for each held chunk it copies out instead of decoding (a copy of
80-140 µs in place of about 1,000 µs of decoding: what the part saved the process is more
than twice what it spends). A batch gathered whole from the part earns nothing (most of its
chunks the cache would have held anyway). Each process keeps its own count, from its seed,
so workers made anew each epoch need nothing shared; the part fills as it serves (at 100,000
steps, 0 to 2 workers: 8% of it after the first epoch, 35-37% after the second, 99% after
the third, full in the fourth: ``docs/benchmarks.md``, windows) and from then on every epoch
has the whole part's gain. Which chunks are written when never changes what a batch reads.
The part's bytes are laid out as the cache's slots, row chunk by row chunk, each ``(V, rows
per chunk, *shape)``: a held chunk is one contiguous run both ways (a strided copy out of
``/dev/shm``'s 4 KiB pages, with the part laid out ``(rows, V, *shape)``, cost about 5x a
contiguous one: ``docs/benchmarks.md``, windows). The loader says how many rows through the readers'
``preload_bytes`` (the part's decoded bytes, :func:`part_shape`): each process finds the
same part, with no other message.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from ...util.numeric import IntArray
from ...util.shared_stack import READY, SharedStack, StackShape
from ...util.shm import attach
from ..base import ReadContext

__all__ = ["HeldPart", "LaneFiller", "held_part", "part_shape", "segment_fits"]

_log = logging.getLogger("chunkio")

#: what a write into the part costs of a process's :attr:`HeldPart.credit` (whose units are
#: sixteenths of a write)
WRITE_COST = 16
#: a process's credit before it has earned any: one write (so that a part of fewer than 16
#: chunks a process fills too, and every process starts writing)
START_CREDIT = WRITE_COST
#: earned by each chunk of the part a process decodes because it is not written yet: the
#: seed's share, a sixteenth of a write
EARN_DECODED = 1
#: earned by each held chunk a process copies out instead of decoding: two writes
EARN_SERVED = 2 * WRITE_COST


class LaneFiller:
    """Reads rows ``a:b`` (whole chunks) of variable ``j`` into ``out`` (its strided lane of a
    stack, or of a block of one), through one bounded temporary: a
    :data:`~chunkio.util.shared_stack.BlockReader`."""

    def __init__(self, ctx: ReadContext, shape: StackShape) -> None:
        self.ctx = ctx
        self.shape = shape
        self.buffer: npt.NDArray[Any] | None = None

    def __call__(self, out: npt.NDArray[Any], j: int, a: int, b: int) -> None:
        if self.buffer is None or len(self.buffer) < b - a:
            self.buffer = np.empty((b - a, *out.shape[1:]), dtype=out.dtype)
        per_chunk = max(1, self.shape.chunk_rows[j])
        ranges = [(c, min(c + per_chunk, b)) for c in range(a, b, per_chunk)]
        self.ctx.reader.read_into(self.shape.arrays[j], ranges, self.buffer[: b - a])
        out[...] = self.buffer[: b - a]
        stats = self.ctx.stats
        stats.chunks_read += len(ranges)
        stats.rows_decoded += b - a


def part_shape(shape: StackShape, nbytes: int) -> StackShape | None:
    """The stack of ``shape``'s first whole row chunks that fit ``nbytes`` decoded bytes, one
    row chunk a block (:class:`HeldPart` fills them one at a time), or ``None``: not one chunk
    fits, or all of them do (the stack is held whole then). Its variables are chunked alike
    along time.

    >>> s = StackShape(("a", "b"), (4, 4), 10, (2,), "<f4", 1 << 20)  # 64 bytes a row chunk
    >>> part_shape(s, 140).num_rows, part_shape(s, 63), part_shape(s, 192)
    (8, None, None)
    """
    per_chunk = max(1, shape.chunk_rows[0])
    chunk_bytes = len(shape.arrays) * shape.row_nbytes * per_chunk
    rows = nbytes // max(1, chunk_bytes) * per_chunk
    if rows <= 0 or rows >= shape.num_rows:
        return None
    return dataclasses.replace(shape, num_rows=rows, block_bytes=0)


def segment_fits(name: str | None, shape: StackShape, preload_bytes: int) -> bool:
    """Whether stack ``shape`` may be held whole by a reader given shared-memory segment
    ``name`` (a loader's) and ``preload_bytes``: no segment, or one large enough for the whole
    stack; a segment gone (its loader closed) only when the whole stack is within
    ``preload_bytes`` (the process then holds it itself; a loader's budget gave a stack past
    it only its first chunks)."""
    if name is None:
        return True
    try:
        segment = attach(name)
    except FileNotFoundError:
        return shape.data_nbytes <= preload_bytes
    try:
        return bool(segment.size >= shape.offsets()[2])
    finally:
        segment.close()


def held_part(ctx: ReadContext, shape: StackShape) -> HeldPart | None:
    """The first row chunks of stack ``shape`` in the loader's shared-memory segment for them
    (filled as they are first decoded: :class:`HeldPart`), or ``None``: no segment (not a
    loader's reader, or the stack is held whole or streamed whole), or one that is not the size
    the part needs (then every chunk is streamed)."""
    name = ctx.held.get(shape.arrays)
    if name is None or shape.data_nbytes <= ctx.preload_bytes:
        return None
    part = part_shape(shape, ctx.preload_bytes)
    shared = None if part is None else SharedStack.attach(name, part)
    return None if shared is None else HeldPart(shared)


class HeldPart:
    """A stack's first row chunks, ``(chunks, V, rows per chunk, row size)`` (a streamed
    cache's slots), in a loader's shared-memory segment with one block per row chunk, filled
    by the streamed caches of all its processes: a chunk one of them decodes and finds free is
    written there (:meth:`keep`, within the process's :attr:`credit`) and from then on copied
    out of it (:meth:`copy_out`, which earns credit) or gathered from it (:meth:`holds`) by
    every process."""

    def __init__(self, shared: SharedStack) -> None:
        self.shared = shared
        shape = shared.shape
        self.per_chunk = max(1, shape.chunk_rows[0])
        #: the part's rows (whole row chunks)
        self.rows = shape.num_rows
        #: row chunk ``c`` is ``data[c]``, valid once :meth:`holds` it: the segment's stack
        #: ``(rows, V, *shape)`` read chunk-major (same bytes, each chunk's block one slot)
        self.data = shared.stack.reshape(
            self.rows // self.per_chunk, len(shape.arrays), self.per_chunk, -1
        )
        self._whole = False
        #: what this process may still write into the part, in :data:`WRITE_COST` units
        self.credit = START_CREDIT
        #: chunks this process wrote into the part, and copied out of it instead of decoding
        self.writes = self.served = 0
        #: writes into the part that failed in this process (each chunk left to a later batch)
        self.failed_writes = 0

    def holds(self, chunks: IntArray) -> bool:
        """Whether every one of row ``chunks`` (of the part) is written."""
        if self._whole:
            return True
        states = self.shared.states
        if not bool((states[chunks] == READY).all()):
            return False
        self._whole = bool((states == READY).all())  # then no more looks
        return True

    def unwritten(self, chunks: IntArray) -> IntArray:
        """Those of row ``chunks`` (sorted) past the part or not written into it yet."""
        inside = int(np.searchsorted(chunks, -(-self.rows // self.per_chunk)))
        written = self.shared.states[chunks[:inside]] == READY
        return np.concatenate([chunks[:inside][~written], chunks[inside:]])

    def copy_out(self, chunk: int, slot: npt.NDArray[Any]) -> bool:
        """Row chunk ``chunk`` copied into cache slot ``slot``, ``(V, rows per chunk, -1)``,
        if it is written (a decode saved: :data:`EARN_SERVED` earned; else ``False``: decode
        it, then :meth:`keep` it)."""
        if not (self._whole or self.shared.states[chunk] == READY):
            return False
        slot[...] = self.data[chunk]  # one contiguous run
        self.served += 1
        self.credit += EARN_SERVED
        return True

    def keep(self, chunk: int, slot: npt.NDArray[Any]) -> None:
        """Row chunk ``chunk``, just decoded into cache slot ``slot``, written into the part
        if this process's :attr:`credit` covers the write (the decode earns its seed first;
        else the chunk is left free: a later batch, here or in another process, writes it),
        unless another process has written it or is writing it (a claim as the workers' fill
        of a whole stack makes: :class:`~chunkio.util.shared_stack.SharedStack`; a claim
        :data:`~chunkio.util.shared_stack.STALL_S` old is taken over, as a stuck claimer's
        there). Written from the slot by one ``pwrite``, no copy (the part's chunks are laid
        out as slots). A write that fails frees the chunk again and is not raised: the batch
        has the chunk in its slot, and a later batch decodes and writes it again (the first
        failure in a process is logged, every one counted in :attr:`failed_writes`)."""
        shared = self.shared
        if self._whole:
            return
        self.credit += EARN_DECODED
        if self.credit < WRITE_COST or not shared.takeable(chunk, stale=True):
            return  # left to a batch with credit (this process's later one, or another's)
        if not shared.claim(chunk, stale=True):
            return
        self.credit -= WRITE_COST  # spent on a write that fails too: no retry beyond credit
        try:
            # the slot's bytes as the segment's rows a:a + per_chunk (a chunk-major block)
            rows = slot.reshape(self.per_chunk, *shared.stack.shape[1:])
            shared.write.put(rows, chunk * self.per_chunk)
        except (OSError, MemoryError) as exc:  # EIO and the like: goes on, as hold_bytes=0
            shared.release(chunk)
            self.failed_writes += 1
            if self.failed_writes == 1:  # said once per process: then counted
                _log.warning(
                    "chunkio: writing row chunk %d into the windows' held part failed (%s); "
                    "the batch goes on from its cache slot and later batches decode the chunk "
                    "again (counted in HeldPart.failed_writes, said once per process)",
                    chunk,
                    exc,
                )
            return
        except BaseException:
            shared.release(chunk)
            raise
        shared.ready(chunk)
        self.writes += 1
