"""The per-process patch reader: plan -> read each chunk once -> cut the patches out.

A :class:`PatchReader` belongs to one process (it holds the backend handle and the chunk
cache); :class:`~chunkio.patches.PatchDataset` makes one lazily in each process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..backends import Reader, open_reader
from ..cache import ChunkCache
from .layout import VolumeSet
from .planning import PatchReadPlan, piece_slices

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
        by_chunk = plan.pieces[np.argsort(plan.pieces[:, 1], kind="stable")]
        bounds = np.searchsorted(by_chunk[:, 1], np.arange(len(plan.chunks) + 1))
        for kind in kinds:
            shape = (len(plan.keys), *self.volumes.item_shape(kind, patch_size))
            batch = np.full(shape, pad_values.get(kind, 0), dtype=self.dtypes[kind])
            for row in range(len(plan.chunks)):
                data = self._chunk(kind, plan, row)
                self._scatter(data, by_chunk[bounds[row] : bounds[row + 1]], batch)
            if pad_mode == "edge":
                _pad_edges(batch, plan.inner, patch_size)
            self.stats.bytes_delivered += batch.nbytes
            out[kind] = batch
        self.stats.patches += len(plan.keys)
        self.stats.batches += 1
        return out

    def _chunk(self, kind: str, plan: PatchReadPlan, row: int) -> npt.NDArray[Any]:
        """Decoded chunk ``plan.chunks[row]`` of ``kind`` (channels first, no row axis)."""
        vs = self.volumes
        volume = int(plan.chunks[row, 0])
        name, array_row = vs.array(kind, volume)
        grid = vs.chunk_grid(volume)
        flat = int(
            np.ravel_multi_index(
                (array_row, *plan.chunks[row, 1:].tolist()), (array_row + 1, *grid)
            )
        )
        if self.cache is not None:
            hit = self.cache.get((name, flat))
            if hit is not None:
                self.stats.cache_hits += 1
                return hit
        lo, hi = plan.chunk_box(row, vs)
        region = vs.region(kind, volume, lo, hi)
        buf = np.empty(tuple(s.stop - s.start for s in region), self.dtypes[kind])
        self.reader.read_region(name, region, buf)
        self.stats.chunks_read += 1
        self.stats.bytes_decoded += buf.nbytes
        data: npt.NDArray[Any] = buf[0]
        if self.cache is not None:
            self.cache.put((name, flat), data)
        return data

    def _scatter(
        self, data: npt.NDArray[Any], pieces: npt.NDArray[np.int64], batch: npt.NDArray[Any]
    ) -> None:
        for piece in pieces.tolist():
            b, _, src, dst = piece_slices(piece, self.volumes.ndim)
            into: tuple[Any, ...] = (b, Ellipsis, *dst)
            take: tuple[Any, ...] = (Ellipsis, *src)
            batch[into] = data[take]


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
