"""The per-process read path: plan -> read (backend) -> scatter.

A :class:`ProcessReader` belongs to exactly one process. It owns the backend handle, the chunk
cache, the staging buffers and the preloaded small fields; :class:`chunkio.ChunkDataset` makes
one lazily in each process and never pickles it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .backends import Reader, open_reader
from .cache import ChunkCache
from .grid import SampleGrid
from .layout import DatasetLayout, FieldInfo
from .planning import BatchPlan, IntArray, normalize_indices, plan_batch

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
        cache_bytes: int,
        cache_mode: str,
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
        self.cache = ChunkCache(cache_bytes) if cache_bytes > 0 else None
        self.cache_partial_only = cache_mode == "partial"
        self.preload_bytes = preload_bytes
        self.stats = ReadStats()
        self._staging: dict[str, npt.NDArray[Any]] = {}
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
        cached = self.cache.keys_for(info.name) if self.cache is not None else ()
        plan = plan_batch(idx, self.grid, cached=cached)
        staging = self._staging_buffer(info, plan.staging_rows)
        rows_read = sum(b - a for a, b in plan.read_ranges)
        if plan.read_ranges:
            self.reader.read_into(info.name, plan.read_ranges, staging[:rows_read])
        self._use_cache(info.name, plan, staging, rows_read)
        self.stats.chunks_read += len(plan.read_chunks)
        self.stats.cache_hits += len(plan.cached_chunks)
        self.stats.rows_decoded += rows_read
        self.stats.per_field[info.name] = self.stats.per_field.get(info.name, 0) + len(
            plan.read_chunks
        )
        # gather positions come from the plan, always in range; see _read_dense's preload note
        np.take(staging[: plan.staging_rows], plan.gather, axis=0, out=out, mode="clip")
        return out

    def _use_cache(
        self, name: str, plan: BatchPlan, staging: npt.NDArray[Any], rows_read: int
    ) -> None:
        if self.cache is None:
            return
        row = rows_read
        for chunk in plan.cached_chunks.tolist():
            hit = self.cache.get((name, chunk))
            if hit is None:  # evicted between planning and now cannot happen; be explicit
                raise RuntimeError(f"chunk cache lost chunk {chunk} of {name!r} mid-batch")
            staging[row : row + len(hit)] = hit
            row += len(hit)
        # Insert in order of first appearance in the batch: with chunk-aware sampling the chunks
        # a batch touches last are the ones its successor (same worker) continues with, so
        # they must be the most recently used.
        starts = np.concatenate([[0], np.cumsum([b - a for a, b in plan.read_ranges])])
        slot = {c: i for i, c in enumerate(plan.read_chunks.tolist())}
        if self.cache_partial_only:  # chunks this batch consumed whole are not needed again
            used = np.bincount(np.unique(plan.indices) // self.grid.samples_per_chunk)
            for chunk in plan.read_chunks.tolist():
                a, b = self.grid.bounds(chunk)
                if used[chunk] == b - a:
                    del slot[chunk]
        chunks, first = np.unique(plan.indices // self.grid.samples_per_chunk, return_index=True)
        for chunk in chunks[np.argsort(first)].tolist():
            if chunk in slot:
                i = slot[chunk]
                rows = staging[int(starts[i]) : int(starts[i + 1])]
                self.cache.put((name, chunk), rows.copy())

    def _staging_buffer(self, info: FieldInfo, rows: int) -> npt.NDArray[Any]:
        buf = self._staging.get(info.name)
        if buf is None or len(buf) < rows:
            buf = np.empty((max(rows, 1), *(info.sample_shape or ())), dtype=info.dtype)
            self._staging[info.name] = buf
        return buf

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
