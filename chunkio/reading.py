"""The per-process read path: plan -> read (backend) -> gather.

A :class:`ProcessReader` belongs to exactly one process. It owns the backend handle, one
:class:`~chunkio.pool.ChunkPool` of decoded chunks per dense field and the preloaded small
fields; :class:`chunkio.ChunkDataset` makes one lazily in each process and never pickles it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .backends import Reader, open_reader
from .grid import SampleGrid
from .layout import DatasetLayout, FieldInfo
from .planning import IntArray, normalize_indices, plan_batch
from .pool import ChunkPool

__all__ = ["ProcessReader", "ReadStats"]


@dataclass
class ReadStats:
    """What this process has read: chunks decoded, chunks served from cache, samples served."""

    chunks_read: int = 0
    cache_hits: int = 0
    rows_decoded: int = 0
    samples: int = 0
    batches: int = 0
    per_field: dict[str, int] = field(default_factory=dict)


class ProcessReader:
    """Serves batches of one dataset in the current process."""

    def __init__(
        self,
        location: Any,
        layout: DatasetLayout,
        *,
        pool_chunks: int,
        preload_bytes: int,
        storage_options: Mapping[str, Any] | None,
        trust_codecs: bool,
    ) -> None:
        self.pid = os.getpid()
        self.layout = layout
        self.grid = SampleGrid(layout.num_samples, layout.samples_per_chunk)
        self.reader: Reader = open_reader(
            location, storage_options=storage_options, trust_codecs=trust_codecs
        )
        self.pool_chunks = pool_chunks
        self.preload_bytes = preload_bytes
        self.stats = ReadStats()
        self._pools: dict[str, ChunkPool] = {}
        self._preloaded: dict[str, npt.NDArray[Any]] = {}
        self._ragged: dict[str, tuple[IntArray, IntArray]] = {}

    def close(self) -> None:
        self.reader.close()

    def read(
        self,
        fields: Sequence[str],
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> dict[str, Any]:
        """Read ``indices`` of each field; dense fields as one array, ragged as a list."""
        try:
            idx = normalize_indices(indices, self.layout.num_samples)
        except IndexError as err:  # name the dataset, as every other read error does
            raise IndexError(f"{self.reader.location}: {err}") from err
        result: dict[str, Any] = {}
        for name in fields:
            info = self.layout.field(name, where=self.reader.location)
            target = None if out is None else out.get(name)
            if info.kind == "ragged":
                result[name] = self._read_ragged(info, idx)
            else:
                result[name] = self._read_dense(info, idx, target)
        self.stats.samples += len(idx)
        self.stats.batches += 1
        return result

    def _read_dense(
        self, info: FieldInfo, idx: IntArray, out: npt.NDArray[Any] | None
    ) -> npt.NDArray[Any]:
        shape = (len(idx), *(info.sample_shape or ()))
        if out is None:
            out = np.empty(shape, dtype=info.dtype)
        elif out.shape != shape or out.dtype != info.dtype:
            raise ValueError(
                f"output buffer for field {info.name!r} must be {shape} {info.dtype}; "
                f"got {out.shape} {out.dtype}"
            )
        whole = self._preload(info)
        if whole is not None:
            # mode="clip": idx is already validated, and the default mode="raise" makes
            # numpy gather into a temporary and copy it over (about 3x slower)
            np.take(whole, idx, axis=0, out=out, mode="clip")
            return out
        # plan (pure) -> read the chunks the pool lacks, straight into their slots -> gather
        plan = plan_batch(idx, self.grid)
        pool = self._pool(info)
        slots, runs = pool.admit(plan.chunks)
        spc = self.grid.samples_per_chunk
        try:
            for chunks, first_slot in runs:
                ranges = [self.grid.bounds(c) for c in chunks]
                rows = sum(b - a for a, b in ranges)
                self.reader.read_into(info.name, ranges, pool.rows(first_slot, rows))
                self.stats.rows_decoded += rows
        except BaseException:
            pool.forget([c for chunks, _ in runs for c in chunks])  # never serve a bad slot
            raise
        read = sum(len(chunks) for chunks, _ in runs)
        self.stats.chunks_read += read
        self.stats.cache_hits += len(plan.chunks) - read
        self.stats.per_field[info.name] = self.stats.per_field.get(info.name, 0) + read
        where = slots[plan.chunk_pos] * spc + plan.offsets
        np.take(pool.buffer, where, axis=0, out=out, mode="clip")  # always in range
        return out

    def _pool(self, info: FieldInfo) -> ChunkPool:
        pool = self._pools.get(info.name)
        if pool is None:
            pool = ChunkPool(
                rows_per_chunk=self.grid.samples_per_chunk,
                sample_shape=tuple(info.sample_shape or ()),
                dtype=info.dtype,
                capacity=self.pool_chunks,
            )
            self._pools[info.name] = pool
        return pool

    def _preload(self, info: FieldInfo) -> npt.NDArray[Any] | None:
        """Fields small enough (labels, metadata) are read whole once per process."""
        if info.name in self._preloaded:
            return self._preloaded[info.name]
        if info.sample_nbytes * self.layout.num_samples > self.preload_bytes:
            return None
        whole = np.empty((self.layout.num_samples, *(info.sample_shape or ())), info.dtype)
        ranges = [self.grid.bounds(c) for c in range(self.grid.num_chunks)]
        if ranges:
            self.reader.read_into(info.name, ranges, whole)
        self.stats.chunks_read += len(ranges)
        self._preloaded[info.name] = whole
        return whole

    def _read_ragged(self, info: FieldInfo, idx: IntArray) -> list[npt.NDArray[Any]]:
        values_name, offsets_name, shapes_name = info.array_names()
        if info.name not in self._ragged:
            self._ragged[info.name] = (
                self._read_whole(offsets_name).astype(np.int64),
                self._read_whole(shapes_name).astype(np.int64),
            )
        offsets, shapes = self._ragged[info.name]
        values_info = self.reader.array_info(values_name)
        step = int(values_info.chunks[0])
        grid = SampleGrid(int(values_info.shape[0]), step)
        # A sample is prod(shape) values from its offset; offsets[i + 1] may lie further on
        # (writers pad each chunk's values to a values-chunk boundary, see convert.ragged).
        starts = offsets[idx]
        stops = starts + np.prod(shapes[idx], axis=1, dtype=np.int64)
        needed = sorted(
            {
                c
                for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
                for c in range(a // step, -(-b // step))
            }
        )
        ranges = [grid.bounds(c) for c in needed]
        total = sum(b - a for a, b in ranges)
        staging = np.empty(total, dtype=info.dtype)
        if ranges:
            self.reader.read_into(values_name, ranges, staging)
        self.stats.chunks_read += len(ranges)
        chunk_pos = {c: i for i, c in enumerate(needed)}
        row_of_chunk = np.concatenate([[0], np.cumsum([b - a for a, b in ranges])])
        out = []
        for a, b, shape in zip(starts.tolist(), stops.tolist(), shapes[idx], strict=True):
            c = a // step
            begin = int(row_of_chunk[chunk_pos[c]]) + a - c * step if b > a else 0
            out.append(staging[begin : begin + b - a].reshape(tuple(shape)).copy())
        return out

    def _read_whole(self, name: str) -> npt.NDArray[Any]:
        info = self.reader.array_info(name)
        grid = SampleGrid(int(info.shape[0]), int(info.chunks[0]))
        out = np.empty(info.shape, dtype=info.dtype)
        if grid.num_chunks:
            self.reader.read_into(name, [grid.bounds(c) for c in range(grid.num_chunks)], out)
        return out
