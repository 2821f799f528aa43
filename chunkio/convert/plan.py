"""The conversion plan (what determines the bytes written) and checking staged data against it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import Compression, Format, open_reader
from ..errors import ConversionError
from ..grid import SampleGrid
from ..layout import FieldInfo

__all__ = ["ConversionPlan", "verified_chunks"]

#: bump when the staging layout or the meaning of a plan changes: old stagings are discarded
PLAN_VERSION = 1


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
        }

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON form."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def verified_chunks(data: str, plan: ConversionPlan, listed: set[int]) -> frozenset[int]:
    """The chunks of ``listed`` that staged ``data`` really holds; raises if it mismatches ``plan``.

    Every listed chunk must exist in every array; HDF5 chunks must also read back without
    error, since an HDF5 file killed mid-write can hold half-updated chunks and the
    fletcher32 filter turns those into read errors. Zarr writes each chunk file atomically,
    so there a present chunk is a whole one.
    """
    reader = open_reader(data)
    try:
        n, spc = plan.num_samples, plan.samples_per_chunk
        for f in plan.fields:
            info = reader.array_info(f.name)
            expected = (n, *(f.sample_shape or ()))
            if info.shape != expected or info.dtype != f.dtype or info.chunks[0] != spc:
                raise ConversionError(f"{data}: array {f.name!r} does not match the plan")
        good: set[int] = set()
        for chunk in sorted(c for c in listed if c < plan.grid.num_chunks):
            if all(_chunk_ok(reader, f, plan, chunk) for f in plan.fields):
                good.add(chunk)
        return frozenset(good)
    finally:
        reader.close()


def _chunk_ok(reader: Any, f: FieldInfo, plan: ConversionPlan, chunk: int) -> bool:
    if not reader.chunk_exists(f.name, chunk):
        return False
    if plan.format != "hdf5":
        return True
    a, b = plan.grid.bounds(chunk)
    out = np.empty((b - a, *(f.sample_shape or ())), dtype=f.dtype)
    try:
        reader.read_into(f.name, [(a, b)], out)
    except Exception:
        return False
    return True
