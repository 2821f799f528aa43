"""A ``sparse`` field's writes: each block's CSR rows as a ragged field's values with their
columns beside them (:mod:`..sparse`); offsets and shapes written whole at creation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....backends import Compression, Writer
from ....format.grid import SampleGrid
from ....format.layout import FieldInfo
from ...source import BlockSource
from ..creation import create_sparse
from ..sparse import SparsePlan, SparseRows
from ..writing import Sync
from .base import FieldWrites, Initial, Write, check_shapes_given, mean_chunk_nbytes

__all__ = ["SparseWrites"]


@dataclass(frozen=True)
class SparseWrites(FieldWrites):
    kind = "sparse"
    field: FieldInfo
    packed: SparsePlan

    @classmethod
    def check_source(cls, f: FieldInfo, source: BlockSource) -> None:
        check_shapes_given(f, source)

    @classmethod
    def chunk_nbytes(cls, f: FieldInfo, source: BlockSource, spc: int) -> int:
        return mean_chunk_nbytes(f, source, spc)  # its stored values

    @classmethod
    def joined(cls, f: FieldInfo, parts: list[Any]) -> Any:
        return SparseRows.concat([SparseRows.of(p) for p in parts], f.dtype, np.int64)

    @classmethod
    def plan(
        cls, f: FieldInfo, source: BlockSource, grid: SampleGrid, shard_chunks: int
    ) -> SparseWrites:
        shapes = source.ragged_shapes(f.name)  # type: ignore[attr-defined]
        return cls(f, SparsePlan.build(f, shapes, grid, shard_chunks))

    def placement(self) -> tuple[str, int, bytes] | None:
        return "ragged", 1, self.packed.values.offsets.tobytes()

    def create(
        self, writer: Writer, num_samples: int, compression: Compression, shard_chunks: int
    ) -> Initial:
        return create_sparse(writer, self.packed, compression)

    def checked(self, value: Any, rows: int) -> Any:
        return SparseRows.of(value)  # CSR rows; checked when packed

    def writes(self, start: int, chunks: tuple[int, int], value: Any) -> list[Write]:
        roles = self.field.roles
        at, values, columns = self.packed.pack(*chunks, value)
        return [(roles.values, at, values), (roles.indices, at, columns)]

    def syncs(self, chunks: tuple[int, int]) -> list[Sync]:
        return [(self.field.roles.flat, *self.packed.values_chunks(*chunks))]
