"""The per-process read core: plan (pure) -> read (backend) -> cache -> scatter.

A :class:`ProcessReader` belongs to exactly one process. It owns the backend handle, one
:class:`~chunkio.pool.ChunkPool` of decoded chunks per array, the preloaded small fields and
the read counters. Both datasets use it: :class:`chunkio.ChunkDataset` for samples (each a
row of a sample-axis chunk, gathered with one ``np.take``) and
:class:`chunkio.patches.PatchDataset` for patches (boxes cut out of chunks of volumes chunked
along every axis). Each makes one lazily in each process and never pickles it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .backends import Reader, open_reader
from .backends.base import StageClock
from .encoded_read import EncodedField, read_whole
from .grid import SampleGrid
from .layout import DatasetLayout, FieldInfo
from .numeric import IntArray
from .planning import (
    BatchPlan,
    PatchReadPlan,
    chunk_boxes,
    normalize_indices,
    piece_slices,
    plan_batch,
)
from .pool import ChunkPool
from .sample_transforms import FieldTransform, stored_output_shape, transform_rows
from .volume_layout import VolumeSet

__all__ = ["PadMode", "PatchReadStats", "ProcessReader", "ReadStats"]

PadMode = Literal["constant", "edge"]


@dataclass
class ReadStats:
    """What this process has read: chunks decoded, chunks served from cache, samples served,
    and the seconds spent per stage (:meth:`stages`)."""

    chunks_read: int = 0
    cache_hits: int = 0
    rows_decoded: int = 0
    samples: int = 0
    batches: int = 0
    per_field: dict[str, int] = field(default_factory=dict)
    #: chunks decoded straight into the output (their samples were one run of the batch)
    direct_chunks: int = 0
    #: seconds gathering samples from decoded chunks into the output
    gather_s: float = 0.0
    clock: StageClock = field(default_factory=StageClock)
    #: patch reads: patches served, bytes decoded from the store and bytes delivered
    patches: int = 0
    bytes_decoded: int = 0
    bytes_delivered: int = 0

    @property
    def read_amplification(self) -> float:
        """Patch reads: bytes decoded per byte delivered (below 1 when patches share chunks)."""
        return self.bytes_decoded / self.bytes_delivered if self.bytes_delivered else 0.0

    def stages(self) -> dict[str, float]:
        """Seconds per stage in this process: ``read`` (file reads), ``checksum``,
        ``decode`` (decompression) and ``gather`` (copies into the batch)."""
        c = self.clock
        return {"read": c.read, "checksum": c.checksum, "decode": c.decode, "gather": self.gather_s}


#: patch reads count into the same counters (the name patches code has always used)
PatchReadStats = ReadStats


class ProcessReader:
    """Serves batches of one dataset in the current process.

    ``pool_chunks``: sample-axis chunks each dense field's pool keeps (at least a batch's);
    ``cache_bytes``: decoded bytes the patch pools keep besides a batch's chunks.
    """

    def __init__(
        self,
        location: Any,
        layout: DatasetLayout,
        *,
        pool_chunks: int = 0,
        cache_bytes: int = 0,
        preload_bytes: int = 0,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
        decode_threads: int = 1,
        download_cache: tuple[str, int] | None = None,
        documents: Mapping[str, Any] | None = None,
    ) -> None:
        self.pid = os.getpid()
        self.decode_threads = decode_threads
        self._executor: ThreadPoolExecutor | None = None
        self.layout = layout
        self.grid = SampleGrid(layout.num_samples, layout.samples_per_chunk)
        self.reader: Reader = open_reader(
            location,
            storage_options=storage_options,
            trust_codecs=trust_codecs,
            download_cache=download_cache,
            documents=documents,
        )
        self.pool_chunks = pool_chunks
        self.cache_bytes = cache_bytes
        self.preload_bytes = preload_bytes
        self.stats = ReadStats(clock=self.reader.clock)
        self._pools: dict[str, ChunkPool] = {}
        self._preloaded: dict[str, npt.NDArray[Any]] = {}
        self._ragged: dict[str, tuple[IntArray, IntArray]] = {}
        self._encoded: dict[str, EncodedField] = {}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self.reader.close()

    def map_rows(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``map(fn, items)``, on :attr:`decode_threads` threads when more than one."""
        if self.decode_threads <= 1:
            return map(fn, items)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.decode_threads, "chunkio-decode")
        return self._executor.map(fn, items)

    def read(
        self,
        fields: Sequence[str],
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        once: bool = False,
        transform: FieldTransform | None = None,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """Read ``indices`` of each field; dense fields as one array, ragged as a list,
        encoded fields decoded (as one array when their samples share a shape).

        ``once``: no later read asks for these samples again (a loader's epoch order), so a
        chunk the batch uses whole, in order, is decoded straight into the output and not
        kept. ``transform`` (of field ``transform.field``) is applied to each sample, keyed
        by ``epoch``, on its way into the output.
        """
        try:
            idx = normalize_indices(indices, self.layout.num_samples)
        except IndexError as err:  # name the dataset, as every other read error does
            raise IndexError(f"{self.reader.location}: {err}") from err
        result: dict[str, Any] = {}
        for name in fields:
            info = self.layout.field(name, where=self.reader.location)
            target = None if out is None else out.get(name)
            mine = transform if transform is not None and transform.field == name else None
            if info.kind == "encoded":
                if mine is not None and target is None:
                    target = self._transformed_buffer(info, mine, idx)
                elif target is None and info.sample_shape is not None:
                    target = np.empty((len(idx), *info.sample_shape), info.dtype)
                coded = self._encoded_field(info)
                before = coded.chunks_read
                result[name] = coded.read(idx, target, mine, epoch, self.map_rows)
                self.stats.chunks_read += coded.chunks_read - before
            elif info.kind == "ragged":
                result[name] = self._read_ragged(info, idx)
            elif mine is not None:
                source, rows = self._located(info, idx)
                if target is None:
                    target = self._transformed_buffer(info, mine, idx)
                transform_rows(mine, source, rows, idx, target, epoch, self.map_rows)
                result[name] = target
            else:
                result[name] = self._read_dense(info, idx, target, once)
        self.stats.samples += len(idx)
        self.stats.batches += 1
        return result

    def _read_dense(
        self, info: FieldInfo, idx: IntArray, out: npt.NDArray[Any] | None, once: bool
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
        # plan (pure) -> read the chunks the pool lacks, straight into their slots (or into
        # the output, for a chunk whose samples are one run of the batch) -> gather
        plan = plan_batch(idx, self.grid)
        chunks, pos = plan.chunks, plan.chunk_pos
        pool = self._pool(info)
        direct = self._direct_runs(plan, pool) if once else []
        rows: npt.NDArray[np.bool_] | None = None
        offsets = plan.offsets
        if direct:
            self._read_direct(info, direct, out)
            keep = ~np.isin(chunks, [c for c, _ in direct])
            rows = keep[pos]
            chunks, pos = chunks[keep], (np.cumsum(keep) - 1)[pos][rows]
            offsets = offsets[rows]
            if not len(chunks):
                return out
        slots = self._admit(info, pool, chunks)
        spc = self.grid.samples_per_chunk
        started = time.perf_counter()
        where = slots[pos] * spc + offsets
        if rows is None or rows.all():
            np.take(pool.buffer, where, axis=0, out=out, mode="clip")  # always in range
        else:
            out[rows] = pool.buffer[where]
        self.stats.gather_s += time.perf_counter() - started
        return out

    def _admit(self, info: FieldInfo, pool: ChunkPool, chunks: IntArray) -> IntArray:
        """The pool slot of each of ``chunks``, decoding those it lacks into their slots."""
        slots, runs = pool.admit(chunks)
        try:
            for run, first_slot in runs:
                ranges = [self.grid.bounds(c) for c in run]
                count = sum(b - a for a, b in ranges)
                self.reader.read_into(info.name, ranges, pool.rows(first_slot, count))
                self.stats.rows_decoded += count
        except BaseException:
            pool.forget([c for run, _ in runs for c in run])  # never serve a bad slot
            raise
        read = sum(len(run) for run, _ in runs)
        self.stats.chunks_read += read
        self.stats.cache_hits += len(chunks) - read
        self.stats.per_field[info.name] = self.stats.per_field.get(info.name, 0) + read
        return slots

    def _located(self, info: FieldInfo, idx: IntArray) -> tuple[npt.NDArray[Any], IntArray]:
        """Samples ``idx`` of dense field ``info``, decoded but not gathered: an array and the
        row of each sample in it (a transform then reads each straight from its chunk)."""
        whole = self._preload(info)
        if whole is not None:
            return whole, idx
        plan = plan_batch(idx, self.grid)
        pool = self._pool(info)
        slots = self._admit(info, pool, plan.chunks)
        return pool.buffer, slots[plan.chunk_pos] * self.grid.samples_per_chunk + plan.offsets

    def prefetch(self, fields: Sequence[str], indices: Sequence[int] | npt.ArrayLike) -> None:
        """Start fetching the chunks a later read of ``indices`` needs and this process does
        not hold (remote datasets fetch them in the background; local ones ignore it)."""
        prefetch = getattr(self.reader, "prefetch", None)
        if not callable(prefetch) or not getattr(self.reader, "prefetches", False):
            return  # a local dataset: nothing to fetch ahead (ring workers ask every batch)
        idx = normalize_indices(indices, self.layout.num_samples)
        for name in fields:
            info = self.layout.field(name, where=self.reader.location)
            if info.kind == "encoded":
                coded = self._encoded_field(info)
                prefetch(coded.data_name, coded.missing_chunks(idx))
            elif info.kind == "dense" and self._preload(info) is None:
                chunks = np.unique(idx // self.grid.samples_per_chunk).tolist()
                pool = self._pool(info)
                prefetch(info.name, [c for c in chunks if c not in pool])

    def _encoded_field(self, info: FieldInfo) -> EncodedField:
        coded = self._encoded.get(info.name)
        if coded is None:
            coded = EncodedField(self.reader, info, cache_chunks=2 * self.pool_chunks)
            self._encoded[info.name] = coded
        return coded

    def _transformed_buffer(
        self, info: FieldInfo, transform: FieldTransform, idx: IntArray
    ) -> npt.NDArray[Any]:
        """A new array for the transformed samples ``idx`` of ``info``; their inputs must
        transform to one shape."""
        if info.sample_shape is not None:
            stored = {tuple(info.sample_shape)}
        else:
            stored = {tuple(s) for s in self._encoded_field(info).shapes[idx].tolist()}
        shapes = {stored_output_shape(transform, s) for s in stored}
        if len(shapes) != 1:
            raise ValueError(
                f"{self.reader.location}: the transform of field {info.name!r} gives samples "
                f"of {len(shapes)} different shapes ({sorted(shapes)[:3]}...); a batch needs one "
                "(end it with a crop or a fixed-size resize)"
            )
        return np.empty((len(idx), *shapes.pop()), info.dtype)

    def _direct_runs(self, plan: BatchPlan, pool: ChunkPool) -> list[tuple[int, int]]:
        """``(chunk, position)`` of chunks the pool lacks whose every sample the batch asks
        for once, in storage order, at positions ``[position, position + size)``: those are
        decoded straight into the output (no pool slot, no gather copy). A shuffled batch
        rarely has one; a sequential one is mostly made of them."""
        counts = np.bincount(plan.chunk_pos, minlength=len(plan.chunks))
        spc, n = self.grid.samples_per_chunk, self.grid.num_samples
        sizes = np.minimum(spc, n - plan.chunks * spc)
        found = []
        for k in np.flatnonzero(counts == sizes).tolist():
            chunk = int(plan.chunks[k])
            if chunk in pool:
                continue  # decoded already: gathering it is cheaper than decoding it again
            first = int(np.argmax(plan.chunk_pos == k))
            size = int(sizes[k])
            run = plan.indices[first : first + size]
            if len(run) == size and run[0] == chunk * spc and (np.diff(run) == 1).all():
                found.append((chunk, first))
        return found

    def _read_direct(
        self, info: FieldInfo, direct: list[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        for chunk, first in direct:
            a, b = self.grid.bounds(chunk)
            self.reader.read_into(info.name, [(a, b)], out[first : first + b - a])
            self.stats.rows_decoded += b - a
        self.stats.chunks_read += len(direct)
        self.stats.direct_chunks += len(direct)
        self.stats.per_field[info.name] = self.stats.per_field.get(info.name, 0) + len(direct)

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
        return read_whole(self.reader, name)

    # -- patches ----------------------------------------------------------------------------

    def read_patches(
        self,
        volumes: VolumeSet,
        kinds: Sequence[str],
        plan: PatchReadPlan,
        patch_size: tuple[int, ...],
        *,
        dtypes: Mapping[str, np.dtype[Any]],
        pad_mode: PadMode,
        pad_values: Mapping[str, float],
    ) -> dict[str, npt.NDArray[Any]]:
        """The patches of ``plan`` (made with pieces) for each of ``kinds``."""
        out: dict[str, npt.NDArray[Any]] = {}
        ndim = volumes.ndim
        for kind in kinds:
            shape = (len(plan.keys), *volumes.item_shape(kind, patch_size))
            batch = np.full(shape, pad_values.get(kind, 0), dtype=dtypes[kind])
            dtype = np.dtype(dtypes[kind])
            pool, slots = self._patch_chunks(volumes, kind, plan, dtype, len(kinds))
            started = time.perf_counter()
            held = slots.tolist()
            for piece in plan.pieces.tolist():  # one copy per (patch, chunk) intersection
                b, row, src, dst = piece_slices(piece, ndim)
                into: tuple[Any, ...] = (b, Ellipsis, *dst)
                batch[into] = pool.buffer[(held[row], Ellipsis, *src)]
            if pad_mode == "edge":
                _pad_edges(batch, plan.inner, patch_size)
            self.stats.gather_s += time.perf_counter() - started
            self.stats.bytes_delivered += batch.nbytes
            out[kind] = batch
        self.stats.patches += len(plan.keys)
        self.stats.batches += 1
        return out

    def _patch_chunks(
        self, volumes: VolumeSet, kind: str, plan: PatchReadPlan, dtype: np.dtype[Any], share: int
    ) -> tuple[ChunkPool, IntArray]:
        """The pool of ``kind`` and the slot holding each of ``plan.chunks``: chunks it held
        already, the others read as few boxes per volume (:func:`chunk_boxes`) and copied into
        free slots. One pool per kind serves every volume (chunk ids numbered volume by
        volume), so memory does not grow with the number of volumes."""
        pool = self._pools.get(f"patches:{kind}")
        if pool is None:
            slot_shape = volumes.item_shape(kind, volumes.chunks)
            nbytes = int(np.prod(slot_shape)) * dtype.itemsize
            pool = self._pools[f"patches:{kind}"] = ChunkPool(
                rows_per_chunk=1,
                sample_shape=slot_shape,
                dtype=dtype,
                capacity=self.cache_bytes // max(1, nbytes * share),
            )
        chunks = plan.chunks
        ids = np.empty(len(chunks), np.int64)
        base = np.concatenate(
            [[0], np.cumsum([np.prod(volumes.chunk_grid(v)) for v in range(volumes.count)])]
        )
        for v in np.unique(chunks[:, 0]).tolist():
            mine = chunks[:, 0] == v
            local = np.ravel_multi_index(tuple(chunks[mine, 1:].T), volumes.chunk_grid(v))
            ids[mine] = base[v] + local
        # plan.chunks are in storage order (volume, then coordinates): ids ascend
        slots, runs = pool.admit(ids)
        missing = np.isin(ids, [c for run, _ in runs for c in run])
        try:
            self._fill_slots(volumes, kind, pool, chunks[missing], slots[missing])
        except BaseException:
            pool.forget(ids[missing].tolist())  # never serve a bad slot
            raise
        read = int(np.count_nonzero(missing))
        self.stats.chunks_read += read
        self.stats.cache_hits += len(ids) - read
        return pool, slots

    def _fill_slots(
        self,
        volumes: VolumeSet,
        kind: str,
        pool: ChunkPool,
        chunks: IntArray,
        slots: IntArray,
    ) -> None:
        size = volumes.chunks
        for v in np.unique(chunks[:, 0]).tolist():
            mine = chunks[:, 0] == v
            keys = map(tuple, chunks[mine, 1:].tolist())
            slot_of = dict(zip(keys, slots[mine].tolist(), strict=True))
            name, shape = volumes.array(kind, v)[0], volumes.shapes[v]
            for c_lo, c_hi in chunk_boxes(chunks[mine, 1:]):
                lo = tuple(a * c for a, c in zip(c_lo, size, strict=True))
                hi = tuple(min(b * c, n) for b, c, n in zip(c_hi, size, shape, strict=True))
                region = volumes.region(kind, v, lo, hi)
                buf = np.empty(tuple(r.stop - r.start for r in region), pool.buffer.dtype)
                self.reader.read_region(name, region, buf)
                self.stats.bytes_decoded += buf.nbytes
                data = buf[0]
                for coords in itertools.product(*map(range, c_lo, c_hi)):
                    a = [x * c - o for x, c, o in zip(coords, size, lo, strict=True)]
                    z = [min(p + c, h - o) for p, c, h, o in zip(a, size, hi, lo, strict=True)]
                    src = tuple(slice(p, q) for p, q in zip(a, z, strict=True))
                    dst = tuple(slice(0, q - p) for p, q in zip(a, z, strict=True))
                    pool.buffer[(slot_of[coords], Ellipsis, *dst)] = data[(Ellipsis, *src)]


def _pad_edges(
    batch: npt.NDArray[Any], inner: npt.NDArray[np.int64], patch_size: tuple[int, ...]
) -> None:
    """Replace the padding of patches that stick out by their nearest in-volume voxels."""
    full = np.asarray(patch_size)
    for b in range(len(batch)):
        lo, hi = inner[b]
        if (lo == 0).all() and (hi == full).all():
            continue
        core = batch[b][(..., *(slice(a, z) for a, z in zip(lo, hi, strict=True)))]
        lead = [(0, 0)] * (batch[b].ndim - len(full))
        pads = lead + [(int(a), int(n - z)) for a, z, n in zip(lo, hi, full, strict=True)]
        batch[b] = np.pad(core, pads, mode="edge")
