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

from ...errors import SourceError
from ...format.layout import FieldInfo
from ..source import BlockSource
from .kinds import FieldWrites, Write
from .writing import Sync, WriteTarget

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
    #: how each field is written, in the order of ``fields`` (:mod:`.kinds`: where its
    #: values go, planned before any block)
    kinds: tuple[FieldWrites, ...]

    def run(self, block: Block) -> dict[str, Any] | None:
        """Read and check one block; write it too when this worker may write."""
        data = _read_checked(self, block)
        if self.target.location is None:
            return data
        self.target.write(block_writes(self, block, data), block_syncs(self, block))
        return None

    def written(self, result: dict[str, Any] | None) -> bool:
        return result is None


def block_writes(job: BlockJob, block: Block, data: Mapping[str, Any]) -> list[Write]:
    """``(array, start, values)`` writes of one checked block, field by field."""
    chunks = (block.first_chunk, block.stop_chunk)
    writes: list[Write] = []
    for kind in job.kinds:
        writes += kind.writes(block.start, chunks, data[kind.field.name])
    return writes


def block_syncs(job: BlockJob, block: Block) -> list[Sync]:
    """``(arrays, first chunk, stop chunk)`` that a written block must make durable: the
    arrays chunked with the samples at once, then each field's others."""
    chunks = (block.first_chunk, block.stop_chunk)
    aligned = tuple(name for kind in job.kinds for name in kind.aligned())
    syncs: list[Sync] = [(aligned, *chunks)]
    for kind in job.kinds:
        syncs += kind.syncs(chunks)
    return syncs


def _read_checked(job: BlockJob, block: Block) -> dict[str, Any]:
    data = job.source.read_block(block.start, block.stop)
    if not isinstance(data, Mapping):
        raise SourceError(f"read_block must return a dict of arrays; got {type(data).__name__}")
    unexpected = sorted(set(data) - {f.name for f in job.fields})
    if unexpected:
        raise SourceError(f"read_block returned undeclared field(s) {unexpected}")
    out: dict[str, Any] = {}
    for kind in job.kinds:
        name = kind.field.name
        if name not in data:
            raise SourceError(f"read_block returned no array for field {name!r}")
        out[name] = kind.checked(data[name], block.stop - block.start)
    return out
