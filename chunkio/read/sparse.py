"""Sparse fields: rows of a CSR matrix, scattered into dense batches.

A batch of rows reads each row's ``indptr`` range, decodes the ``data`` and ``indices``
chunks those ranges touch once (each array through its own decoded-chunk cache, so the
batches of a chunk-aware order that reuse a chunk do not decode it again), gathers the
batch's values and columns, and scatters them into a zero-filled ``(B, n_cols)`` array of
``data``'s dtype (scipy's ``toarray()`` of the same rows: duplicate columns of a row add up).
Columns outside the matrix are a :class:`~chunkio.errors.FormatError` naming the row.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from ..format.grid import SampleGrid
from ..format.sparse import SparseInfo
from ..util.numeric import IntArray
from .base import ReadContext, ReadRequest, read_whole
from .cache import DecodedChunkCache

__all__ = ["CSRBatch", "SparseField"]


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


class _Values:
    """One 1-D array of a CSR group (``data`` or ``indices``), read through a cache of its
    decoded chunks."""

    def __init__(self, ctx: ReadContext, name: str, size: int, chunk: int, dtype: Any) -> None:
        self.ctx = ctx
        self.name = name
        self.grid = SampleGrid(size, max(1, chunk))
        self.cache = DecodedChunkCache(
            rows_per_chunk=self.grid.samples_per_chunk,
            sample_shape=(),
            dtype=dtype,
            capacity=max(1, ctx.cache_chunks),
        )

    def take(self, positions: IntArray) -> npt.NDArray[Any]:
        """The values at ``positions`` (sorted or not), decoding the chunks not held."""
        step = self.grid.samples_per_chunk
        chunk_of = positions // step
        needed = np.unique(chunk_of)
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
        where = slots[np.searchsorted(needed, chunk_of)] * step + positions % step
        found: npt.NDArray[Any] = self.cache.buffer[where]
        return found

    def prefetch(self, positions: IntArray) -> None:
        prefetch = getattr(self.ctx.reader, "prefetch", None)
        if callable(prefetch):
            chunks = np.unique(positions // self.grid.samples_per_chunk).tolist()
            prefetch(self.name, [c for c in chunks if c not in self.cache])


class SparseField:
    """One sparse field of one process's dataset handle: its ``indptr`` (read whole once per
    process) and the caches of its ``data`` and ``indices`` chunks."""

    def __init__(self, ctx: ReadContext, info: Any) -> None:
        if not isinstance(info, SparseInfo):
            raise TypeError(f"field {info.name!r}: a sparse field needs a SparseInfo")
        self.ctx = ctx
        self.info = info
        data, indices, indptr = info.array_names()
        self.indptr = read_whole(ctx.reader, indptr, ctx.stats).astype(np.int64)
        self.data = _Values(ctx, data, info.nnz, info.data_chunk, info.dtype)
        found = ctx.reader.array_info(indices)
        self.indices = _Values(ctx, indices, info.nnz, info.indices_chunk, found.dtype)

    def _positions(self, idx: IntArray) -> tuple[IntArray, IntArray]:
        """Each stored value of rows ``idx``: its position in ``data`` and its row in the
        batch."""
        starts = self.indptr[idx]
        counts = self.indptr[idx + 1] - starts
        total = int(counts.sum())
        rows = np.repeat(np.arange(len(idx), dtype=np.int64), counts)
        first = np.cumsum(counts) - counts
        positions = np.arange(total, dtype=np.int64) + np.repeat(starts - first, counts)
        return positions, rows

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any] | CSRBatch:
        info = self.info
        if how.transform is not None:
            raise TypeError(f"field {info.name!r}: a field transform cannot apply to a sparse row")
        positions, rows = self._positions(idx)
        if info.batches == "csr":
            return self._csr(idx, positions, rows)
        shape = (len(idx), info.n_cols)
        if out is None:
            out = np.zeros(shape, dtype=info.dtype)
        elif out.shape != shape or out.dtype != info.dtype:
            raise ValueError(
                f"output buffer for field {info.name!r} must be {shape} {info.dtype}; "
                f"got {out.shape} {out.dtype}"
            )
        else:
            out[...] = 0
        if not len(positions):
            return out
        values = self.data.take(positions)
        columns = self.indices.take(positions).astype(np.int64, copy=False)
        self._check_columns(columns, rows, idx)
        if _canonical(columns, rows):
            out[rows, columns] = values
        else:  # a row repeats a column: its values add up, as scipy's toarray() does
            np.add.at(out, (rows, columns), values)
        return out

    def _csr(self, idx: IntArray, positions: IntArray, rows: IntArray) -> CSRBatch:
        values = self.data.take(positions) if len(positions) else np.zeros(0, self.info.dtype)
        columns = (
            self.indices.take(positions).astype(np.int64, copy=False)
            if len(positions)
            else np.zeros(0, np.int64)
        )
        self._check_columns(columns, rows, idx)
        counts = np.bincount(rows, minlength=len(idx)) if len(idx) else np.zeros(0, np.int64)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return CSRBatch(indptr, columns, values, (len(idx), self.info.n_cols))

    def _check_columns(self, columns: IntArray, rows: IntArray, idx: IntArray) -> None:
        bad = np.flatnonzero((columns < 0) | (columns >= self.info.n_cols))
        if bad.size:
            row = int(idx[rows[bad[0]]])
            raise FormatError(
                f"{self.ctx.reader.location}: sparse group {self.info.group!r}, row {row}: "
                f"column index {int(columns[bad[0]])} is outside the matrix's "
                f"{self.info.n_cols} columns (a corrupt indices array)"
            )

    def prefetch(self, idx: IntArray) -> None:
        positions, _ = self._positions(idx)
        self.data.prefetch(positions)
        self.indices.prefetch(positions)


def _canonical(columns: IntArray, rows: IntArray) -> bool:
    """Whether no row of the batch repeats a column (columns rise within each row, as in
    every canonical CSR matrix)."""
    if len(columns) < 2:
        return True
    same_row = rows[1:] == rows[:-1]
    return bool(np.all(columns[1:][same_row] > columns[:-1][same_row]))
