"""Window fields: steps of dense arrays around each anchor (:class:`chunkio.Field` steps).

A batch of anchors ``a`` reads rows ``a + step`` of each variable. Windows of neighbouring
anchors overlap, so the batch's rows are made unique first; each variable's dense reader
(:class:`~chunkio.read.dense.DenseField`, shared by every window field of that array in this
process) decodes the chunks of that union once, through its cache, and one gather per variable
puts each ``(anchor, step)`` row into the batch at ``[b, step, variable]``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..layout import FieldInfo
from ..numeric import IntArray
from .base import ReadContext, ReadOptions
from .dense import DenseField, PreloadedField, dense_field

__all__ = ["WindowField", "variable_reader"]


def variable_reader(ctx: ReadContext, info: Any, j: int) -> DenseField | PreloadedField:
    """The process's one dense reader of variable ``j`` of window field ``info`` (made on
    first use, shared by every window field that reads the array)."""
    array = info.arrays[j]
    found = ctx.shared.get(array)
    if found is None:
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in array)[:120]
        dense = FieldInfo(
            f"v_{name}",
            info.dtype,
            tuple(info.sample_shape[info.stepped + info.stacked :]),
            array=array,
            rows_per_chunk=info.rows[j],
        )
        found = ctx.shared[array] = dense_field(ctx, dense)
    return cast(DenseField | PreloadedField, found)


class WindowField:
    """One window field of one process's dataset handle; ``idx`` are anchor rows."""

    def __init__(self, ctx: ReadContext, info: Any) -> None:
        self.ctx = ctx
        self.info = info
        self.steps = np.asarray(info.steps, dtype=np.int64)
        self.sources = [variable_reader(ctx, info, j) for j in range(len(info.arrays))]

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadOptions
    ) -> npt.NDArray[Any]:
        info = self.info
        if how.transform is not None:
            raise TypeError(f"field {info.name!r}: a field transform cannot apply to a window")
        shape = (len(idx), *info.sample_shape)
        if out is None:
            out = np.empty(shape, dtype=info.dtype)
        elif out.shape != shape or out.dtype != info.dtype:
            raise ValueError(
                f"output buffer for field {info.name!r} must be {shape} {info.dtype}; "
                f"got {out.shape} {out.dtype}"
            )
        if not len(idx):
            return out
        target = out if out.flags.c_contiguous else np.empty(shape, dtype=info.dtype)
        rows = idx[:, None] + self.steps[None, :]  # (B, S); anchors keep every step inside
        union, inverse = np.unique(rows, return_inverse=True)
        inverse = inverse.reshape(-1)
        view = target.reshape(len(idx) * len(self.steps), len(self.sources), -1)
        for j, source in enumerate(self.sources):
            if isinstance(source, PreloadedField):
                buffer, where = source.whole, union
            else:
                buffer, where = source.locate(union)
            flat = buffer.reshape(len(buffer), -1)
            # mode="clip": every row is in range; "raise" gathers into a temporary first
            np.take(flat, where[inverse], axis=0, out=view[:, j, :], mode="clip")
        if target is not out:
            out[...] = target
        return out

    def prefetch(self, idx: IntArray) -> None:
        rows = np.unique(idx[:, None] + self.steps[None, :])
        for source in self.sources:
            source.prefetch(rows)
