"""Blocks of samples: the tasks of array and image conversions (:mod:`.core`).

A block is whole chunks of every field, so no two writers ever touch one chunk - concurrent
writes to one Zarr chunk lose data. :class:`BlockJob` runs in a pool process or dask worker
as well as in the caller: it reads and checks a block, and where its
:class:`~.writing.WriteTarget` lets it, writes and syncs it and returns nothing; otherwise the
block is returned for the calling process to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import SourceError
from ...format.layout import FieldInfo
from ..source import BlockSource
from .encoded import EncodedPlan
from .ragged import RaggedPlan
from .sparse import SparsePlan, SparseRows
from .writing import Runs, Sync, WriteTarget

__all__ = ["Block", "BlockJob", "block_syncs", "block_writes"]


@dataclass(frozen=True)
class Block:
    """Samples ``[start, stop)``: chunks ``[first_chunk, stop_chunk)``, whole but the last."""

    start: int
    stop: int
    first_chunk: int
    stop_chunk: int

    def describe(self) -> str:
        return (
            f"samples {self.start}..{self.stop - 1} "
            f"(chunks {self.first_chunk}..{self.stop_chunk - 1})"
        )


@dataclass(frozen=True)
class BlockJob:
    """What a worker needs to convert blocks: the source, the fields, where to write."""

    source: BlockSource
    fields: tuple[FieldInfo, ...]
    target: WriteTarget
    #: where the values of each ragged field go (see :mod:`chunkio.convert.engine.ragged`)
    ragged: tuple[RaggedPlan, ...] = ()
    #: where the bytes of each encoded field go (see :mod:`chunkio.convert.engine.encoded`)
    encoded: tuple[EncodedPlan, ...] = ()
    #: where the values and columns of each sparse field go (:mod:`chunkio.convert.engine.sparse`)
    sparse: tuple[SparsePlan, ...] = ()

    def sparse_plan(self, name: str) -> SparsePlan:
        return next(p for p in self.sparse if p.field.name == name)

    def ragged_plan(self, name: str) -> RaggedPlan:
        return next(p for p in self.ragged if p.field.name == name)

    def encoded_plan(self, name: str) -> EncodedPlan:
        return next(p for p in self.encoded if p.field.name == name)

    def run(self, block: Block) -> dict[str, Any] | None:
        """Read and check one block; write it too when this worker may write."""
        data = _read_checked(self.source, self.fields, block)
        if self.target.location is None:
            return data
        self.target.write(block_writes(self, block, data), block_syncs(self, block))
        return None

    def written(self, result: dict[str, Any] | None) -> bool:
        return result is None


def block_writes(
    job: BlockJob, block: Block, data: Mapping[str, Any]
) -> list[tuple[str, int, Any]]:
    """``(array, start, values)`` writes of one checked block; ragged and encoded fields are
    packed (a sharded field's encoded bytes as :class:`~.writing.Runs`)."""
    writes: list[tuple[str, int, Any]] = []
    for f in job.fields:
        if f.kind == "encoded":
            coded = job.encoded_plan(f.name)
            placed, spans = coded.pack(block.first_chunk, block.stop_chunk, data[f.name])
            if coded.group > 1:  # the block's shards of the bytes, written whole
                writes.append((coded.names[0], placed[0][0], Runs(tuple(placed))))
            else:
                writes.extend((coded.names[0], start, buf) for start, buf in placed)
            writes.append((coded.names[1], block.start, spans))
        elif f.kind == "sparse":
            sparse = job.sparse_plan(f.name)
            start, values, columns = sparse.pack(block.first_chunk, block.stop_chunk, data[f.name])
            writes += [(sparse.names[0], start, values), (sparse.names[1], start, columns)]
        elif f.kind == "ragged":
            plan = job.ragged_plan(f.name)
            start, flat = plan.pack(block.first_chunk, block.stop_chunk, data[f.name])
            writes.append((plan.names[0], start, flat))
        else:
            writes.append((f.name, block.start, data[f.name]))
    return writes


def block_syncs(job: BlockJob, block: Block) -> list[Sync]:
    """``(arrays, first chunk, stop chunk)`` that a written block must make durable."""
    dense = tuple(f.name for f in job.fields if f.kind == "dense")
    spans = tuple(p.names[1] for p in job.encoded)
    syncs = [((*dense, *spans), block.first_chunk, block.stop_chunk)]
    for plan in job.ragged:
        a, b = plan.values_chunks(block.first_chunk, block.stop_chunk)
        syncs.append(((plan.names[0],), a, b))
    for sparse in job.sparse:
        a, b = sparse.values_chunks(block.first_chunk, block.stop_chunk)
        syncs.append((sparse.names[:2], a, b))
    for encoded in job.encoded:  # the regions' chunks that were written (the others are not)
        a, b = encoded.bytes_chunks(block.first_chunk, block.stop_chunk)
        syncs.append(((encoded.names[0],), a, b))
    return syncs


def _read_checked(
    source: BlockSource, fields: tuple[FieldInfo, ...], block: Block
) -> dict[str, Any]:
    data = source.read_block(block.start, block.stop)
    if not isinstance(data, Mapping):
        raise SourceError(f"read_block must return a dict of arrays; got {type(data).__name__}")
    unexpected = sorted(set(data) - {f.name for f in fields})
    if unexpected:
        raise SourceError(f"read_block returned undeclared field(s) {unexpected}")
    out: dict[str, Any] = {}
    for f in fields:
        if f.name not in data:
            raise SourceError(f"read_block returned no array for field {f.name!r}")
        if f.kind == "sparse":  # CSR rows; checked when packed
            out[f.name] = SparseRows.of(data[f.name])
            continue
        if f.kind != "dense":  # a list of arrays or bytes; checked sample by sample when packed
            out[f.name] = list(data[f.name])
            continue
        arr = np.asarray(data[f.name])
        expected = (block.stop - block.start, *(f.sample_shape or ()))
        if arr.shape != expected:
            raise SourceError(f"field {f.name!r}: expected shape {expected}; got {arr.shape}")
        if arr.dtype != f.dtype:
            if not np.can_cast(arr.dtype, f.dtype, "safe"):
                raise SourceError(
                    f"field {f.name!r}: expected dtype {f.dtype}; got {arr.dtype}, "
                    "which does not cast to it without loss"
                )
            arr = arr.astype(f.dtype)
        out[f.name] = arr
    return out
