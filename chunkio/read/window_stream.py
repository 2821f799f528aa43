"""Stacked window variables streamed through one cache of decoded chunks (beyond the budget).

When a window field's arrays do not fit ``Workers(hold_bytes)``, its variables cannot be held
whole (:func:`chunkio.read.windows.held_stack`). Read one by one through each variable's own
cache, a batch costs a plan, a ``np.unique`` and a gather per variable plus one Python-level
copy per ``(anchor, step, variable)`` row (the rows land strided in the batch): 5-10x the
held rate. Here the variables share one cache whose slots are row chunks of all of them side
by side, ``(rows_per_chunk, V, *shape)``, as the held stack is: a batch admits the chunks its
rows reach (those the cache lacks decoded once, each variable into its lane of the slot) and
is then one ``np.take`` straight into the batch, as from the held stack. The cache is shared
by every window field of the same arrays and sized by the order's mixing pool
(:func:`chunkio.sampling.order.pool_capacity_chunks`), so each chunk is decoded about once per
pass over the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray
from ..util.shared_stack import StackShape
from .base import ReadContext
from .cache import DecodedChunkCache

__all__ = ["StreamedStack", "streamed_lane", "streamed_stack", "variable_field_name"]


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
        self.cache = DecodedChunkCache(
            rows_per_chunk=self.rows_per_chunk,
            sample_shape=(len(shape.arrays), *shape.sample_shape),
            dtype=shape.dtype,
            capacity=max(1, -(-ctx.cache_chunks * spc // self.rows_per_chunk)),
        )
        #: one variable's chunk, decoded here before it is copied into its lane of a slot
        self._lane = np.empty((self.rows_per_chunk, *shape.sample_shape), np.dtype(shape.dtype))
        #: variable -> the name its chunk counts go under in the read statistics (as the
        #: variable's own reader counts them)
        self._counted = [variable_field_name(a) for a in shape.arrays]

    def gather(self, rows: IntArray, out: npt.NDArray[Any], lane: int | None = None) -> None:
        """Rows ``rows`` of every variable into ``out``, ``(len(rows), V * row size)`` (of
        variable ``lane`` alone: ``(len(rows), row size)``); chunks the cache lacks decoded
        once."""
        per_chunk = self.rows_per_chunk
        chunks, inverse = np.unique(rows // per_chunk, return_inverse=True)
        slots = self._admit(chunks)
        where = slots[inverse.reshape(-1)] * per_chunk + rows % per_chunk
        buffer = self.cache.buffer  # after admit: it may have grown
        flat = buffer.reshape(len(buffer), -1)
        if lane is not None:
            flat = buffer.reshape(len(buffer), len(self.shape.arrays), -1)[:, lane]
        # mode="clip": every row is in range; "raise" gathers into a temporary
        np.take(flat, where, axis=0, out=out, mode="clip")

    def _admit(self, chunks: IntArray) -> IntArray:
        """The cache slot of each of ``chunks``, decoding those it lacks into their slots."""
        ctx, cache, shape = self.ctx, self.cache, self.shape
        slots, runs = cache.admit(chunks)
        decoded = rows = 0
        try:
            for run, first_slot in runs:
                # slots are consecutive and only the last chunk of the array is short, so
                # the run's rows are one block of the cache, as they are of each variable
                ranges = [(c * self.rows_per_chunk, min((c + 1) * self.rows_per_chunk,
                                                        shape.num_rows)) for c in run]  # fmt: skip
                count = sum(b - a for a, b in ranges)
                if len(self._lane) < count:
                    self._lane = np.empty((count, *self._lane.shape[1:]), self._lane.dtype)
                dest = cache.rows(first_slot, count)
                for j, array in enumerate(shape.arrays):
                    ctx.reader.read_into(array, ranges, self._lane[:count])
                    dest[:, j] = self._lane[:count]
                decoded += len(run)
                rows += count
        except BaseException:
            cache.forget([c for run, _ in runs for c in run])  # never serve a bad slot
            raise
        stats = ctx.stats
        variables = len(shape.arrays)
        stats.chunks_read += decoded * variables
        stats.rows_decoded += rows * variables
        stats.cache_hits += (len(chunks) - decoded) * variables
        for name in self._counted:
            stats.per_field[name] = stats.per_field.get(name, 0) + decoded
        return slots

    def prefetch(self, rows: IntArray) -> None:
        """Start fetching the chunks of ``rows`` the cache lacks (remote readers)."""
        prefetch = getattr(self.ctx.reader, "prefetch", None)
        if callable(prefetch):
            chunks = np.unique(rows // self.rows_per_chunk).tolist()
            missing = [c for c in chunks if c not in self.cache]
            for array in self.shape.arrays:
                prefetch(array, missing)


def variable_field_name(array: str) -> str:
    """The dense field a window variable ``array`` is read (and its chunks counted) as."""
    return "v_" + "".join(c if c.isalnum() or c in "_-" else "_" for c in array)[:120]
