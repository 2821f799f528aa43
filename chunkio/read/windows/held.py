"""Stacked window variables held decoded: whole, or their first chunks past the budget.

A loader holds a window field's stacked variables whole when they fit ``Workers(hold_bytes)``
(:func:`chunkio.read.windows.held_stack`). When they do not, the budget left beside the
streamed caches still holds their first whole row chunks (:func:`held_part`): decoded once for
all the workers in the loader's shared-memory segment, kept across epochs, so that each pass
decodes only the chunks past them (the held fraction of every epoch's decode is saved). The
loader says how many rows through the readers' ``preload_bytes`` (the part's decoded bytes,
:func:`part_shape`): each process finds the same part, with no other message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from ...util.shared_stack import StackShape, fill_shared
from ...util.shm import attach
from ..base import ReadContext

__all__ = ["LaneFiller", "held_part", "part_shape", "segment_fits"]


class LaneFiller:
    """Reads rows ``a:b`` (whole chunks) of variable ``j`` into its strided lane of a stack,
    through one bounded temporary; ``counted``: the names each variable's decoded chunks are
    counted under in the read statistics (``None``: not counted per field)."""

    def __init__(
        self, ctx: ReadContext, shape: StackShape, counted: list[str] | None = None
    ) -> None:
        self.ctx = ctx
        self.shape = shape
        self.counted = counted
        self.buffer: npt.NDArray[Any] | None = None

    def __call__(self, stack: npt.NDArray[Any], j: int, a: int, b: int) -> None:
        if self.buffer is None or len(self.buffer) < b - a:
            self.buffer = np.empty((b - a, *stack.shape[2:]), dtype=stack.dtype)
        per_chunk = max(1, self.shape.chunk_rows[j])
        ranges = [(c, min(c + per_chunk, b)) for c in range(a, b, per_chunk)]
        self.ctx.reader.read_into(self.shape.arrays[j], ranges, self.buffer[: b - a])
        stack[a:b, j] = self.buffer[: b - a]
        stats = self.ctx.stats
        stats.chunks_read += len(ranges)
        stats.rows_decoded += b - a
        if self.counted is not None:
            name = self.counted[j]
            stats.per_field[name] = stats.per_field.get(name, 0) + len(ranges)


def part_shape(shape: StackShape, nbytes: int) -> StackShape | None:
    """The stack of ``shape``'s first whole row chunks that fit ``nbytes`` decoded bytes, or
    ``None``: not one chunk fits, or all of them do (the stack is held whole then). Its
    variables are chunked alike along time.

    >>> s = StackShape(("a", "b"), (4, 4), 10, (2,), "<f4", 1 << 20)  # 64 bytes a row chunk
    >>> part_shape(s, 140).num_rows, part_shape(s, 63), part_shape(s, 192)
    (8, None, None)
    """
    per_chunk = max(1, shape.chunk_rows[0])
    chunk_bytes = len(shape.arrays) * shape.row_nbytes * per_chunk
    rows = nbytes // max(1, chunk_bytes) * per_chunk
    if rows <= 0 or rows >= shape.num_rows:
        return None
    return dataclasses.replace(shape, num_rows=rows)


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


def held_part(ctx: ReadContext, shape: StackShape, counted: list[str]) -> npt.NDArray[Any] | None:
    """The first row chunks of stack ``shape``, ``(rows, V, *sample_shape)``, decoded once in
    the loader's shared-memory segment for them (by this process and the others together),
    or ``None``: no segment (not a loader's reader, or the stack is held whole or streamed
    whole), or one that is not the size the part needs (then every chunk is streamed)."""
    name = ctx.held.get(shape.arrays)
    if name is None or shape.data_nbytes <= ctx.preload_bytes:
        return None
    part = part_shape(shape, ctx.preload_bytes)
    if part is None:
        return None
    return fill_shared(name, part, LaneFiller(ctx, part, counted))
