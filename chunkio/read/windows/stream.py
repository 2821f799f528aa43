"""Stacked window variables streamed through one cache of decoded chunks (beyond the budget).

When a window field's arrays do not fit ``Workers(hold_bytes)``, its variables cannot be held
whole (:func:`chunkio.read.windows.held_stack`). Read one by one through each variable's own
cache, a batch costs a plan, a ``np.unique`` and a gather per variable plus one Python-level
copy per ``(anchor, step, variable)`` row (the rows land strided in the batch): about 10x the
held path's time beside the decode. Here the variables share one cache whose slots hold one
row chunk of each, ``(V, rows_per_chunk, *shape)`` (each variable's chunk decoded in place,
no staging copy; which chunk a slot holds: :mod:`.slots`): a batch admits the chunks its rows
reach (those the cache lacks decoded once) and is then one ``np.take`` of ``(row, variable)``
runs straight into the batch.

The cache is shared by every window field of the same arrays (a field of one of the variables
alone reads its lane): the first field of a batch admits the chunks of every registered
field's steps at once, and the batch's other fields find their slots in a table, with no
``np.unique`` or admit of their own. Its size is the loader's (the order's mixing pool, within
``Workers(hold_bytes)`` where the pool allows: :func:`chunkio.read.windows.window_path`), so
each chunk is decoded about once per pass over the data. The chunks a batch lacks are decoded
on the dataset's ``decode_threads`` (Zstd, Blosc and LZ4 release the GIL). Where the loader's
budget holds the stack's first chunks (:mod:`chunkio.read.windows.held`), a batch all of
whose rows are there is gathered from them; one that also reaches past them admits its held
chunks too, copied into their slots instead of decoded (a copy out of the part's shared
memory costs about a third of a Zstd decode), so that every batch stays one gather: two
gathers and the scatters of their results cost more than the copies. A chunk of the part not
written yet is decoded into its slot, then written into the part if the process's credit
covers it (earned by the chunks it copied out of the part: :mod:`chunkio.read.windows.held`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ...util.numeric import IntArray
from ...util.shared_stack import StackShape
from ..base import ReadContext
from .held import held_part
from .slots import StreamSlots

__all__ = ["StreamedStack", "streamed_lane", "streamed_stack", "variable_field_name"]

#: private A/B switch (``benchmarks/bench_windows.py --ab``): each field admits its own
#: rows' chunks, as before 2026-11-29
_ADMIT_PER_FIELD = False


def streamed_stack(ctx: ReadContext, shape: StackShape) -> StreamedStack | None:
    """The process's one streamed stack of ``shape``'s arrays (shared by every window field
    of those arrays), or ``None`` when its variables are chunked apart along time (a slot
    would not be whole chunks of each) or one of them has a reader of its own already."""
    key = ("streamed", *shape.arrays)
    found = ctx.shared.get(key)
    if isinstance(found, StreamedStack):
        return found
    if len(set(shape.chunk_rows)) != 1 or any(a in ctx.shared for a in shape.arrays):
        return None
    stack = ctx.shared[key] = StreamedStack(ctx, shape)
    return stack


def streamed_lane(ctx: ReadContext, array: str) -> tuple[StreamedStack, int] | None:
    """The streamed stack that holds ``array`` and its lane there, if one does: a window
    field of that variable alone reads it from there (each chunk decoded once per process)."""
    for found in ctx.shared.values():
        if isinstance(found, StreamedStack) and array in found.shape.arrays:
            return found, found.shape.arrays.index(array)
    return None


class StreamedStack:
    """Row chunks of a window field's variables decoded side by side into cache slots."""

    def __init__(self, ctx: ReadContext, shape: StackShape) -> None:
        self.ctx = ctx
        self.shape = shape
        self.rows_per_chunk = max(1, shape.chunk_rows[0])
        # ctx.cache_chunks counts chunks of the dataset's rows per chunk (the order's unit)
        spc = max(1, ctx.layout.samples_per_chunk)
        row_size = int(np.prod(shape.sample_shape, dtype=np.int64))
        #: a slot is V blocks of one chunk's rows, one per variable (each decoded in place)
        self.cache = StreamSlots(
            (len(shape.arrays), self.rows_per_chunk, row_size),
            shape.dtype,
            max(1, -(-ctx.cache_chunks * spc // self.rows_per_chunk)),
        )
        #: variable -> the name its chunk counts go under in the read statistics (as the
        #: variable's own reader counts them)
        self._counted = [variable_field_name(a) for a in shape.arrays]
        #: past the budget, the first row chunks held decoded (a loader's segment for them,
        #: filled as they are first decoded: :func:`~chunkio.read.windows.held.held_part`);
        #: rows from there on are streamed
        self.held = held_part(ctx, shape)
        #: the part's chunks, ``(chunks, V, rows per chunk, row size)``, as the cache's slots
        self.part = self.held.data if self.held is not None else np.empty((0, 1, 1, 1), shape.dtype)
        self.part_rows = self.held.rows if self.held is not None else 0
        #: every step a window field of these arrays reads (a batch admits all at once)
        self.steps = np.zeros(0, np.int64)
        #: chunk -> its slot, valid for the chunks of the anchors last admitted
        self._slot_of = np.zeros(0, np.int64)
        #: each variable's first row in a slot, in rows of the cache's flat (row, variable) view
        self._lanes = np.arange(len(shape.arrays), dtype=np.int64) * self.rows_per_chunk
        #: the anchors whose chunks (at every step) are all in the cache now (their bytes)
        self._admitted: tuple[int, bytes] | None = None

    def register(self, steps: IntArray) -> None:
        """A window field reads these steps of every anchor it is asked for."""
        self.steps = np.union1d(self.steps, np.asarray(steps, dtype=np.int64))
        self._admitted = None

    def gather(
        self, anchors: IntArray, steps: IntArray, out: npt.NDArray[Any], lane: int | None = None
    ) -> None:
        """Rows ``anchors + step`` for each of ``steps`` (anchor-major) of every variable into
        ``out``, ``(len(anchors) * len(steps), V * row size)`` (of variable ``lane`` alone:
        ``(..., row size)``); chunks the cache lacks decoded once (or copied from the held
        part)."""
        rows = (anchors[:, None] + steps[None, :]).reshape(-1)
        flat_out = out.reshape(len(rows), -1)
        held = self.held
        if held is not None and rows.max() < held.rows:
            chunks = rows // self.rows_per_chunk
            if held.holds(chunks):  # held: gathered from the part's chunks as from slots
                self._take(chunks, rows, flat_out, lane, self.part)
                return
        if _ADMIT_PER_FIELD:  # the path before 2026-11-29, for A/B runs (bench_windows)
            self._admitted = None
            chunks = np.unique(rows // self.rows_per_chunk)
            self._remember(chunks, self._admit(chunks.tolist()))
        else:
            self._admit_anchors(anchors)
        # after admit: the buffer may have grown
        self._take(
            self._slot_of[rows // self.rows_per_chunk], rows, flat_out, lane, self.cache.buffer
        )

    def _take(
        self,
        slots: IntArray,
        rows: IntArray,
        out: npt.NDArray[Any],
        lane: int | None,
        buffer: npt.NDArray[Any],
    ) -> None:
        """Rows ``rows``, in ``slots`` of ``buffer`` (the cache's, or the held part's), of
        every variable (of ``lane``) into ``out``."""
        per_chunk, variables = self.rows_per_chunk, len(self.shape.arrays)
        # a slot is V blocks of one chunk's rows, one per variable (each decoded in place)
        first = slots * (variables * per_chunk) + rows % per_chunk
        if lane is None:  # (row, variable) pairs: V row-sized runs per batch row, in order
            where = (first[:, None] + self._lanes).reshape(-1)
        else:
            where = first + lane * per_chunk
        flat = buffer.reshape(-1, buffer.shape[-1])
        # mode="clip": every row is in range; "raise" gathers into a temporary
        np.take(flat, where, axis=0, out=out.reshape(len(where), -1), mode="clip")

    def _admit_anchors(self, anchors: IntArray) -> None:
        """Every chunk the registered steps of ``anchors`` reach, in the cache (the batch's
        other fields of these arrays ask for the same anchors: nothing to do then)."""
        # as int64 bytes, equal only for equal anchors (int32 [1, 0] has int64 [1]'s bytes),
        # of this batch (a later batch of the same anchors counts its hits)
        key = (self.ctx.stats.batches, np.asarray(anchors, dtype=np.int64).tobytes())
        if key == self._admitted:
            return
        self._admitted = None  # until the admit below succeeds
        chunks = np.unique((anchors[:, None] + self.steps[None, :]) // self.rows_per_chunk)
        self._remember(chunks, self._admit(chunks.tolist()))
        self._admitted = key

    def _remember(self, chunks: IntArray, slots: list[int]) -> None:
        """Chunks ``chunks`` (sorted) are in ``slots`` (until the next admit)."""
        if len(self._slot_of) <= chunks[-1]:
            grown = np.zeros(max(int(chunks[-1]) + 1, 2 * len(self._slot_of)), np.int64)
            grown[: len(self._slot_of)] = self._slot_of
            self._slot_of = grown
        self._slot_of[chunks] = slots

    def _admit(self, chunks: list[int]) -> list[int]:
        """The cache slot of each of ``chunks``, filling those it lacks: copied from the held
        part where they lie in it, else decoded into their slots (on the dataset's decode
        threads)."""
        ctx, cache, shape = self.ctx, self.cache, self.shape
        per_chunk, variables = self.rows_per_chunk, len(shape.arrays)
        reads, kept = [], []
        rows = copied = 0
        # the slots admit puts in the table are filled, or the batch's chunks forgotten (an
        # error or interrupt anywhere from admit on): never served unfilled
        try:
            slots, fills = cache.admit(chunks)
            if not fills:
                ctx.stats.cache_hits += len(chunks) * variables
                return slots
            blocks = cache.buffer  # (slots, V, rows per chunk, row size), after its growth
            for chunk, at in fills:
                a = chunk * per_chunk
                b = min(a + per_chunk, shape.num_rows)
                slot = blocks[at]
                if self.held is not None and b <= self.held.rows:
                    if self.held.copy_out(chunk, slot):  # a copy (then one gather), no decode
                        copied += 1
                        continue
                    kept.append((chunk, slot))  # decoded below, then written into the part
                for j, array in enumerate(shape.arrays):
                    dest = slot[j, : b - a].reshape(b - a, *shape.sample_shape)
                    reads.append((array, a, b, dest))
                rows += b - a
            # every read finishes before any error is raised (an interrupt too: the decode
            # threads' map waits for the reads running): no thread still writes into a slot
            # a later batch may be given
            failed = [err for err in ctx.map_rows(self._read, reads) if err is not None]
            if failed:
                raise failed[0]
        except BaseException:
            cache.forget(chunks)  # held ones too: they are decoded again, never served bad
            raise
        if self.held is not None:
            for chunk, slot in kept:
                self.held.keep(chunk, slot)
        decoded = len(fills) - copied
        stats = ctx.stats
        stats.chunks_read += decoded * variables
        stats.rows_decoded += rows * variables
        stats.cache_hits += (len(chunks) - decoded - copied) * variables  # copies: neither
        for name in self._counted:
            stats.per_field[name] = stats.per_field.get(name, 0) + decoded
        return slots

    def _read(self, read: tuple[str, int, int, npt.NDArray[Any]]) -> Exception | None:
        """One variable's chunk into its slot; the error, if any, returned (not raised)."""
        array, a, b, dest = read
        try:
            self.ctx.reader.read_into(array, [(a, b)], dest)
        except Exception as err:
            return err
        return None

    def prefetch(self, rows: IntArray) -> None:
        """Start fetching the chunks of ``rows`` the cache lacks (remote readers)."""
        chunks = np.unique(rows // self.rows_per_chunk)
        if self.held is not None:  # chunks written into the part are copied, not fetched
            chunks = self.held.unwritten(chunks)
        missing = [c for c in chunks.tolist() if c not in self.cache]
        for array in self.shape.arrays:
            self.ctx.reader.prefetch(array, missing)


def variable_field_name(array: str) -> str:
    """The dense field a window variable ``array`` is read (and its chunks counted) as."""
    return "v_" + "".join(c if c.isalnum() or c in "_-" else "_" for c in array)[:120]
