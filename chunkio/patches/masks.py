"""Masks that restrict where patches are drawn (a tissue mask, a label image), at any scale.

A mask is a volume of its own resolution: each of its voxels covers a box of image voxels,
found from the two grids' physical placement (:func:`footprint_edges`). A patch is *eligible*
when its centre voxel (``origin + patch_size // 2``) lies in a nonzero mask voxel; image
voxels no mask voxel covers are outside the mask. Samplers bound with a :class:`PatchMask`
keep the grid patches that are eligible and draw random patches uniformly among the eligible
origins that keep the patch inside its volume (:meth:`PatchMask.draw`: exact, no rejection
loop, whatever the fraction the mask leaves). A mask without a physical placement (an
array, in memory or in a store without OME-Zarr metadata) covers its whole image, placed by
the ratio of the two shapes (:func:`mask_by_shape`). Pure NumPy: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from ..util.numeric import IntArray

__all__ = ["PatchMask", "VolumeMask", "footprint_edges", "mask_by_shape"]


def footprint_edges(
    length: int, scale: float, shift: float, mask_length: int, mask_scale: float, mask_shift: float
) -> IntArray:
    """First image voxel of each mask voxel along one axis, and the end of the last:
    ``mask_length + 1`` edges in ``[0, length]``; mask voxel ``j`` covers image voxels
    ``[edges[j], edges[j + 1])``.

    Both grids place voxel ``i``'s centre at ``shift + i * scale`` (OME-NGFF's
    ``coordinateTransformations``); a mask voxel covers the image voxels whose centres fall in
    its extent ``[centre - scale / 2, centre + scale / 2)``. A mask 4x coarser, placed as
    ome-zarr-py places its levels (translation ``1.5``), covers image voxels 4j..4j+3:

    >>> footprint_edges(10, 1.0, 0.0, 3, 4.0, 1.5).tolist()
    [0, 4, 8, 10]
    """
    j = np.arange(mask_length + 1, dtype=np.float64)
    edge = (mask_shift + (j - 0.5) * mask_scale - shift) / scale
    # rounded first: 0.1 * 3 must not push an edge that lands on a centre past it
    starts = np.ceil(np.round(edge, 9)).astype(np.int64)
    out: IntArray = np.clip(starts, 0, length)
    return out


@dataclass(frozen=True, eq=False)
class VolumeMask:
    """The mask of one volume: ``values`` (nonzero: patches may be centred there) and, per
    spatial axis, the :func:`footprint_edges` of its voxels in the image."""

    values: npt.NDArray[np.bool_]
    edges: tuple[IntArray, ...]

    def contains(self, centres: IntArray) -> npt.NDArray[np.bool_]:
        """Whether each centre (an ``(n, ndim)`` array of image voxels) is in the mask."""
        index, inside = [], np.ones(len(centres), bool)
        for a, edges in enumerate(self.edges):
            j = np.searchsorted(edges, centres[:, a], side="right") - 1
            inside &= (j >= 0) & (j < len(edges) - 1)
            index.append(np.clip(j, 0, len(edges) - 2))
        found: npt.NDArray[np.bool_] = inside & self.values[tuple(index)]
        return found

    def weights(self, shape: Sequence[int], patch_size: Sequence[int]) -> npt.NDArray[np.int64]:
        """Eligible patch centres per mask voxel (patches inside the volume)."""
        out = self.values.astype(np.int64)
        for a, (edges, n, p) in enumerate(zip(self.edges, shape, patch_size, strict=True)):
            lo, hi = _centre_range(n, p)
            counts = np.clip(np.minimum(edges[1:], hi + 1) - np.maximum(edges[:-1], lo), 0, None)
            out = out * counts.reshape([-1 if b == a else 1 for b in range(out.ndim)])
        return out


def _centre_range(length: int, patch: int) -> tuple[int, int]:
    """First and last centre of the patches that stay inside an axis of ``length`` (one
    patch at 0, centred at most on the last voxel, when the axis is shorter than it)."""
    lo = min(patch // 2, length - 1)
    return lo, min(max(length - patch, 0) + patch // 2, length - 1)


@dataclass(frozen=True, eq=False)
class PatchMask:
    """One :class:`VolumeMask` per volume (time points of one image may share one)."""

    volumes: tuple[VolumeMask, ...]

    def eligible(
        self, keys: IntArray, patch_size: Sequence[int], shapes: Sequence[Sequence[int]]
    ) -> npt.NDArray[np.bool_]:
        """Whether each patch key ``(volume, *origin)`` is centred in its volume's mask."""
        out = np.zeros(len(keys), bool)
        size = np.asarray(patch_size, np.int64)
        for v in np.unique(keys[:, 0]).tolist():
            mine = keys[:, 0] == v
            centre = np.minimum(keys[mine, 1:] + size // 2, np.asarray(shapes[v]) - 1)
            out[mine] = self.volumes[v].contains(centre)
        return out

    def draw(
        self,
        n: int,
        shapes: Sequence[Sequence[int]],
        patch_size: Sequence[int],
        rng: np.random.Generator,
    ) -> IntArray:
        """``n`` patch keys uniform among the eligible origins of every volume (volumes
        weighted by how many they hold), each patch inside its volume."""
        ndim = len(patch_size)
        weights = [m.weights(s, patch_size) for m, s in zip(self.volumes, shapes, strict=True)]
        flat = np.concatenate([w.reshape(-1) for w in weights]).astype(np.float64)
        if n and not flat.sum():
            raise ValueError(
                f"the mask leaves no position for a patch of {tuple(patch_size)} in any volume"
            )
        if not n:
            return np.zeros((0, 1 + ndim), np.int64)
        start = np.cumsum([0] + [w.size for w in weights])
        picked = rng.choice(len(flat), size=n, p=flat / flat.sum())
        volume = np.searchsorted(start, picked, side="right") - 1
        keys = np.empty((n, 1 + ndim), np.int64)
        keys[:, 0] = volume
        for v in np.unique(volume).tolist():
            mine = volume == v
            cell = np.unravel_index(picked[mine] - start[v], weights[v].shape)
            for a in range(ndim):
                n_a, p_a = int(shapes[v][a]), int(patch_size[a])
                lo, hi = _centre_range(n_a, p_a)
                edges = self.volumes[v].edges[a]
                first = np.maximum(edges[cell[a]], lo)
                last = np.minimum(edges[cell[a] + 1] - 1, hi)
                centre = first + np.floor(rng.random(len(first)) * (last - first + 1))
                keys[mine, 1 + a] = np.clip(centre - p_a // 2, 0, max(n_a - p_a, 0))
        return keys

    def summary(self) -> list[int]:
        """Nonzero voxels of each volume's mask (what a resume state records)."""
        return [int(np.count_nonzero(m.values)) for m in self.volumes]

    def __len__(self) -> int:
        return len(self.volumes)


def as_mask(values: Any) -> npt.NDArray[np.bool_]:
    """A mask volume as booleans (nonzero: inside)."""
    out: npt.NDArray[np.bool_] = np.asarray(values) != 0
    return out


def mask_by_shape(
    values: Any, shapes: Sequence[Sequence[int]], where: str, name: str
) -> tuple[VolumeMask, ...]:
    """A mask array covering each volume whole (``shapes``: the volumes' spatial shapes):
    ``(*spatial)`` for every volume, or ``(1 or volumes, *spatial)``; each mask voxel covers
    ``shape / mask_shape`` image voxels per axis, centred as OME-Zarr levels are. ``where``
    and ``name`` (the store and the mask) are for messages.

    >>> m = mask_by_shape(np.eye(2), [(8, 8)], "slide.zarr", "tissue")[0]
    >>> [e.tolist() for e in m.edges], m.contains(np.array([[1, 1], [1, 6]])).tolist()
    ([[0, 4, 8], [0, 4, 8]], [True, False])
    """
    arr = np.asarray(values)
    ndim, count = len(shapes[0]), len(shapes)
    per = arr.reshape((1, *arr.shape)) if arr.ndim == ndim else arr
    out = []
    for v, shape in enumerate(shapes):
        image = tuple(int(n) for n in shape)
        spatial = tuple(int(n) for n in per.shape[1:])
        if (
            per.ndim != ndim + 1
            or per.shape[0] not in (1, count)
            or any(m < 1 or m > n for m, n in zip(spatial, image, strict=True))
        ):
            raise FormatError(
                f"{where}: mask {name!r} of shape {arr.shape}: expected {ndim} axes (after an "
                f"optional one of 1 or {count} volumes), each of 1 to the image's voxels "
                f"{image} (volume {v}): a mask covers the image at its own, coarser scale"
            )
        edges = []
        for m, n in zip(spatial, image, strict=True):
            scale = n / m  # image voxels per mask voxel; centred as OME-Zarr places levels
            edges.append(footprint_edges(n, 1.0, 0.0, m, scale, (scale - 1) / 2))
        out.append(VolumeMask(as_mask(per[v if len(per) > 1 else 0]), tuple(edges)))
    return tuple(out)
