"""A ``dense`` field's writes: one array, each block's rows written where they belong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....backends import Compression, Writer
from ....errors import SourceError
from ....format.grid import SampleGrid
from ....format.layout import FieldInfo
from ...source import BlockSource
from .base import FieldWrites, Initial, Write

__all__ = ["DenseWrites"]


@dataclass(frozen=True)
class DenseWrites(FieldWrites):
    kind = "dense"
    field: FieldInfo
    samples_per_chunk: int

    @classmethod
    def check_source(cls, f: FieldInfo, source: BlockSource) -> None:
        if f.sample_shape is None:
            raise SourceError(f"field {f.name!r}: a dense field needs a sample_shape")
        if 0 in f.sample_shape:
            raise SourceError(
                f"field {f.name!r}: samples of shape {f.sample_shape} hold no "
                "elements; every stored sample needs at least one"
            )
        if f.dtype.kind not in "biufc":
            raise SourceError(
                f"field {f.name!r}: dtype {f.dtype} cannot be stored; chunkio "
                "stores bool, integer, float and complex arrays"
            )

    @classmethod
    def chunk_nbytes(cls, f: FieldInfo, source: BlockSource, spc: int) -> int:
        return f.sample_nbytes * spc

    @classmethod
    def joined(cls, f: FieldInfo, parts: list[Any]) -> Any:
        if not parts:
            return np.zeros((0, *(f.sample_shape or ())), f.dtype)
        return np.concatenate(parts).astype(f.dtype, copy=False)

    @classmethod
    def plan(
        cls, f: FieldInfo, source: BlockSource, grid: SampleGrid, shard_chunks: int
    ) -> DenseWrites:
        return cls(f, grid.samples_per_chunk)

    def create(
        self, writer: Writer, num_samples: int, compression: Compression, shard_chunks: int
    ) -> Initial:
        shape = self.field.sample_shape or ()
        writer.create_array(
            self.field.name,
            shape=(num_samples, *shape),
            dtype=self.field.dtype,
            chunks=(self.samples_per_chunk, *shape),
            compression=compression,
            shard_chunks=shard_chunks,
        )
        return [], []

    def checked(self, value: Any, rows: int) -> Any:
        f = self.field
        arr = np.asarray(value)
        expected = (rows, *(f.sample_shape or ()))
        if arr.shape != expected:
            raise SourceError(f"field {f.name!r}: expected shape {expected}; got {arr.shape}")
        if arr.dtype != f.dtype:
            if not np.can_cast(arr.dtype, f.dtype, "safe"):
                raise SourceError(
                    f"field {f.name!r}: expected dtype {f.dtype}; got {arr.dtype}, "
                    "which does not cast to it without loss"
                )
            arr = arr.astype(f.dtype)
        return arr

    def writes(self, start: int, chunks: tuple[int, int], value: Any) -> list[Write]:
        return [(self.field.name, start, value)]

    def aligned(self) -> tuple[str, ...]:
        return (self.field.name,)
