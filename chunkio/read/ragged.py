"""Ragged fields: samples of different shapes, stored as one flat values array plus each
sample's offset and shape (read whole once per process)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..format.grid import SampleGrid
from ..format.layout import FieldInfo
from ..util.numeric import IntArray, ceil_div
from .base import ReadContext, ReadRequest, read_whole

__all__ = ["RaggedField"]


class RaggedField:
    """One ragged field of one process's dataset handle: its offsets and shapes, and the grid
    of its values array. Samples come back as a list of arrays."""

    def __init__(self, ctx: ReadContext, info: FieldInfo) -> None:
        self.ctx = ctx
        self.info = info
        self.values_name, offsets_name, shapes_name = info.array_names()
        self.offsets = read_whole(ctx.reader, offsets_name).astype(np.int64)
        self.shapes = read_whole(ctx.reader, shapes_name).astype(np.int64)
        values = ctx.reader.array_info(self.values_name)
        self.step = int(values.chunks[0])
        self.grid = SampleGrid(int(values.shape[0]), self.step)

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> list[npt.NDArray[Any]]:
        # A sample is prod(shape) values from its offset; offsets[i + 1] may lie further on
        # (writers pad each chunk's values to a values-chunk boundary, see convert.ragged).
        step = self.step
        starts = self.offsets[idx]
        stops = starts + np.prod(self.shapes[idx], axis=1, dtype=np.int64)
        spans = list(zip(starts.tolist(), stops.tolist(), strict=True))
        needed = sorted({c for a, b in spans for c in range(a // step, ceil_div(b, step))})
        ranges = [self.grid.bounds(c) for c in needed]
        staging = np.empty(sum(b - a for a, b in ranges), dtype=self.info.dtype)
        if ranges:
            self.ctx.reader.read_into(self.values_name, ranges, staging)
        self.ctx.stats.chunks_read += len(ranges)
        chunk_pos = {c: i for i, c in enumerate(needed)}
        row_of_chunk = np.concatenate([[0], np.cumsum([b - a for a, b in ranges])])
        rows = []
        for (a, b), shape in zip(spans, self.shapes[idx], strict=True):
            c = a // step
            begin = int(row_of_chunk[chunk_pos[c]]) + a - c * step if b > a else 0
            rows.append(staging[begin : begin + b - a].reshape(tuple(shape)).copy())
        return rows

    def prefetch(self, idx: IntArray) -> None:
        pass  # read on demand (rarely remote-scale)
