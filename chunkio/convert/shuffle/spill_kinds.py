"""How each field kind's rows go through a spill file (:mod:`.spill`): one class per kind
that spills, :data:`SPILL_KINDS` the registry (a kind not there cannot be shuffled in two
passes).

A dense field's part of a spill file is its rows, sorted by destination row. A sparse field's
(CSR rows, :mod:`chunkio.convert.engine.sparse`) is ``int64 x (buckets + 1)`` where each
bucket's values start, ``int64 x rows`` values per row, then the rows' values and their
columns, each flat, sorted by destination row.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ...errors import ConversionError
from ...format.layout import FieldInfo
from ...util.numeric import IntArray
from ..engine.sparse import SparseRows, index_dtype

__all__ = ["SPILL_KINDS", "DenseSpill", "SparseSpill", "SpillKind", "pread_all", "spill_kind"]


def pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            raise OSError(f"spill file ended early at byte {offset}")
        parts.append(part)
        size, offset = size - len(part), offset + len(part)
    return b"".join(parts) if len(parts) != 1 else parts[0]


class SpillKind:
    """How the rows of a field of one kind are spilled and gathered back."""

    #: whether the field's rows carry a varying number of values (counted per source block)
    has_values: ClassVar[bool] = False

    @staticmethod
    def row_bytes(f: FieldInfo) -> int:
        """Bytes per row the field takes in a spill file, besides its values."""
        raise NotImplementedError

    @staticmethod
    def values(f: FieldInfo, source: Any, bounds: Sequence[int]) -> tuple[tuple[int, ...], int]:
        """The field's stored values in each source block, and bytes per value."""
        return (), 0

    @staticmethod
    def write(fh: Any, f: FieldInfo, value: Any, order: IntArray, offsets: IntArray) -> None:
        """The field's part of a spill file: ``value`` (a source block) in ``order``."""
        raise NotImplementedError

    @staticmethod
    def part_bytes(count: int, nnz: int, value_bytes: int, buckets: int, row: int) -> int:
        """Bytes of the field's part of a file of ``count`` rows holding ``nnz`` values."""
        raise NotImplementedError

    @staticmethod
    def piece(
        fd: int, f: FieldInfo, base: int, sizes: tuple[int, ...], where: tuple[int, ...]
    ) -> Any:
        """Rows ``lo..hi`` (bucket ``bucket``) of the field's part starting at ``base``
        (``sizes``: the file's rows and values, the buckets, bytes per row)."""
        raise NotImplementedError

    @staticmethod
    def gather(f: FieldInfo, rows: int) -> Gather:
        raise NotImplementedError


class Gather:
    """A destination block of one field, put together from the pieces of spill files."""

    def put(self, at: IntArray, keep: Any, piece: Any) -> None:
        raise NotImplementedError

    def result(self) -> Any:
        raise NotImplementedError


class _DenseGather(Gather):
    def __init__(self, f: FieldInfo, rows: int) -> None:
        self.out = np.empty((rows, *(f.sample_shape or ())), f.dtype)

    def put(self, at: IntArray, keep: Any, piece: Any) -> None:
        self.out[at] = piece[keep]

    def result(self) -> Any:
        return self.out


class DenseSpill(SpillKind):
    @staticmethod
    def row_bytes(f: FieldInfo) -> int:
        return f.sample_nbytes

    @staticmethod
    def write(fh: Any, f: FieldInfo, value: Any, order: IntArray, offsets: IntArray) -> None:
        rows = np.take(np.asarray(value, dtype=f.dtype), order, axis=0)
        fh.write(rows.data)  # C-contiguous: written as it is, no copy

    @staticmethod
    def part_bytes(count: int, nnz: int, value_bytes: int, buckets: int, row: int) -> int:
        return count * row

    @staticmethod
    def piece(
        fd: int, f: FieldInfo, base: int, sizes: tuple[int, ...], where: tuple[int, ...]
    ) -> Any:
        (lo, hi, _), size = where, sizes[3]
        raw = pread_all(fd, (hi - lo) * size, base + lo * size)
        return np.frombuffer(raw, dtype=f.dtype).reshape((hi - lo, *(f.sample_shape or ())))

    @staticmethod
    def gather(f: FieldInfo, rows: int) -> Gather:
        return _DenseGather(f, rows)


def _index(f: FieldInfo) -> np.dtype[Any]:
    return index_dtype(int((f.sample_shape or (0,))[0]))


class _SparseGather(Gather):
    def __init__(self, f: FieldInfo) -> None:
        self.f = f
        self.parts: list[tuple[IntArray, SparseRows]] = []

    def put(self, at: IntArray, keep: Any, piece: Any) -> None:
        self.parts.append((at, piece.take(np.flatnonzero(keep))))

    def result(self) -> Any:
        placed, f = self.parts, self.f
        at = np.concatenate([p for p, _ in placed]) if placed else np.zeros(0, np.int64)
        whole = SparseRows.concat([r for _, r in placed], f.dtype, _index(f))
        return whole.take(np.argsort(at, kind="stable"))


class SparseSpill(SpillKind):
    has_values = True

    @staticmethod
    def row_bytes(f: FieldInfo) -> int:
        return 8  # its count of values

    @staticmethod
    def values(f: FieldInfo, source: Any, bounds: Sequence[int]) -> tuple[tuple[int, ...], int]:
        counts = np.asarray(source.ragged_shapes(f.name), np.int64).reshape(-1)
        ends = np.concatenate([[0], np.cumsum(counts)])[np.asarray(bounds)]
        return tuple(int(v) for v in np.diff(ends)), f.dtype.itemsize + _index(f).itemsize

    @staticmethod
    def write(fh: Any, f: FieldInfo, value: Any, order: IntArray, offsets: IntArray) -> None:
        rows = SparseRows.of(value).take(order)
        fh.write(rows.indptr[offsets].astype(np.int64).tobytes())  # each bucket's first value
        fh.write(rows.counts.astype(np.int64).tobytes())
        fh.write(np.ascontiguousarray(rows.data, dtype=f.dtype).data)
        fh.write(np.ascontiguousarray(rows.indices, dtype=_index(f)).data)

    @staticmethod
    def part_bytes(count: int, nnz: int, value_bytes: int, buckets: int, row: int) -> int:
        return 8 * (buckets + 1) + count * 8 + nnz * value_bytes

    @staticmethod
    def piece(
        fd: int, f: FieldInfo, base: int, sizes: tuple[int, ...], where: tuple[int, ...]
    ) -> Any:
        (count, nnz, buckets, _), (lo, hi, bucket) = sizes, where
        first = base + 8 * (buckets + 1)
        raw = pread_all(fd, 16, base + 8 * bucket)
        vlo, vhi = np.frombuffer(raw, dtype=np.int64).tolist()
        counts = np.frombuffer(pread_all(fd, (hi - lo) * 8, first + 8 * lo), dtype=np.int64)
        itemsize, index = f.dtype.itemsize, _index(f)
        at = first + 8 * count
        data = np.frombuffer(pread_all(fd, (vhi - vlo) * itemsize, at + vlo * itemsize), f.dtype)
        at += nnz * itemsize
        size = index.itemsize
        columns = np.frombuffer(pread_all(fd, (vhi - vlo) * size, at + vlo * size), index)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return SparseRows(indptr, columns, data)

    @staticmethod
    def gather(f: FieldInfo, rows: int) -> Gather:
        return _SparseGather(f)


#: field kind -> how its rows are spilled (kinds not here are not shuffled in two passes)
SPILL_KINDS: dict[str, type[SpillKind]] = {"dense": DenseSpill, "sparse": SparseSpill}


def spill_kind(f: FieldInfo) -> type[SpillKind]:
    try:
        return SPILL_KINDS[f.kind]
    except KeyError:
        raise ConversionError(
            f"field {f.name!r} is {f.kind}: a two-pass shuffle spills fields of the kinds "
            f"{list(SPILL_KINDS)}"
        ) from None
