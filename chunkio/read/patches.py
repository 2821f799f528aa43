"""Patch reads (:class:`chunkio.patches.PatchDataset`): boxes cut out of volumes chunked along
every axis.

plan (pure, :func:`~chunkio.read.planning.plan_patch_reads`) -> read the chunks the cache lacks,
each decoded straight into its slot of the chunk pool (a remote store: as few regions per volume
as :func:`~chunkio.read.planning.chunk_boxes` finds, each fetched in one round) -> one copy per
(patch, chunk) intersection into the batch. Patches on the chunk grid that share no chunk with
another patch of the batch skip the pool: each is read as one box into its row
(:mod:`~chunkio.read.patch_direct`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..format.volume_layout import VolumeSet
from ..util.numeric import IntArray
from .base import ReadContext
from .cache import DecodedChunkCache
from .patch_direct import direct_patches
from .planning import PatchReadPlan, chunk_boxes

__all__ = ["PadMode", "PatchReads"]

PadMode = Literal["constant", "edge"]


class PatchReads:
    """The patch reads of one process: a cache of decoded chunks per kind of volume.

    ``cache_bytes``: decoded bytes the caches keep besides a batch's chunks.
    """

    def __init__(self, ctx: ReadContext, cache_bytes: int) -> None:
        self.ctx = ctx
        self.cache_bytes = cache_bytes
        self._caches: dict[str, DecodedChunkCache] = {}
        self._bounds: dict[str, _Bound] = {}
        #: ids of the chunks the last reads touched, as many as the pool holds (newest last)
        self._recent: IntArray = np.zeros(0, np.int64)

    def read(
        self,
        volumes: VolumeSet,
        kinds: Sequence[str],
        plan: PatchReadPlan,
        patch_size: tuple[int, ...],
        *,
        dtypes: Mapping[str, np.dtype[Any]],
        pad_mode: PadMode,
        pad_values: Mapping[str, float],
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        rows: Sequence[int] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        """The patches of ``plan`` (made with pieces) for each of ``kinds``; into ``out``'s
        arrays of those kinds when given (a loader's ring slot: no copy after the read), at
        ``rows`` of them when given (one row per patch: several stores filling one batch)."""
        found: dict[str, npt.NDArray[Any]] = {}
        stats = self.ctx.stats
        ndim = volumes.ndim
        pieces = plan.pieces
        at = list(range(len(plan.keys))) if rows is None else list(rows)
        if rows is not None and (
            out is None or any(k not in out for k in kinds) or len(at) != len(plan.keys)
        ):
            raise ValueError(
                f"rows needs out of every kind and one row per patch; got {len(at)} rows"
            )
        # patches on the chunk grid that share no chunk: read into their rows, past the pool
        direct = self._direct(volumes, kinds, plan, patch_size, dtypes)
        through = ~direct[pieces[:, 0]]
        straight = len(pieces) - int(np.count_nonzero(through))  # a whole chunk per piece
        pieces = pieces[through]
        pooled = np.zeros(len(plan.chunks), np.bool_)
        pooled[pieces[:, 1]] = True
        src_lo, dst_lo = pieces[:, 2 : 2 + ndim], pieces[:, 2 + ndim : 2 + 2 * ndim]
        size = pieces[:, 2 + 2 * ndim :]
        # the pieces' slices once for every kind, as Python ints (no per-piece NumPy calls)
        cuts = [
            (at[b], row, tuple(map(slice, a, a_hi)), tuple(map(slice, d, d_hi)))
            for b, row, a, a_hi, d, d_hi in zip(
                pieces[:, 0].tolist(),
                pieces[:, 1].tolist(),
                src_lo.tolist(),
                (src_lo + size).tolist(),
                dst_lo.tolist(),
                (dst_lo + size).tolist(),
                strict=True,
            )
        ]
        padded = _padded(plan.inner, patch_size)
        for kind in kinds:
            item = volumes.item_shape(kind, patch_size)
            shape = (len(plan.keys) if rows is None or out is None else len(out[kind]), *item)
            # only patches sticking out of their volume keep part of the fill ("edge" pads
            # them itself)
            fill = [at[b] for b in padded] if pad_mode == "constant" else []
            batch = _batch(shape, np.dtype(dtypes[kind]), pad_values.get(kind, 0), out, kind, fill)
            cache = self._cache(volumes, kind, kinds, dtypes)
            slots = np.full(len(plan.chunks), -1, np.int64)
            if len(pieces):
                wanted = plan.chunks[pooled]
                if len(wanted) > cache.capacity:
                    # room for what a batch of this many patches can touch: the cache then
                    # grows to a batch's need without a new buffer written afresh each time
                    # (first writes of memory cost several decodes); unused room costs nothing
                    through_pool = len(at) - int(np.count_nonzero(direct))
                    cache.reserve(_batch_slots(volumes, patch_size, through_pool))
                slots[pooled] = self._admit(volumes, kind, cache, wanted)
            if straight:
                self._read_direct(volumes, kind, plan, np.flatnonzero(direct).tolist(), batch, at)
                stats.chunks_read += straight
                stats.direct_chunks += straight
            started = time.perf_counter()
            held, pool = slots.tolist(), cache.buffer
            for b, row, src, dst in cuts:  # one copy per (patch, chunk) intersection
                batch[(b, Ellipsis, *dst)] = pool[(held[row], Ellipsis, *src)]
            if pad_mode == "edge" and padded:
                _pad_edges(batch, plan.inner, patch_size, at)
            stats.gather_s += time.perf_counter() - started
            stats.bytes_delivered += len(at) * int(np.prod(item)) * batch.itemsize
            found[kind] = batch
        stats.patches += len(plan.keys)
        stats.batches += 1
        return found

    def _cache(
        self,
        volumes: VolumeSet,
        kind: str,
        kinds: Sequence[str],
        dtypes: Mapping[str, np.dtype[Any]],
    ) -> DecodedChunkCache:
        """The cache of ``kind``: one serves every volume (chunk ids numbered volume by
        volume), so memory does not grow with the number of volumes. It starts with a batch's
        chunks; once a chunk decoded before is decoded again (the reads reuse chunks), it
        grows to its bound (:class:`_Bound`)."""
        cache = self._caches.get(kind)
        if cache is None:
            cache = self._caches[kind] = DecodedChunkCache(
                rows_per_chunk=1,
                sample_shape=volumes.item_shape(kind, volumes.chunks),
                dtype=np.dtype(dtypes[kind]),
                capacity=1,
            )
            self._bounds[kind] = _Bound.of(volumes, kinds, dtypes, self.cache_bytes)
        return cache

    def _direct(
        self,
        volumes: VolumeSet,
        kinds: Sequence[str],
        plan: PatchReadPlan,
        patch_size: tuple[int, ...],
        dtypes: Mapping[str, np.dtype[Any]],
    ) -> npt.NDArray[np.bool_]:
        """The patches read straight into their rows (:mod:`.patch_direct`): none from a
        remote store (the pool's boxes fetch a batch's chunks in few rounds) nor with a cache
        (``cache_bytes``: its chunks go through it, to be there when reads come back)."""
        none = np.zeros(len(plan.keys), np.bool_)
        if not len(plan.keys) or is_remote(self.ctx.reader.location):
            return none
        caches = [self._cache(volumes, k, kinds, dtypes) for k in kinds]
        if any(self._bounds[k].slots for k in kinds):
            return none
        # a chunk the pool holds is copied, not decoded again; one a recent read touched goes
        # through the pool too, to be held when reads come back to it (an epoch of a few
        # patches: the pool then holds them all, as it would without this path)
        ids = _chunk_ids(volumes, plan.chunks)
        kept = np.isin(ids, self._recent)
        if any(len(cache) for cache in caches):
            kept |= [any(c in cache for cache in caches) for c in ids.tolist()]
        keep = max(len(ids), *(cache.capacity for cache in caches))
        self._recent = np.concatenate([self._recent, ids])[-keep:]
        return direct_patches(plan, volumes, patch_size, kept)

    def _read_direct(
        self,
        volumes: VolumeSet,
        kind: str,
        plan: PatchReadPlan,
        patches: list[int],
        batch: npt.NDArray[Any],
        at: list[int],
    ) -> None:
        """Patches ``patches`` of ``plan`` (inside their volumes; at least one) of ``kind``,
        each read as one box into its row ``at[b]`` of ``batch``."""
        size = plan.inner[patches[0], 1].tolist()  # inside its volume: inner is the patch
        for b in patches:
            v, *origin = plan.keys[b].tolist()
            name = volumes.array(kind, v)[0]
            array = self.ctx.layout.field(name).roles.values  # a foreign store's path
            hi = tuple(o + n for o, n in zip(origin, size, strict=True))
            region = volumes.region(kind, v, tuple(origin), hi)
            row = batch[at[b]]
            # the region's leading axes of one (the volume's row, a label's channel) as views
            self.ctx.reader.read_region(array, region, row[(None,) * (len(region) - row.ndim)])
            self.ctx.stats.bytes_decoded += row.nbytes

    def _admit(
        self, volumes: VolumeSet, kind: str, cache: DecodedChunkCache, chunks: IntArray
    ) -> IntArray:
        """The slot holding each of ``chunks``: chunks the cache held already, the others read
        as few boxes per volume and copied into free slots."""
        # plan.chunks are in storage order (volume, then coordinates): ids ascend
        ids = _chunk_ids(volumes, chunks)
        slots, runs = cache.admit(ids)
        missing = np.isin(ids, [c for run, _ in runs for c in run])
        try:
            self._fill_slots(volumes, kind, cache, chunks[missing], slots[missing])
        except BaseException:
            cache.forget(ids[missing].tolist())  # never serve a bad slot
            raise
        read = int(np.count_nonzero(missing))
        self._bounds[kind].grow(cache, ids[missing])
        self.ctx.stats.chunks_read += read
        self.ctx.stats.cache_hits += len(ids) - read
        return slots

    def _fill_slots(
        self,
        volumes: VolumeSet,
        kind: str,
        cache: DecodedChunkCache,
        chunks: IntArray,
        slots: IntArray,
    ) -> None:
        if is_remote(self.ctx.reader.location):
            self._fill_by_boxes(volumes, kind, cache, chunks, slots)
            return
        # a local store: each chunk decoded straight into its slot (a whole chunk into a
        # C-contiguous slot needs no staging copy in either backend), an array's chunks in
        # one call
        size = volumes.chunks
        pool = cache.buffer
        arrays: dict[int, str] = {}
        boxes: dict[str, tuple[list[tuple[slice, ...]], list[npt.NDArray[Any]]]] = {}
        for (v, *coords), slot in zip(chunks.tolist(), slots.tolist(), strict=True):
            array = arrays.get(v)
            if array is None:  # a foreign store's path
                name = volumes.array(kind, v)[0]
                array = arrays[v] = self.ctx.layout.field(name).roles.values
            shape = volumes.shapes[v]
            lo = tuple(x * c for x, c in zip(coords, size, strict=True))
            hi = tuple(min(a + c, n) for a, c, n in zip(lo, size, shape, strict=True))
            region = volumes.region(kind, v, lo, hi)
            part = pool[(slot, Ellipsis, *(slice(0, b - a) for a, b in zip(lo, hi, strict=True)))]
            # the region's leading axes of one (the volume's row, a label's channel) as views
            target = part[(None,) * (len(region) - part.ndim)]
            regions, targets = boxes.setdefault(array, ([], []))
            regions.append(region)
            targets.append(target)
        for array, (regions, targets) in boxes.items():
            self.ctx.reader.read_regions(array, regions, targets)
            self.ctx.stats.bytes_decoded += sum(t.nbytes for t in targets)

    def _fill_by_boxes(
        self,
        volumes: VolumeSet,
        kind: str,
        cache: DecodedChunkCache,
        chunks: IntArray,
        slots: IntArray,
    ) -> None:
        """A remote store: the chunks read as few boxes per volume (a box's chunks fetched in
        one round), then copied into their slots."""
        size = volumes.chunks
        for v in np.unique(chunks[:, 0]).tolist():
            mine = chunks[:, 0] == v
            keys = map(tuple, chunks[mine, 1:].tolist())
            slot_of = dict(zip(keys, slots[mine].tolist(), strict=True))
            name, shape = volumes.array(kind, v)[0], volumes.shapes[v]
            array = self.ctx.layout.field(name).roles.values  # a foreign store's path
            for c_lo, c_hi in chunk_boxes(chunks[mine, 1:]):
                lo = tuple(a * c for a, c in zip(c_lo, size, strict=True))
                hi = tuple(min(b * c, n) for b, c, n in zip(c_hi, size, shape, strict=True))
                region = volumes.region(kind, v, lo, hi)
                buf = np.empty(tuple(r.stop - r.start for r in region), cache.buffer.dtype)
                self.ctx.reader.read_region(array, region, buf)
                self.ctx.stats.bytes_decoded += buf.nbytes
                data: npt.NDArray[Any] = buf[0] if volumes.volume_axis else buf
                for coords in itertools.product(*map(range, c_lo, c_hi)):
                    a = [x * c - o for x, c, o in zip(coords, size, lo, strict=True)]
                    z = [min(p + c, h - o) for p, c, h, o in zip(a, size, hi, lo, strict=True)]
                    src = tuple(slice(p, q) for p, q in zip(a, z, strict=True))
                    dst = tuple(slice(0, q - p) for p, q in zip(a, z, strict=True))
                    part: tuple[Any, ...] = (Ellipsis, *src)
                    cache.buffer[(slot_of[coords], Ellipsis, *dst)] = data[part]


def _chunk_ids(volumes: VolumeSet, chunks: IntArray) -> IntArray:
    """Chunk ids of ``chunks`` (rows ``(volume, *coords)``): numbered volume by volume, in
    storage order."""
    ids = np.empty(len(chunks), np.int64)
    base = np.concatenate(
        [[0], np.cumsum([np.prod(volumes.chunk_grid(v)) for v in range(volumes.count)])]
    )
    for v in np.unique(chunks[:, 0]).tolist():
        mine = chunks[:, 0] == v
        local = np.ravel_multi_index(tuple(chunks[mine, 1:].T), volumes.chunk_grid(v))
        ids[mine] = base[v] + local
    return ids


@dataclass
class _Bound:
    """How far the cache of one kind may grow: ``slots``, as many for every kind read (a
    patch touches the same chunks of each), together at most ``cache_bytes`` and never more
    than the volumes have chunks; and which chunks this process has decoded (``seen``).

    A cache only pays where reads come back to chunks (random and label-balanced patches
    overlapping across batches); a chunk-aligned grid decodes each chunk once an epoch, and
    a cache there would only cost the first writes of its memory. So the cache grows to its
    bound only when a chunk decoded before is decoded again."""

    slots: int
    seen: npt.NDArray[np.bool_]

    @classmethod
    def of(
        cls,
        volumes: VolumeSet,
        kinds: Sequence[str],
        dtypes: Mapping[str, np.dtype[Any]],
        cache_bytes: int,
    ) -> _Bound:
        per_chunk = sum(_slot_bytes(volumes, k, dtypes[k]) for k in kinds)
        chunks = sum(int(np.prod(volumes.chunk_grid(v))) for v in range(volumes.count))
        return cls(min(chunks, cache_bytes // max(1, per_chunk)), np.zeros(chunks, np.bool_))

    def grow(self, cache: DecodedChunkCache, decoded: IntArray) -> None:
        """Note chunks ``decoded`` (ids); grow ``cache`` to the bound if one was before."""
        again = bool(self.seen[decoded].any())
        self.seen[decoded] = True
        if again and cache.capacity < self.slots:
            # chunks decoded into never-written pages cost several times their decode
            cache.grow_to(self.slots, prefault=True)


def _batch_slots(volumes: VolumeSet, patch_size: tuple[int, ...], patches: int) -> int:
    """The most chunks ``patches`` patches of ``patch_size`` can touch (at most every chunk
    of the volumes).

    >>> vs = VolumeSet(shapes=((512, 512),), chunks=(64, 64), stacked=True)
    >>> _batch_slots(vs, (64, 64), 8), _batch_slots(vs, (64, 64), 100), _batch_slots(vs, (1, 1), 3)
    (32, 64, 3)
    """
    per_patch = 1
    for p, c in zip(patch_size, volumes.chunks, strict=True):
        per_patch *= -(-(p - 1) // c) + 1
    chunks = sum(int(np.prod(volumes.chunk_grid(v))) for v in range(volumes.count))
    return min(chunks, patches * per_patch)


def _slot_bytes(volumes: VolumeSet, kind: str, dtype: Any) -> int:
    """Bytes of one decoded chunk of ``kind``."""
    return int(np.prod(volumes.item_shape(kind, volumes.chunks))) * int(np.dtype(dtype).itemsize)


def _batch(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    pad: float,
    out: Mapping[str, npt.NDArray[Any]] | None,
    kind: str,
    fill: list[int],
) -> npt.NDArray[Any]:
    """The array ``kind``'s patches are copied into, ``out[kind]`` or a new one; patches
    ``fill`` (those sticking out of their volume) filled with ``pad`` first (what stays of
    it is the part outside the volume). The others are wholly overwritten by their pieces."""
    if out is None or kind not in out:
        batch = np.empty(shape, dtype=dtype)
    else:
        batch = out[kind]
        if batch.shape != shape or batch.dtype != dtype:
            raise ValueError(
                f"out[{kind!r}] must be {dtype} of shape {shape} for these patches; got "
                f"{batch.dtype} of shape {batch.shape}"
            )
    for b in fill:
        batch[b] = pad
    return batch


def is_remote(location: object) -> bool:
    """Whether a reader's ``location`` is a URL of a remote filesystem (as the backends tell
    it; the read layer does not import their modules).

    >>> is_remote("s3://bucket/data.zarr"), is_remote("memory://x"), is_remote("/data/x.h5")
    (True, False, False)
    """
    if not isinstance(location, str) or "://" not in location:
        return False
    return location.split("://", 1)[0] not in ("file", "local", "memory")


def _padded(inner: IntArray, patch_size: tuple[int, ...]) -> list[int]:
    """The patches (batch rows) whose in-volume part ``inner`` is not the whole patch."""
    whole = (inner[:, 0] == 0).all(axis=1) & (inner[:, 1] == np.asarray(patch_size)).all(axis=1)
    return np.flatnonzero(~whole).tolist()


def _pad_edges(
    batch: npt.NDArray[Any], inner: IntArray, patch_size: tuple[int, ...], rows: list[int]
) -> None:
    """Replace the padding of patches that stick out (patch ``b`` at row ``rows[b]``) by
    their nearest in-volume voxels."""
    full = np.asarray(patch_size)
    for b, r in enumerate(rows):
        lo, hi = inner[b]
        if (lo == 0).all() and (hi == full).all():
            continue
        core = batch[r][(..., *(slice(a, z) for a, z in zip(lo, hi, strict=True)))]
        lead = [(0, 0)] * (batch[r].ndim - len(full))
        pads = lead + [(int(a), int(n - z)) for a, z, n in zip(lo, hi, full, strict=True)]
        batch[r] = np.pad(core, pads, mode="edge")
