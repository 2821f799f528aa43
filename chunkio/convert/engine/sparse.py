"""Where the rows of a sparse field go: CSR rows -> the ragged placement of their values.

A sparse field (rows of a CSR matrix, ``sample_shape == (n_cols,)``) is stored as a ragged field
of each row's stored values, plus their columns in an array laid out exactly alike
(:mod:`chunkio.format.layout`): one :class:`~.ragged.RaggedPlan` of the rows' value counts
places both, so each sample chunk's values and columns start chunks of their own and parallel
writers never share a chunk. A source returns a block's rows as :class:`SparseRows` (or a scipy
CSR matrix); :meth:`SparsePlan.pack` checks them (``indptr`` rises from 0 to the number of
values, ``data`` and ``indices`` agree in length, every column is inside the matrix, each row
holds the count the source declared) and scatters them into their places in one vectorised
copy, zero padding between chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...format.grid import SampleGrid
from ...format.layout import FieldInfo, sparse_array_names
from ...util.numeric import IntArray
from .ragged import RaggedPlan

__all__ = ["CSRArray", "SparsePlan", "SparseRows", "check_rows", "index_dtype"]


@dataclass(frozen=True)
class SparseRows:
    """Consecutive rows of a CSR matrix: row ``r``'s values are
    ``data[indptr[r]:indptr[r + 1]]`` at columns ``indices[...]`` (``indptr[0] == 0``)."""

    indptr: IntArray
    indices: npt.NDArray[Any]
    data: npt.NDArray[Any]

    @classmethod
    def of(cls, rows: Any) -> SparseRows:
        """``rows`` as SparseRows: already one, a scipy CSR matrix or array, or an object with
        ``indptr``, ``indices`` and ``data`` (a :class:`chunkio.read.CSRBatch`)."""
        if isinstance(rows, SparseRows):
            return rows
        indptr = np.asarray(rows.indptr, dtype=np.int64)
        start, stop = (int(indptr[0]), int(indptr[-1])) if len(indptr) else (0, 0)
        # a slice of a scipy matrix may keep its parent's buffers: the rows' part only
        return cls(
            indptr - start, np.asarray(rows.indices)[start:stop], np.asarray(rows.data)[start:stop]
        )

    @property
    def counts(self) -> IntArray:
        """Stored values per row."""
        return np.diff(self.indptr)

    @property
    def num_rows(self) -> int:
        return max(0, len(self.indptr) - 1)

    def take(self, order: IntArray) -> SparseRows:
        """Rows ``order`` (any order, repeats allowed), in that order."""
        order = np.asarray(order, dtype=np.int64)
        counts = self.counts[order]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        where = np.arange(int(indptr[-1]), dtype=np.int64)
        where += np.repeat(self.indptr[order] - indptr[:-1], counts)
        return SparseRows(indptr, self.indices[where], self.data[where])

    @staticmethod
    def concat(parts: Sequence[SparseRows], dtype: Any, index: Any) -> SparseRows:
        """``parts`` one after the other (``dtype``, ``index``: of an empty result)."""
        if not parts:
            return SparseRows(np.zeros(1, np.int64), np.zeros(0, index), np.zeros(0, dtype))
        ends = np.cumsum([int(p.indptr[-1]) for p in parts])
        indptr = [parts[0].indptr] + [
            p.indptr[1:] + int(e) for p, e in zip(parts[1:], ends[:-1], strict=True)
        ]
        return SparseRows(
            np.concatenate(indptr).astype(np.int64),
            np.concatenate([p.indices for p in parts]),
            np.concatenate([p.data for p in parts]),
        )


def index_dtype(n_cols: int) -> np.dtype[Any]:
    """The columns' stored dtype: int32 while every column fits (as anndata writes them).

    >>> index_dtype(2_000), index_dtype(2**31 + 1)
    (dtype('int32'), dtype('int64'))
    """
    return np.dtype(np.int32 if n_cols <= np.iinfo(np.int32).max else np.int64)


def check_rows(name: str, rows: SparseRows, n_cols: int, first: int) -> None:
    """Raise a :class:`SourceError` naming field ``name`` and the row (``first``: the index of
    the rows' first) unless ``rows`` is a valid CSR block of ``n_cols`` columns."""
    indptr, indices, data = rows.indptr, rows.indices, rows.data
    where = f"field {name!r}"
    if indptr.ndim != 1 or not len(indptr) or indices.ndim != 1 or data.ndim != 1:
        raise SourceError(
            f"{where}: a CSR block needs 1-D indptr (rows + 1), indices and data; got shapes "
            f"{indptr.shape}, {indices.shape}, {data.shape}"
        )
    if len(indices) != len(data):
        raise SourceError(
            f"{where}, rows {first}..{first + rows.num_rows - 1}: data and indices must have the "
            f"same length; got {len(data)} and {len(indices)}"
        )
    if indptr[0] != 0:
        raise SourceError(f"{where}: indptr must start at 0; got {int(indptr[0])}")
    down = np.flatnonzero(np.diff(indptr) < 0)
    if down.size:
        r = int(down[0])
        raise SourceError(
            f"{where}, row {first + r}: indptr decreases ({int(indptr[r])} then "
            f"{int(indptr[r + 1])}); a CSR matrix's rows start where the previous one ends"
        )
    if indptr[-1] != len(data):
        r = int(np.searchsorted(indptr, len(data), side="right")) - 1
        raise SourceError(
            f"{where}, row {first + min(r, rows.num_rows - 1)}: indptr ends at {int(indptr[-1])}, "
            f"but the rows hold {len(data)} values"
        )
    if indices.dtype.kind not in "iu":
        raise SourceError(f"{where}: column indices must be integers; got {indices.dtype}")
    bad = np.flatnonzero((indices < 0) | (indices >= n_cols))
    if bad.size:
        r = int(np.searchsorted(indptr, bad[0], side="right")) - 1
        raise SourceError(
            f"{where}, row {first + r}: column index {int(indices[bad[0]])} is outside the "
            f"matrix's {n_cols} columns"
        )


@dataclass(frozen=True, eq=False)
class SparsePlan:
    """Placement of one sparse field's values and columns (see the module docstring)."""

    field: FieldInfo
    #: the placement of the values (its ``offsets`` place the columns too)
    values: RaggedPlan
    #: the columns' stored dtype
    index: np.dtype[Any]

    @classmethod
    def build(cls, field: FieldInfo, shapes: Any, grid: SampleGrid, group: int = 1) -> SparsePlan:
        """Place rows of ``shapes`` (N x 1: stored values per row) on ``grid``."""
        ragged = FieldInfo(field.name, field.dtype, None, "ragged")
        n_cols = int((field.sample_shape or (0,))[0])
        return cls(field, RaggedPlan.build(ragged, shapes, grid, group), index_dtype(n_cols))

    @property
    def names(self) -> tuple[str, str, str, str]:
        """Values, indices, offsets, shapes (:func:`~chunkio.format.layout.sparse_array_names`)."""
        return sparse_array_names(self.field.name)

    def values_chunks(self, first: int, stop: int) -> tuple[int, int]:
        """Chunks of the values (and of the indices) written by sample chunks ``[first, stop)``."""
        return self.values.values_chunks(first, stop)

    def pack(
        self, first: int, stop: int, rows: Any
    ) -> tuple[int, npt.NDArray[Any], npt.NDArray[Any]]:
        """The values and columns of sample chunks ``[first, stop)`` in their places: the
        start position in both arrays and the two buffers (whole chunks, zero padded)."""
        plan, name = self.values, self.field.name
        a, b = plan.grid.bounds(first)[0], plan.grid.bounds(stop - 1)[1]
        block = SparseRows.of(rows)
        if block.num_rows != b - a:
            raise SourceError(
                f"field {name!r}: expected {b - a} rows for samples {a}..{b - 1}; "
                f"got {block.num_rows}"
            )
        check_rows(name, block, int((self.field.sample_shape or (0,))[0]), a)
        counts = block.counts
        declared = plan.shapes[a:b, 0]
        if not np.array_equal(counts, declared):
            r = int(np.flatnonzero(counts != declared)[0])
            raise SourceError(
                f"field {name!r}, row {a + r}: holds {int(counts[r])} values, but the source "
                f"declared {int(declared[r])} (did the source change during the conversion?)"
            )
        data = np.asarray(block.data)
        if data.dtype != self.field.dtype and not np.can_cast(data.dtype, self.field.dtype, "safe"):
            raise SourceError(
                f"field {name!r}, rows {a}..{b - 1}: expected dtype {self.field.dtype}; got "
                f"{data.dtype}, which does not cast to it without loss"
            )
        ca, cb = plan.values_chunks(first, stop)
        begin, end = ca * plan.chunk_len, min(cb * plan.chunk_len, plan.num_values)
        where = np.arange(len(data), dtype=np.int64)
        where += np.repeat(plan.offsets[a:b] - begin - block.indptr[:-1], counts)
        values = np.zeros(end - begin, self.field.dtype)
        values[where] = data
        columns = np.zeros(end - begin, self.index)
        columns[where] = block.indices
        return begin, values, columns


class CSRArray:
    """A CSR matrix in memory (scipy's ``csr_matrix`` or ``csr_array``) as a field of
    ``write_arrays``: rows by slice or index, checked once when made (a :class:`SourceError`
    naming the field and the row otherwise)."""

    def __init__(self, name: str, matrix: Any) -> None:
        self.name = name
        self.shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        self.rows = SparseRows.of(matrix)  # data and indices up to indptr[-1] (scipy may keep more)
        if len(self.rows.indptr) != self.shape[0] + 1:
            raise SourceError(
                f"field {name!r}: indptr must hold rows + 1 = {self.shape[0] + 1} offsets for "
                f"shape {self.shape}; got {len(self.rows.indptr)}"
            )
        check_rows(name, self.rows, self.shape[1], 0)
        self.dtype = self.rows.data.dtype

    @property
    def counts(self) -> IntArray:
        """Stored values per row."""
        return self.rows.counts

    @property
    def nnz(self) -> int:
        return int(self.rows.indptr[-1])

    def __getitem__(self, rows: slice) -> SparseRows:
        a, b, _ = rows.indices(self.shape[0])
        return self.rows.take(np.arange(a, b, dtype=np.int64))

    def take(self, order: IntArray) -> SparseRows:
        return self.rows.take(order)

    def fingerprint(self) -> str:
        digest = hashlib.sha256(repr((self.shape, self.dtype.str)).encode())
        for part in (self.rows.indptr, self.rows.indices, self.rows.data):
            digest.update(np.ascontiguousarray(part).view(np.uint8).data)
        return f"csr:{digest.hexdigest()}"
