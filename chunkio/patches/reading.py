"""The per-process patch reader: plan -> read each chunk once (few boxes) -> cut patches out.

A :class:`PatchReader` belongs to one process (it holds the backend handle and the chunk
cache); :class:`~chunkio.patches.PatchDataset` makes one lazily in each process.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..backends import Reader, open_reader
from ..cache import ChunkCache
from .layout import VolumeSet
from .planning import PatchReadPlan, chunk_boxes

__all__ = ["PadMode", "PatchReadStats", "PatchReader"]

PadMode = Literal["constant", "edge"]


@dataclass
class PatchReadStats:
    """What this process has read: chunks decoded and served from cache, bytes both ways."""

    chunks_read: int = 0
    cache_hits: int = 0
    bytes_decoded: int = 0
    bytes_delivered: int = 0
    patches: int = 0
    batches: int = 0

    @property
    def read_amplification(self) -> float:
        """Bytes decoded per byte delivered (below 1 when overlapping patches share chunks)."""
        return self.bytes_decoded / self.bytes_delivered if self.bytes_delivered else 0.0


class PatchReader:
    """Serves batches of patches of one volume dataset in the current process."""

    def __init__(
        self,
        location: Any,
        volumes: VolumeSet,
        dtypes: Mapping[str, np.dtype[Any]],
        *,
        cache_bytes: int,
        storage_options: Mapping[str, Any] | None,
        trust_codecs: bool,
    ) -> None:
        self.pid = os.getpid()
        self.volumes = volumes
        self.dtypes = dict(dtypes)
        self.reader: Reader = open_reader(
            location, storage_options=storage_options, trust_codecs=trust_codecs
        )
        self.cache = ChunkCache(cache_bytes) if cache_bytes > 0 else None
        self.stats = PatchReadStats()

    def close(self) -> None:
        self.reader.close()

    def read(
        self,
        kinds: Sequence[str],
        plan: PatchReadPlan,
        patch_size: tuple[int, ...],
        *,
        pad_mode: PadMode,
        pad_values: Mapping[str, float],
    ) -> dict[str, npt.NDArray[Any]]:
        """The patches of ``plan`` for each of ``kinds`` (``"image"``, ``"label"``)."""
        out: dict[str, npt.NDArray[Any]] = {}
        origin = plan.keys[:, 1:]
        lo, hi = origin + plan.inner[:, 0], origin + plan.inner[:, 1]  # in-volume part
        for kind in kinds:
            shape = (len(plan.keys), *self.volumes.item_shape(kind, patch_size))
            batch = np.full(shape, pad_values.get(kind, 0), dtype=self.dtypes[kind])
            for volume, data, box_lo, box_hi in self._sources(kind, plan):
                # every patch of this volume takes its overlap with the box in one copy
                mine = np.flatnonzero(plan.keys[:, 0] == volume)
                a = np.maximum(lo[mine], box_lo)
                z = np.minimum(hi[mine], box_hi)
                hit = (z > a).all(axis=1)
                for b, p, q in zip(
                    mine[hit].tolist(), a[hit].tolist(), z[hit].tolist(), strict=True
                ):
                    o = origin[b].tolist()
                    into: tuple[Any, ...] = (b, Ellipsis, *map(_span, p, q, o))
                    take: tuple[Any, ...] = (Ellipsis, *map(_span, p, q, box_lo))
                    batch[into] = data[take]
            if pad_mode == "edge":
                _pad_edges(batch, plan.inner, patch_size)
            self.stats.bytes_delivered += batch.nbytes
            out[kind] = batch
        self.stats.patches += len(plan.keys)
        self.stats.batches += 1
        return out

    def _sources(
        self, kind: str, plan: PatchReadPlan
    ) -> Iterator[tuple[int, npt.NDArray[Any], tuple[int, ...], tuple[int, ...]]]:
        """``(volume, decoded data, its voxel box lo, hi)`` covering ``plan.chunks`` once.

        Cached chunks come from the cache; the others are read as few boxes per volume
        (:func:`chunk_boxes`), each decoding only chunks the batch needs.
        """
        vs = self.volumes
        chunks = plan.chunks
        for volume in np.unique(chunks[:, 0]).tolist():
            shape = vs.shapes[volume]
            todo = []
            for coords in map(tuple, chunks[chunks[:, 0] == volume, 1:].tolist()):
                hit = self._cache_get(kind, volume, coords)
                if hit is None:
                    todo.append(coords)
                else:
                    yield (
                        volume,
                        hit,
                        *_voxel_box(coords, tuple(c + 1 for c in coords), vs.chunks, shape),
                    )
            for c_lo, c_hi in chunk_boxes(todo) if todo else ():
                v_lo, v_hi = _voxel_box(c_lo, c_hi, vs.chunks, shape)
                region = vs.region(kind, volume, v_lo, v_hi)
                buf = np.empty(tuple(r.stop - r.start for r in region), self.dtypes[kind])
                self.reader.read_region(vs.array(kind, volume)[0], region, buf)
                data = buf[0]
                self.stats.bytes_decoded += buf.nbytes
                self.stats.chunks_read += int(np.prod(np.subtract(c_hi, c_lo)))
                if self.cache is not None:
                    for coords in itertools.product(*map(range, c_lo, c_hi)):
                        self._cache_put(kind, volume, coords, data, v_lo)
                yield volume, data, v_lo, v_hi

    def _cache_key(self, kind: str, volume: int, coords: tuple[int, ...]) -> tuple[str, int]:
        name, row = self.volumes.array(kind, volume)
        grid = self.volumes.chunk_grid(volume)
        return name, int(np.ravel_multi_index((row, *coords), (row + 1, *grid)))

    def _cache_get(
        self, kind: str, volume: int, coords: tuple[int, ...]
    ) -> npt.NDArray[Any] | None:
        if self.cache is None:
            return None
        hit = self.cache.get(self._cache_key(kind, volume, coords))
        if hit is not None:
            self.stats.cache_hits += 1
        return hit

    def _cache_put(
        self,
        kind: str,
        volume: int,
        coords: tuple[int, ...],
        data: npt.NDArray[Any],
        box_lo: tuple[int, ...],
    ) -> None:
        if self.cache is None:
            return
        vs = self.volumes
        c_lo, c_hi = _voxel_box(coords, tuple(c + 1 for c in coords), vs.chunks, vs.shapes[volume])
        part: tuple[Any, ...] = (Ellipsis, *map(_span, c_lo, c_hi, box_lo))
        # a copy: a view would keep the whole box alive after the cache evicts its neighbours
        self.cache.put(self._cache_key(kind, volume, coords), data[part].copy())


def _span(a: int, b: int, origin: int) -> slice:
    return slice(a - origin, b - origin)


def _voxel_box(
    c_lo: tuple[int, ...], c_hi: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Voxel box of the chunk box ``[c_lo, c_hi)``, clipped to the volume."""
    lo = tuple(a * c for a, c in zip(c_lo, chunks, strict=True))
    hi = tuple(min(b * c, n) for b, c, n in zip(c_hi, chunks, shape, strict=True))
    return lo, hi


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
