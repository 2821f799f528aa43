"""Sparse fields: rows of a CSR matrix, scattered into dense batches.

A batch of rows reads each row's ``indptr`` range, decodes the ``data`` and ``indices``
chunks those ranges touch once (each array through its own decoded-chunk cache, so the
batches of a chunk-aware order that reuse a chunk do not decode it again), and scatters the
rows' values into a zero-filled ``(B, n_cols)`` array of ``data``'s dtype: assigned when no
row repeats a column (a stored -0.0 stays -0.0), else added up over the batch, as
``np.add.at`` and scipy's ``toarray()`` add a row's duplicate columns.
Dense batches are scattered by the compiled ``_sparse_rows`` straight from the caches'
buffers, row by row and chunk by chunk (no per-value positions, gathers or column arrays;
one pass with the GIL released). Without it (no C compiler at install), for ``"csr"``
batches, and for dtypes it does not take (non-native byte order; a repeated column of bool
or float16 values) NumPy does the same: each row one run of a cache's buffer found from its
first value, gathered, checked and scattered in one flat assignment or ``np.add.at``.
Columns outside the matrix are a :class:`~chunkio.errors.FormatError` naming the row; so are
offsets and counts that place a row outside the stored values or over another row's
(:func:`chunkio.format.grid.checked_ragged`, once per process, when the field is opened).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from ..format.grid import SampleGrid, checked_ragged
from ..format.sparse import SparseInfo, check_indptr
from ..util.numeric import IntArray
from .base import ReadContext, ReadRequest, checked_out, read_whole
from .cache import DecodedChunkCache

_dense_rows: Callable[..., Any] | None
try:  # the compiled scatter (setup.py builds it where a C compiler is)
    from ._sparse_rows import dense as _dense_rows
except ImportError:  # pragma: no cover - a build without a C compiler
    _dense_rows = None

#: how the compiled scatter adds a dtype's values (repeated columns): float32, float64;
#: integers are 3 (any width, wrapping), others (bool, float16) 0: NumPy adds them
_ADD_KINDS = {"f4": 1, "f8": 2}

__all__ = ["CSRBatch", "SparseReads", "join_rows"]


@dataclass(frozen=True)
class CSRBatch:
    """A batch of sparse rows as CSR arrays (``ChunkDataset(sparse_batches="csr")``): row
    ``b``'s values are ``data[indptr[b]:indptr[b + 1]]`` at columns ``indices[...]``; as a
    tensor, ``torch.sparse_csr_tensor`` (:meth:`to_torch`)."""

    indptr: IntArray
    indices: IntArray
    data: npt.NDArray[Any]
    shape: tuple[int, int]

    def to_torch(self) -> Any:
        import torch

        with warnings.catch_warnings():  # torch's notice that sparse CSR is a beta feature
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(
                torch.from_numpy(self.indptr),
                torch.from_numpy(self.indices),
                torch.from_numpy(self.data),
                size=self.shape,
                check_invariants=False,  # built here: rows in order, columns checked on read
            )

    def toarray(self) -> npt.NDArray[Any]:
        """The rows densified (as the default dense batches hold them)."""
        out = np.zeros(self.shape, self.data.dtype)
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        np.add.at(out, (rows, self.indices), self.data)
        return out


def join_rows(pieces: Sequence[tuple[IntArray, CSRBatch]], num_rows: int) -> CSRBatch:
    """One batch of ``num_rows`` rows from ``pieces`` of it: ``(rows, part)``, row ``j`` of
    ``part`` going to row ``rows[j]`` (each row given by one piece; a batch read from several
    files, say).

    >>> a = CSRBatch(np.array([0, 1, 3]), np.array([2, 0, 1]), np.array([5.0, 6, 7]), (2, 3))
    >>> b = CSRBatch(np.array([0, 0]), np.array([], int), np.array([]), (1, 3))
    >>> join_rows([(np.array([0, 2]), a), (np.array([1]), b)], 3).toarray().tolist()
    [[0.0, 0.0, 5.0], [0.0, 0.0, 0.0], [6.0, 7.0, 0.0]]
    """
    first = pieces[0][1]
    counts = np.zeros(num_rows, np.int64)
    for rows, part in pieces:
        counts[rows] = np.diff(part.indptr)
    indptr = np.zeros(num_rows + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    data = np.empty(int(indptr[-1]), first.data.dtype)
    indices = np.empty(int(indptr[-1]), first.indices.dtype)
    for rows, part in pieces:
        nnz = int(part.indptr[-1])
        where = np.arange(nnz) + np.repeat(indptr[rows] - part.indptr[:-1], np.diff(part.indptr))
        data[where] = part.data[:nnz]
        indices[where] = part.indices[:nnz]
    return CSRBatch(indptr.astype(first.indptr.dtype), indices, data, (num_rows, first.shape[1]))


class _Values:
    """One 1-D array of a CSR group (``data`` or ``indices``), read through a cache of its
    decoded chunks."""

    def __init__(
        self, ctx: ReadContext, name: str, size: int, chunk: int, dtype: Any, slots_per_chunk: int
    ) -> None:
        """``slots_per_chunk``: this array's chunks a chunk of the order reads."""
        self.ctx = ctx
        self.name = name
        # a chunk longer than the array (as its metadata may say) holds the array: the cache's
        # slots are never sized by more values than are stored
        self.grid = SampleGrid(size, max(1, min(chunk, size)))
        self.cache = DecodedChunkCache(
            rows_per_chunk=self.grid.samples_per_chunk,
            sample_shape=(),
            dtype=dtype,
            # never more slots than the array has chunks (a cache of tiny chunks would
            # otherwise size its bookkeeping by the byte budget, 10^5+ slots per field)
            capacity=max(1, min(slots_per_chunk * ctx.cache_chunks, self.grid.num_chunks)),
        )

    def chunks_of(self, starts: IntArray, stops: IntArray) -> IntArray:
        """The chunks (sorted, unique) holding the values ``[starts[i], stops[i])`` (rows that
        hold values only): from the ranges' ends, not from every position."""
        step = self.grid.samples_per_chunk
        first, last = starts // step, (stops - 1) // step
        if not len(first):
            return np.zeros(0, np.int64)
        ends: IntArray
        if int((last - first).max()) <= 1:
            ends = np.concatenate([first, last])
        else:  # rows longer than a chunk: every chunk between
            counts = last - first + 1
            offsets = _arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            ends = np.repeat(first, counts) + offsets
        ends.sort()
        chunks: IntArray = ends[np.concatenate([[True], ends[1:] != ends[:-1]])]
        return chunks

    def places(self, rows: _RowPlan, needed: IntArray, slots: IntArray) -> IntArray:
        """Where each value of the plan's rows lies in the cache's buffer, in batch order
        (``slots``: those of chunks ``needed``, sorted and unique, as :meth:`admit` gives)."""
        step = self.grid.samples_per_chunk
        base = int(needed[0])
        slot_of = self.slot_map(needed, slots)
        # a row's values are one run of the buffer from where its first value lies (a row
        # that crosses into chunks held in the next slots too): one repeat per batch, not a
        # chunk lookup per value
        first = rows.starts // step
        lead = slot_of[first - base] * step + (rows.starts - first * step)
        where = np.repeat(lead - rows.offsets, rows.held_counts)
        where += _arange(len(where))
        last = (rows.stops - 1) // step
        crossing = np.flatnonzero(last > first)
        if crossing.size:  # rows whose next chunks are held elsewhere: their values one by one
            apart = np.concatenate([[0], np.cumsum(np.diff(slot_of) != 1)])
            broken = crossing[apart[last[crossing] - base] != apart[first[crossing] - base]]
            if broken.size:
                counts = rows.held_counts[broken]
                inner = _arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
                chunk, within = np.divmod(np.repeat(rows.starts[broken], counts) + inner, step)
                at = np.repeat(rows.offsets[broken], counts) + inner
                where[at] = slot_of[chunk - base] * step + within
        return where

    @staticmethod
    def slot_map(needed: IntArray, slots: IntArray) -> IntArray:
        """Chunk ``needed[0] + k`` -> its slot, ``needed`` (sorted, unique) -> ``slots``;
        -1 for the chunks between that the rows do not touch."""
        base = int(needed[0])
        slot_of = np.full(int(needed[-1]) - base + 1, -1, np.int64)
        slot_of[needed - base] = slots
        return slot_of

    def admit(self, needed: IntArray) -> IntArray:
        """The cache slots of chunks ``needed``, decoding those not held."""
        slots, runs = self.cache.admit(needed)
        stats = self.ctx.stats
        try:
            for run, first_slot in runs:
                ranges = [self.grid.bounds(c) for c in run]
                count = sum(b - a for a, b in ranges)
                self.ctx.reader.read_into(self.name, ranges, self.cache.rows(first_slot, count))
                stats.rows_decoded += count
        except BaseException:
            self.cache.forget([c for run, _ in runs for c in run])  # never serve a bad slot
            raise
        read = sum(len(run) for run, _ in runs)
        stats.chunks_read += read
        stats.cache_hits += len(needed) - read
        stats.per_field[self.name] = stats.per_field.get(self.name, 0) + read
        return slots

    def prefetch(self, needed: IntArray) -> None:
        self.ctx.reader.prefetch(self.name, [c for c in needed.tolist() if c not in self.cache])


class _RowPlan(NamedTuple):
    """A batch's rows in a CSR matrix: values per row (all rows); the rows that hold any (their
    places in the batch), the ``[start, stop)`` ranges of their stored values, how many, and
    where each row's first value goes in the batch's values."""

    counts: IntArray
    #: the batch's rows that hold values (their positions in the batch)
    rows: IntArray
    starts: IntArray
    stops: IntArray
    held_counts: IntArray
    offsets: IntArray


class SparseReads:
    """One sparse field of one process's dataset handle: where each row's values start and
    stop (from ``indptr``, or a chunkio dataset's offsets and counts; read whole once per
    process) and the caches of its ``data`` and ``indices`` chunks."""

    def __init__(self, ctx: ReadContext, info: Any) -> None:
        if not isinstance(info, SparseInfo):
            raise TypeError(f"field {info.name!r}: a sparse field needs a SparseInfo")
        self.ctx = ctx
        self.info = info
        where = f"{ctx.reader.location}: {info.where}"
        # where rows lie is read again in each process (the file may have changed since the
        # dataset was made) and checked whole before any of it sizes a read: every process
        # then gives the same verdict, and no row reads another's values
        if info.group:  # a CSR group: row i is indptr[i]..indptr[i + 1] (views, no copy)
            indptr = info.roles.offsets
            whole = read_whole(ctx.reader, indptr, ctx.stats).astype(np.int64)
            rows = sum(info.chunk_sizes)
            if len(whole) != rows + 1:
                raise FormatError(
                    f"{where}: {indptr!r} holds {len(whole)} offsets; the dataset was made "
                    f"with {rows} rows (rows + 1 offsets): the file changed"
                )
            check_indptr(whole, info.nnz, where)
            self.starts, self.stops = whole[:-1], whole[1:]
        else:  # chunkio's own: padding may follow a chunk's last row, so starts + counts
            offsets, counts = info.roles.offsets, info.roles.shapes
            stored = read_whole(ctx.reader, offsets, ctx.stats)
            self.starts = stored.astype(np.int64)[:-1]
            self.stops = checked_ragged(
                stored,
                read_whole(ctx.reader, counts, ctx.stats),
                ctx.grid,
                info.data_chunk,
                info.nnz,
                where=f"{where} ({offsets!r}, {counts!r})",
            )
        # an order chunk is the rows starting in its `order_group` data chunks: the last row
        # runs into the next chunk (the indices array may be chunked apart: in proportion)
        per = info.order_group + 1
        data, indices = info.roles.values, info.roles.indices
        self.data = _Values(ctx, data, info.nnz, info.data_chunk, info.dtype, per)
        found = ctx.reader.array_info(indices)
        ratio = -(-info.data_chunk * info.order_group // info.indices_chunk) + 1
        self.indices = _Values(ctx, indices, info.nnz, info.indices_chunk, found.dtype, ratio)

    def _plan(self, idx: IntArray) -> _RowPlan:
        """Where the stored values of rows ``idx`` are (pure: ``indptr`` looked up once)."""
        starts = self.starts[idx]
        stops = self.stops[idx]
        counts = stops - starts
        held = np.flatnonzero(counts)
        if len(held) < len(idx):
            starts, stops = starts[held], stops[held]
        held_counts = stops - starts
        return _RowPlan(
            counts=counts,
            rows=held,
            starts=starts,
            stops=stops,
            held_counts=held_counts,
            offsets=np.cumsum(held_counts) - held_counts,
        )

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any] | CSRBatch:
        info = self.info
        if how.transform is not None:
            raise TypeError(f"field {info.name!r}: a field transform cannot apply to a sparse row")
        plan = self._plan(idx)
        if info.batches == "csr":
            values, columns = self._values(plan, self._admit(plan))
            self._check_columns(columns, plan, idx)
            indptr = np.concatenate([[0], np.cumsum(plan.counts)]).astype(np.int64)
            return CSRBatch(indptr, columns.astype(np.int64, copy=False), values,
                            (len(idx), info.n_cols))  # fmt: skip
        out = checked_out(info, len(idx), out)
        kernel = self._compiled(out)
        if kernel is not None:
            return self._dense_compiled(kernel, plan, idx, out)
        values, columns = self._values(plan, self._admit(plan))
        self._check_columns(columns, plan, idx)
        return self._dense(plan, values, columns, out)

    def _dense(
        self,
        plan: _RowPlan,
        values: npt.NDArray[Any],
        columns: npt.NDArray[Any],
        out: npt.NDArray[Any],
    ) -> npt.NDArray[Any]:
        """``out`` zeroed, the gathered ``values`` scattered into it at ``columns`` (NumPy)."""
        n_cols = self.info.n_cols
        out[...] = 0
        if not len(values):
            return out
        # each value's place in the rows laid end to end: rising when no row repeats a column
        # (columns rise within each row, as in every canonical CSR matrix), so one scatter
        flat = np.repeat(np.arange(len(plan.counts), dtype=np.int64) * n_cols, plan.counts)
        flat += columns if np.can_cast(columns.dtype, np.int64) else columns.astype(np.int64)
        whole = out.reshape(-1) if out.flags.c_contiguous else None  # a view, never a copy
        if whole is not None and bool(np.all(flat[1:] > flat[:-1])):
            whole[flat] = values
        else:  # a row repeats a column: its values add up, as scipy's toarray() does
            np.add.at(out, np.divmod(flat, n_cols), values)
        return out

    def _compiled(self, out: npt.NDArray[Any]) -> Callable[..., Any] | None:
        """The compiled scatter, where it takes this field into ``out`` (C order, aligned,
        writeable, of a native dtype of 1-8 bytes; columns native int32 or int64), else None."""
        flags = out.flags
        if _dense_rows is None or not (flags.c_contiguous and flags.aligned and flags.writeable):
            return None  # NumPy's path (a read-only out: NumPy's own error)
        data, columns = out.dtype, self.indices.cache.buffer.dtype
        fits = (
            data.isnative
            and data.itemsize in (1, 2, 4, 8)
            and data == self.data.cache.buffer.dtype
            and columns.kind == "i"
            and columns.itemsize in (4, 8)
            and columns.isnative
        )
        return _dense_rows if fits else None

    def _dense_compiled(
        self, kernel: Callable[..., Any], plan: _RowPlan, idx: IntArray, out: npt.NDArray[Any]
    ) -> npt.NDArray[Any]:
        """``out`` zeroed and the plan's rows scattered into it by the compiled kernel, from
        the caches' buffers (no per-value arrays); NumPy adds the repeated columns of dtypes
        the kernel does not add (bool, float16)."""
        data, indices = self.data, self.indices
        data_map = index_map = np.zeros(0, np.int64)  # chunk - base -> slot
        data_base = index_base = 0
        admitted = (data_map, data_map, data_map, data_map)
        if len(plan.starts):
            admitted = self._admit(plan)
            needed, slots, index_needed, index_slots = admitted
            data_map = data.slot_map(needed, slots)
            index_map = (
                data_map if index_slots is slots else indices.slot_map(index_needed, index_slots)
            )
            data_base, index_base = int(needed[0]), int(index_needed[0])
        found = kernel(
            out,
            len(idx),
            self.info.n_cols,
            out.dtype.itemsize,
            _ADD_KINDS.get(out.dtype.str[1:], 3 if out.dtype.kind in "iu" else 0),
            data.cache.buffer,
            data_map,
            data_base,
            data.grid.samples_per_chunk,
            indices.cache.buffer,
            indices.cache.buffer.dtype.itemsize,
            index_map,
            index_base,
            indices.grid.samples_per_chunk,
            plan.rows,
            plan.starts,
            plan.held_counts,
        )
        if found is None:
            return out
        if found is False:  # a row repeats a column: added by NumPy
            values, columns = self._values(plan, admitted)
            # the kernel stopped at that row: later rows' columns are not checked yet
            self._check_columns(columns, plan, idx)
            return self._dense(plan, values, columns, out)
        row, column = found  # ``out`` holds part of the batch: the batch fails as a whole
        raise self._bad_column(int(idx[row]), column)

    def _admit(self, plan: _RowPlan) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """The chunks of ``data`` the plan's rows touch and their cache slots (decoding those
        not held), then those of ``indices`` (the same array of chunks when chunked alike,
        and the same array of slots when they agree)."""
        data, indices = self.data, self.indices
        needed = data.chunks_of(plan.starts, plan.stops)
        slots = data.admit(needed)
        index_needed = (
            needed if indices.grid == data.grid else indices.chunks_of(plan.starts, plan.stops)
        )
        index_slots = indices.admit(index_needed)
        # the same chunks: slots as many, the same where both caches hold them alike
        if index_needed is needed and bool((index_slots == slots).all()):
            index_slots = slots
        return needed, slots, index_needed, index_slots

    def _values(
        self, plan: _RowPlan, admitted: tuple[IntArray, IntArray, IntArray, IntArray]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """The stored values and columns the plan's rows hold, in batch order (``admitted``:
        :meth:`_admit`'s chunks and slots)."""
        if not len(plan.starts):
            return np.zeros(0, self.info.dtype), np.zeros(0, np.int64)
        needed, slots, index_needed, index_slots = admitted
        where = self.data.places(plan, needed, slots)
        values = self.data.cache.buffer[where]
        if index_slots is not slots:  # chunked apart, or held in other slots
            where = self.indices.places(plan, index_needed, index_slots)
        columns = self.indices.cache.buffer[where]
        return values, columns

    def _check_columns(self, columns: npt.NDArray[Any], plan: _RowPlan, idx: IntArray) -> None:
        if not len(columns):
            return
        if int(columns.min()) >= 0 and int(columns.max()) < self.info.n_cols:
            return
        bad = int(np.flatnonzero((columns < 0) | (columns >= self.info.n_cols))[0])
        row = int(idx[plan.rows[np.searchsorted(plan.offsets, bad, "right") - 1]])
        raise self._bad_column(row, int(columns[bad]))

    def _bad_column(self, row: int, column: int) -> FormatError:
        return FormatError(
            f"{self.ctx.reader.location}: {self.info.where}, row {row}: "
            f"column index {column} is outside the matrix's "
            f"{self.info.n_cols} columns (a corrupt indices array)"
        )

    def prefetch(self, idx: IntArray) -> None:
        plan = self._plan(idx)
        for values in (self.data, self.indices):
            values.prefetch(values.chunks_of(plan.starts, plan.stops))


_ARANGE: list[IntArray] = [np.arange(0, dtype=np.int64)]


def _arange(n: int) -> IntArray:
    """``np.arange(n)``, read-only: a view of one array kept per process (each array a batch
    reads asks for one as long as its values)."""
    if n > len(_ARANGE[0]):
        grown = np.arange(max(n, 2 * len(_ARANGE[0])), dtype=np.int64)
        grown.flags.writeable = False
        _ARANGE[0] = grown
    return _ARANGE[0][:n]
