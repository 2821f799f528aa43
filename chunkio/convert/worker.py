"""The worker side of a conversion: read, check and (where allowed) write one block.

Everything here runs in a pool process or dask worker as well as in the caller, so it only
receives picklable values (:class:`Block`, :class:`WorkerSpec`, the source) and opens its own
writer. A Zarr worker writes and fsyncs its block itself and returns nothing; otherwise the
block is returned for the calling process to write.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..backends import Format, Writer, open_writer
from ..errors import SourceError
from ..layout import FieldInfo
from ._fsync import sync_chunks
from .ragged import RaggedPlan

if TYPE_CHECKING:
    from .pipeline import BlockSource

__all__ = [
    "Block",
    "WorkerSpec",
    "block_syncs",
    "block_writes",
    "do_block",
    "flush",
    "init_worker",
    "pool_task",
]


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
class WorkerSpec:
    """What a worker needs besides the source: picklable, no handles."""

    fields: tuple[FieldInfo, ...]
    format: Format
    #: where the worker writes its blocks itself; None: it returns them to the caller
    location: str | None
    #: whether written chunks must be fsync'd (staged local data)
    durable: bool
    run_id: str
    #: where the values of each ragged field go (see :mod:`chunkio.convert.ragged`)
    ragged: tuple[RaggedPlan, ...] = ()

    def ragged_plan(self, name: str) -> RaggedPlan:
        return next(p for p in self.ragged if p.field.name == name)


def flush(writer: Writer) -> None:
    """Push a writer's caches to the OS, where it has any (HDF5 keeps chunks until flushed)."""
    method = getattr(writer, "flush", None)
    if callable(method):
        method()


_worker_state: dict[str, Any] = {}
_writer_lock = threading.Lock()


def init_worker(source: BlockSource, spec: WorkerSpec) -> None:
    """Process-pool initializer: the source travels once per worker, not once per block."""
    _worker_state["source"], _worker_state["spec"] = source, spec


def pool_task(block: Block) -> dict[str, Any] | None:
    """Process-pool task: :func:`do_block` with the state :func:`init_worker` received."""
    return do_block(_worker_state["source"], _worker_state["spec"], block)


def _worker_writer(spec: WorkerSpec) -> Writer:
    key = (spec.location, spec.run_id)
    with _writer_lock:  # dask workers may run several tasks in threads
        if _worker_state.get("writer_key") != key:
            _worker_state["writer"] = open_writer(spec.location, format=spec.format)
            _worker_state["writer_key"] = key
        writer: Writer = _worker_state["writer"]
    return writer


def do_block(source: BlockSource, spec: WorkerSpec, block: Block) -> dict[str, Any] | None:
    """Read (and check) one block; write it too when this worker may write."""
    data = _read_checked(source, spec.fields, block)
    if spec.location is None:
        return data
    writer = _worker_writer(spec)
    for name, start, arr in block_writes(spec, block, data):
        writer.write_block(name, start, arr)
    if spec.durable:
        for names, first, stop in block_syncs(spec, block):
            sync_chunks(spec.location, spec.format, names, first, stop)
    return None


def block_writes(
    spec: WorkerSpec, block: Block, data: Mapping[str, Any]
) -> list[tuple[str, int, npt.NDArray[Any]]]:
    """``(array, start, values)`` writes of one checked block; ragged fields are packed."""
    writes = []
    for f in spec.fields:
        if f.kind == "ragged":
            plan = spec.ragged_plan(f.name)
            start, flat = plan.pack(block.first_chunk, block.stop_chunk, data[f.name])
            writes.append((plan.names[0], start, flat))
        else:
            writes.append((f.name, block.start, data[f.name]))
    return writes


def block_syncs(spec: WorkerSpec, block: Block) -> list[tuple[tuple[str, ...], int, int]]:
    """``(arrays, first chunk, stop chunk)`` that a written block must make durable."""
    dense = tuple(f.name for f in spec.fields if f.kind == "dense")
    syncs = [(dense, block.first_chunk, block.stop_chunk)]
    for plan in spec.ragged:
        a, b = plan.values_chunks(block.first_chunk, block.stop_chunk)
        syncs.append(((plan.names[0],), a, b))
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
        if f.kind == "ragged":  # a list of arrays; checked sample by sample when packed
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
