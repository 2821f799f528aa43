"""Dense fields: every sample one shape, stored in sample-axis chunks.

plan (pure, :func:`~chunkio.read.planning.plan_batch`) -> read the chunks the cache lacks straight
into their slots (or into the output, for a chunk whose samples are one run of the batch) ->
gather the batch with one ``np.take``. A field small enough (labels, metadata) is read whole
once per process and gathered from.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from ..format.grid import SampleGrid
from ..format.layout import FieldInfo
from ..transforms.sample import FieldTransform, transform_rows
from ..util.numeric import IntArray
from .base import ReadContext, ReadRequest, checked_out, read_whole, transformed_buffer
from .cache import DecodedChunkCache
from .planning import BatchPlan, plan_batch

__all__ = ["ColumnReads", "DenseReads", "PreloadedReads", "dense_reads"]


def dense_reads(ctx: ReadContext, info: FieldInfo) -> DenseReads | PreloadedReads:
    """The reader of dense field ``info``: read whole once when it is small enough."""
    if info.sample_nbytes * ctx.layout.num_samples <= ctx.preload_bytes:
        return PreloadedReads(ctx, info)
    return DenseReads(ctx, info)


class PreloadedReads:
    """A dense field small enough (labels, metadata) to be read whole once per process."""

    def __init__(
        self, ctx: ReadContext, info: FieldInfo, whole: npt.NDArray[Any] | None = None
    ) -> None:
        self.ctx = ctx
        self.info = info
        #: every row (``whole``: rows read already, e.g. a lane of stacked window variables)
        self.whole = (
            read_whole(ctx.reader, info.roles.values, ctx.stats) if whole is None else whole
        )

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any]:
        if how.transform is not None:
            return _transformed(
                self.ctx, self.info, how.transform, self.whole, idx, idx + how.first, out, how.epoch
            )
        out = checked_out(self.info, len(idx), out)
        # mode="clip": idx is already validated, and the default mode="raise" makes numpy
        # gather into a temporary and copy it over (about 3x slower)
        np.take(self.whole, idx, axis=0, out=out, mode="clip")
        return checked_codes(self.ctx, self.info, out, idx)

    def prefetch(self, idx: IntArray) -> None:
        pass  # held whole


class ColumnReads(PreloadedReads):
    """A member of a compound dataset (a legacy AnnData ``obs`` column): the dataset is read
    whole once per process and the column kept."""

    def __init__(self, ctx: ReadContext, info: FieldInfo) -> None:
        self.ctx = ctx
        self.info = info
        whole = read_whole(ctx.reader, info.roles.values, ctx.stats)
        self.whole = np.ascontiguousarray(whole[getattr(info, "member", None) or info.name])


def checked_codes(
    ctx: ReadContext, info: FieldInfo, values: npt.NDArray[Any], idx: IntArray
) -> npt.NDArray[Any]:
    """``values`` (samples ``idx`` of ``info``), checked to be codes of its categories when it
    has them (-1: missing), else a :class:`~chunkio.errors.FormatError` naming the sample: a
    code past them would name no category, or another file's (columns larger than
    :data:`~chunkio.format.columns.CHECK_CODES_BYTES` are not checked when the dataset is
    made, and a file may change after)."""
    if info.categories is None or not len(idx):
        return values
    count = len(info.categories)
    if int(values.min()) >= -1 and int(values.max()) < count:
        return values  # every batch but a corrupt one: two reductions, no temporaries
    outside = ((values < -1) | (values >= count)).reshape(len(idx), -1)
    found = np.flatnonzero(outside.any(axis=1))
    if found.size:
        j = int(found[0])
        code = values.reshape(len(idx), -1)[j][outside[j]][0]
        raise FormatError(
            f"{ctx.reader.location}: field {info.name!r} ({info.roles.values!r}), sample "
            f"{int(idx[j])}: code {code} is outside the {count} categories (codes are -1 for "
            f"missing, else 0..{count - 1})"
        )
    return values


def _transformed(
    ctx: ReadContext,
    info: FieldInfo,
    transform: FieldTransform,
    source: npt.NDArray[Any],
    rows: IntArray,
    idx: IntArray,
    out: npt.NDArray[Any] | None,
    epoch: int,
) -> npt.NDArray[Any]:
    """Samples ``idx``, at ``rows`` of ``source``, transformed into ``out`` (or a new array)."""
    if out is None:
        stored = {tuple(info.sample_shape or ())}
        out = transformed_buffer(ctx, info, transform, stored, len(idx))
    transform_rows(transform, source, rows, idx, out, epoch, ctx.map_rows)
    return out


class DenseReads:
    """One dense field of one process's dataset handle, read through its cache of decoded
    chunks."""

    def __init__(self, ctx: ReadContext, info: FieldInfo) -> None:
        self.ctx = ctx
        self.info = info
        #: the field's own chunks (a store chunkio did not write may chunk fields apart); a
        #: chunk longer than the array (as stored metadata may say) holds the array: the
        #: cache's slots are never sized by more rows than there are
        n = ctx.layout.num_samples
        self.grid = SampleGrid(n, max(1, min(ctx.layout.rows_per_chunk(info), n)))
        self.array = info.roles.values
        self.cache = DecodedChunkCache(
            rows_per_chunk=self.grid.samples_per_chunk,
            sample_shape=tuple(info.sample_shape or ()),
            dtype=info.dtype,
            capacity=ctx.cache_chunks,
        )

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any]:
        if how.transform is not None:
            # decoded but not gathered: a transform reads each sample straight from its chunk
            buffer, rows = self.locate(idx)
            return _transformed(
                self.ctx, self.info, how.transform, buffer, rows, idx + how.first, out, how.epoch
            )
        out = checked_out(self.info, len(idx), out)
        return checked_codes(
            self.ctx, self.info, self._gather(plan_batch(idx, self.grid), out, how.once), idx
        )

    def locate(self, idx: IntArray) -> tuple[npt.NDArray[Any], IntArray]:
        """Decode the chunks of samples ``idx`` the cache lacks; the cache's buffer and the
        row of each sample in it (valid until the next read of this field)."""
        plan = plan_batch(idx, self.grid)
        slots = self._admit(plan.chunks)
        rows = slots[plan.chunk_pos] * self.grid.samples_per_chunk + plan.offsets
        return self.cache.buffer, rows

    def _gather(self, plan: BatchPlan, out: npt.NDArray[Any], once: bool) -> npt.NDArray[Any]:
        """Decode the chunks of ``plan`` the cache lacks, then gather the batch into ``out``."""
        chunks, pos = plan.chunks, plan.chunk_pos
        direct = self._direct_runs(plan) if once else []
        rows: npt.NDArray[np.bool_] | None = None
        offsets = plan.offsets
        if direct:
            self._read_direct(direct, out)
            keep = ~np.isin(chunks, [c for c, _ in direct])
            rows = keep[pos]
            chunks, pos = chunks[keep], (np.cumsum(keep) - 1)[pos][rows]
            offsets = offsets[rows]
            if not len(chunks):
                return out
        slots = self._admit(chunks)
        stats = self.ctx.stats
        started = time.perf_counter()
        where = slots[pos] * self.grid.samples_per_chunk + offsets
        if rows is None or rows.all():
            np.take(self.cache.buffer, where, axis=0, out=out, mode="clip")  # always in range
        else:
            out[rows] = self.cache.buffer[where]
        stats.gather_s += time.perf_counter() - started
        return out

    def _admit(self, chunks: IntArray) -> IntArray:
        """The cache slot of each of ``chunks``, decoding those it lacks into their slots."""
        ctx, cache, name, array = self.ctx, self.cache, self.info.name, self.array
        slots, runs = cache.admit(chunks)
        try:
            for run, first_slot in runs:
                ranges = [self.grid.bounds(c) for c in run]
                count = sum(b - a for a, b in ranges)
                ctx.reader.read_into(array, ranges, cache.rows(first_slot, count))
                ctx.stats.rows_decoded += count
        except BaseException:
            cache.forget([c for run, _ in runs for c in run])  # never serve a bad slot
            raise
        read = sum(len(run) for run, _ in runs)
        ctx.stats.chunks_read += read
        ctx.stats.cache_hits += len(chunks) - read
        ctx.stats.per_field[name] = ctx.stats.per_field.get(name, 0) + read
        return slots

    def prefetch(self, idx: IntArray) -> None:
        chunks = np.unique(idx // self.grid.samples_per_chunk).tolist()
        self.ctx.reader.prefetch(self.array, [c for c in chunks if c not in self.cache])

    def _direct_runs(self, plan: BatchPlan) -> list[tuple[int, int]]:
        """``(chunk, position)`` of chunks the cache lacks whose every sample the batch asks
        for once, in storage order, at positions ``[position, position + size)``: those are
        decoded straight into the output (no cache slot, no gather copy). A shuffled batch
        rarely has one; a sequential one is mostly made of them."""
        counts = np.bincount(plan.chunk_pos, minlength=len(plan.chunks))
        spc, n = self.grid.samples_per_chunk, self.grid.num_samples
        sizes = np.minimum(spc, n - plan.chunks * spc)
        found = []
        for k in np.flatnonzero(counts == sizes).tolist():
            chunk = int(plan.chunks[k])
            if chunk in self.cache:
                continue  # decoded already: gathering it is cheaper than decoding it again
            first = int(np.argmax(plan.chunk_pos == k))
            size = int(sizes[k])
            run = plan.indices[first : first + size]
            if len(run) == size and run[0] == chunk * spc and (np.diff(run) == 1).all():
                found.append((chunk, first))
        return found

    def _read_direct(self, direct: list[tuple[int, int]], out: npt.NDArray[Any]) -> None:
        ctx, name = self.ctx, self.info.name
        for chunk, first in direct:
            a, b = self.grid.bounds(chunk)
            ctx.reader.read_into(self.array, [(a, b)], out[first : first + b - a])
            ctx.stats.rows_decoded += b - a
        ctx.stats.chunks_read += len(direct)
        ctx.stats.direct_chunks += len(direct)
        ctx.stats.per_field[name] = ctx.stats.per_field.get(name, 0) + len(direct)
