"""Ragged fields: samples of different shapes, stored as one flat values array plus each
sample's offset and shape (read whole once per process, and checked then, before any of them
sizes a read: :func:`chunkio.format.grid.checked_ragged`, a FormatError naming the sample).

Without a transform a batch is a list of arrays, one per sample. With a field transform (images
of several sizes stored raw, e.g. by ``convert_images(..., encoding="raw")``) each sample is
transformed on its way into one batch array, as a dense field's are: same keys ``(seed, epoch,
index)``, same pixels as the transform of the sample read on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import TransformError
from ..format.grid import SampleGrid, checked_ragged
from ..format.layout import FieldInfo
from ..transforms.sample import FieldTransform, transform_rows
from ..util.numeric import IntArray, ceil_div
from .base import ReadContext, ReadRequest, read_whole, transformed_shape

__all__ = ["RaggedReads"]


class RaggedReads:
    """One ragged field of one process's dataset handle: its offsets and shapes, and the grid
    of its values array. Samples come back as a list of arrays, or, transformed, as one array
    (``out`` when given)."""

    def __init__(self, ctx: ReadContext, info: FieldInfo) -> None:
        self.ctx = ctx
        self.info = info
        roles = info.roles
        self.values_name, offsets_name, shapes_name = roles.values, roles.offsets, roles.shapes
        where = f"{ctx.reader.location}: field {info.name!r} ({offsets_name!r}, {shapes_name!r})"
        self.offsets = read_whole(ctx.reader, offsets_name).astype(np.int64)
        self.shapes = read_whole(ctx.reader, shapes_name).astype(np.int64)
        values = ctx.reader.array_info(self.values_name)
        self.step = int(values.chunks[0])
        self.grid = SampleGrid(int(values.shape[0]), self.step)
        # stored numbers: checked before any of them sizes a read or a staging buffer
        checked_ragged(
            self.offsets,
            self.shapes,
            ctx.grid,
            self.step,
            self.grid.num_samples,
            where=where,
        )

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> list[npt.NDArray[Any]] | npt.NDArray[Any]:
        transform = how.transform
        if transform is None:
            return [sample.copy() for sample in self._views(idx)]
        # an empty batch has the shape of sample 0's
        stored = {tuple(s) for s in self.shapes[idx if len(idx) else slice(0, 1)].tolist()}
        shape = transformed_shape(self.ctx, self.info, transform, stored)
        if out is None:
            out = np.empty((len(idx), *shape), self.info.dtype)
        elif out.shape != (len(idx), *shape) or out.dtype != self.info.dtype:
            raise TransformError(
                f"{self.ctx.reader.location}: output buffer for the transformed field "
                f"{self.info.name!r} must be {(len(idx), *shape)} {self.info.dtype}; got "
                f"{out.shape} {out.dtype}"
            )
        return self._transformed(self._views(idx), idx, transform, out, how)

    def _transformed(
        self,
        samples: list[npt.NDArray[Any]],
        idx: IntArray,
        transform: FieldTransform,
        out: npt.NDArray[Any],
        how: ReadRequest,
    ) -> npt.NDArray[Any]:
        rows = np.arange(len(samples))
        # keyed by the whole dataset's index, as a dense field's samples are
        transform_rows(transform, samples, rows, idx + how.first, out, how.epoch, self.ctx.map_rows)
        return out

    def _views(self, idx: IntArray) -> list[npt.NDArray[Any]]:
        """Samples ``idx``, each a view of one staging buffer (valid until it is dropped)."""
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
            rows.append(staging[begin : begin + b - a].reshape(tuple(shape)))
        return rows

    def prefetch(self, idx: IntArray) -> None:
        pass  # read on demand (rarely remote-scale)
