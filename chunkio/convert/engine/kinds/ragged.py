"""A ``ragged`` field's writes: values packed chunk-aligned (:mod:`..ragged`), offsets and
shapes written whole at creation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....backends import Compression, Writer
from ....format.grid import SampleGrid
from ....format.layout import FieldInfo
from ...source import BlockSource
from ..creation import create_ragged
from ..ragged import RaggedPlan
from ..writing import Sync
from .base import FieldWrites, Initial, Write, check_shapes_given, mean_chunk_nbytes

__all__ = ["RaggedWrites"]


@dataclass(frozen=True)
class RaggedWrites(FieldWrites):
    kind = "ragged"
    field: FieldInfo
    packed: RaggedPlan

    @classmethod
    def check_source(cls, f: FieldInfo, source: BlockSource) -> None:
        check_shapes_given(f, source)

    @classmethod
    def chunk_nbytes(cls, f: FieldInfo, source: BlockSource, spc: int) -> int:
        return mean_chunk_nbytes(f, source, spc)

    @classmethod
    def plan(
        cls, f: FieldInfo, source: BlockSource, grid: SampleGrid, shard_chunks: int
    ) -> RaggedWrites:
        shapes = source.ragged_shapes(f.name)  # type: ignore[attr-defined]
        return cls(f, RaggedPlan.build(f, shapes, grid, shard_chunks))

    def placement(self) -> tuple[str, int, bytes] | None:
        return "ragged", 0, self.packed.offsets.tobytes()

    def create(
        self, writer: Writer, num_samples: int, compression: Compression, shard_chunks: int
    ) -> Initial:
        return create_ragged(writer, self.packed, compression)

    def checked(self, value: Any, rows: int) -> Any:
        return list(value)  # checked sample by sample when packed

    def writes(self, start: int, chunks: tuple[int, int], value: Any) -> list[Write]:
        at, flat = self.packed.pack(*chunks, value)
        return [(self.field.roles.values, at, flat)]

    def syncs(self, chunks: tuple[int, int]) -> list[Sync]:
        return [((self.field.roles.values,), *self.packed.values_chunks(*chunks))]
