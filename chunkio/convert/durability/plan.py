"""The conversion plan (what determines the bytes written) and checking staged data against it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...backends import Compression, Format, open_reader, storage_for
from ...errors import ConversionError
from ...format.grid import SampleGrid, values_chunk_span
from ...format.kinds import kind_of
from ...format.layout import FieldInfo
from ...util.numeric import ceil_div

__all__ = ["ConversionPlan", "verified_chunks"]

#: bump when the staging layout or the meaning of a plan changes: old stagings are discarded
PLAN_VERSION = 4


@dataclass(frozen=True)
class ConversionPlan:
    """What is converted and how; an interrupted run resumes only under an equal plan.

    Class names and ``extra`` are not part of it: they go into the attributes written at the
    end, so changing them does not invalidate finished chunks.
    """

    format: Format
    fields: tuple[FieldInfo, ...]
    num_samples: int
    samples_per_chunk: int
    compression: Compression
    source_fingerprint: str
    #: sample chunks per shard of the large dense fields (1: unsharded; Zarr only)
    shard_chunks: int = 1

    @property
    def grid(self) -> SampleGrid:
        return SampleGrid(self.num_samples, self.samples_per_chunk)

    def to_json(self) -> dict[str, Any]:
        c = self.compression
        return {
            "plan_version": PLAN_VERSION,
            "format": self.format,
            "fields": {f.name: f.to_json() for f in self.fields},
            "num_samples": self.num_samples,
            "samples_per_chunk": self.samples_per_chunk,
            "compression": {"codec": c.codec, "level": c.level, "checksum": c.checksum},
            "source": self.source_fingerprint,
            "shard_chunks": self.shard_chunks,
        }

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON form."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def verified_chunks(data: str, plan: ConversionPlan, listed: set[int]) -> frozenset[int]:
    """The chunks of ``listed`` that staged ``data`` really holds; raises if it mismatches ``plan``.

    Every listed chunk must exist in every array. Where a killed writer can leave
    half-updated chunks (HDF5: not :attr:`~chunkio.backends.Storage.atomic_chunks`) each must
    also read back without error - the checksum filter turns corruption into read errors;
    Zarr writes each chunk file atomically, so there a present chunk is a whole one.
    """
    reader = open_reader(data)
    try:
        n, spc = plan.num_samples, plan.samples_per_chunk
        for f in plan.fields:
            if kind_of(f.kind).flat:
                continue  # checked chunk by chunk below, through its offsets or spans
            info = reader.array_info(f.name)
            expected = (n, *(f.sample_shape or ()))
            if info.shape != expected or info.dtype != f.dtype or info.chunks[0] != spc:
                raise ConversionError(f"{data}: array {f.name!r} does not match the plan")
        spans = {
            f.name: _ragged_span(reader, f, plan) for f in plan.fields if f.roles.has("offsets")
        }
        good: set[int] = set()
        for chunk in sorted(c for c in listed if c < plan.grid.num_chunks):
            if all(_chunk_ok(reader, f, plan, chunk, spans.get(f.name)) for f in plan.fields):
                good.add(chunk)
        return frozenset(good)
    finally:
        reader.close()


def _ragged_span(reader: Any, f: FieldInfo, plan: ConversionPlan) -> Callable[[int], range]:
    """Values chunks of each sample chunk, from the staged offsets (written before any block)."""
    values, offsets_name = f.roles.values, f.roles.offsets
    info = reader.array_info(offsets_name)
    if info.shape != (plan.num_samples + 1,):
        raise ConversionError(f"{reader.location}: array {offsets_name!r} does not match the plan")
    offsets = np.empty(info.shape, info.dtype)
    reader.read_into(offsets_name, [(0, info.shape[0])], offsets)
    chunk_len = int(reader.array_info(values).chunks[0])
    return lambda c: range(*values_chunk_span(offsets, plan.grid, chunk_len, c, c + 1))


def _chunk_ok(
    reader: Any,
    f: FieldInfo,
    plan: ConversionPlan,
    chunk: int,
    span: Callable[[int], range] | None,
) -> bool:
    if f.roles.has("spans"):
        return _encoded_ok(reader, f, plan, chunk)
    if span is not None:  # the values (and a sparse field's columns, chunked alike)
        flat = f.roles.flat
        return all(_stored_ok(reader, n, c, plan.format) for n in flat for c in span(chunk))
    return _stored_ok(reader, f.name, chunk, plan.format)


def _encoded_ok(reader: Any, f: FieldInfo, plan: ConversionPlan, chunk: int) -> bool:
    """An encoded field's chunk: its spans, and the bytes chunks they point into."""
    data, spans_name = f.roles.bytes, f.roles.spans
    if not _stored_ok(reader, spans_name, chunk, plan.format):
        return False
    a, b = plan.grid.bounds(chunk)
    spans = np.empty((b - a, 2), np.int64)
    reader.read_into(spans_name, [(a, b)], spans)
    step = int(reader.array_info(data).chunks[0])
    first, stop = int(spans[:, 0].min()) // step, ceil_div(int(spans[:, 1].max()), step)
    return all(_stored_ok(reader, data, c, plan.format) for c in range(first, stop))


def _stored_ok(reader: Any, name: str, chunk: int, fmt: Format) -> bool:
    if not reader.chunk_exists(name, chunk):
        return False
    if storage_for(fmt).atomic_chunks:
        return True
    info = reader.array_info(name)
    step = int(info.chunks[0])
    a, b = chunk * step, min((chunk + 1) * step, int(info.shape[0]))
    out = np.empty((b - a, *info.shape[1:]), dtype=info.dtype)
    try:
        reader.read_into(name, [(a, b)], out)
    except Exception:
        return False
    return True
