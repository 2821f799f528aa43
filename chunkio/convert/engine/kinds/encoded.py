"""An ``encoded`` field's writes: each block's images in their chunks' byte regions
(:mod:`..encoded`; a sharded field's whole shards as :class:`~..writing.Runs`), spans
with the block, shapes whole at creation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....backends import Compression, Writer
from ....format.grid import SampleGrid
from ....format.layout import FieldInfo
from ...source import BlockSource
from ..creation import create_encoded
from ..encoded import EncodedPlan
from ..writing import Runs, Sync
from .base import FieldWrites, Initial, Write, check_shapes_given, mean_chunk_nbytes

__all__ = ["EncodedWrites"]


@dataclass(frozen=True)
class EncodedWrites(FieldWrites):
    kind = "encoded"
    field: FieldInfo
    packed: EncodedPlan

    @classmethod
    def check_source(cls, f: FieldInfo, source: BlockSource) -> None:
        check_shapes_given(f, source)

    @classmethod
    def chunk_nbytes(cls, f: FieldInfo, source: BlockSource, spc: int) -> int:
        return mean_chunk_nbytes(f, source, spc)  # decoded: the pixels

    @classmethod
    def plan(
        cls, f: FieldInfo, source: BlockSource, grid: SampleGrid, shard_chunks: int
    ) -> EncodedWrites:
        shapes = source.ragged_shapes(f.name)  # type: ignore[attr-defined]
        return cls(f, EncodedPlan.build(f, shapes, grid, shard_chunks))

    def placement(self) -> tuple[str, int, bytes] | None:
        return "encoded", 0, self.packed.region.tobytes() + self.packed.shapes.tobytes()

    def create(
        self, writer: Writer, num_samples: int, compression: Compression, shard_chunks: int
    ) -> Initial:
        return create_encoded(writer, self.packed, compression, shard_chunks)

    def checked(self, value: Any, rows: int) -> Any:
        return list(value)  # bytes or images; checked sample by sample when packed

    def writes(self, start: int, chunks: tuple[int, int], value: Any) -> list[Write]:
        coded = self.packed
        data, spans_name = self.field.roles.bytes, self.field.roles.spans
        placed, spans = coded.pack(*chunks, value)
        out: list[Write]
        if coded.group > 1:  # the block's shards of the bytes, written whole
            out = [(data, placed[0][0], Runs(tuple(placed)))]
        else:
            out = [(data, at, buf) for at, buf in placed]
        return [*out, (spans_name, start, spans)]

    def aligned(self) -> tuple[str, ...]:
        return (self.field.roles.spans,)

    def syncs(self, chunks: tuple[int, int]) -> list[Sync]:
        # the regions' chunks that were written (the others are not)
        return [((self.field.roles.bytes,), *self.packed.bytes_chunks(*chunks))]
