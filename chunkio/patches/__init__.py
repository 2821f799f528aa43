"""Patch-based training and inference on chunked volumes.

:class:`PatchDataset` serves patches of a volume dataset (written by
:func:`chunkio.convert.volumes.convert_volumes`, a user's own HDF5 / Zarr volume arrays or an
OME-Zarr image read in place; several stores as one: :mod:`.stores`), :class:`GridSampler`,
:class:`RandomPatchSampler` and :class:`LabelBalancedSampler` choose them, and :func:`stitch`
writes per-patch predictions back into full volumes. :mod:`.ome_zarr` parses OME-Zarr
metadata (multiscales, axes, scales, label images), :mod:`.ome_reads` reads its label index
and masks, and :mod:`.masks` restricts where patches are centred. 2-D images of any size
(whole-slide images) take the same path: :mod:`.named_axes` reads a user's array by named
axes (``axes="cyx"``), and :mod:`.label_reads` indexes a label image in place a row of chunks
at a time, so no whole slide is ever in memory.

Names are imported on first use (PEP 562), so importing one sampler does not import torch. The
on-disk volume format (:mod:`chunkio.format.volume_layout`, :mod:`chunkio.format.label_index`)
lives outside
this package: converters write it without importing the read side.

Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends`, :mod:`chunkio.read`, :mod:`chunkio.sampling`,
:mod:`chunkio.transforms` and, for :func:`stitch` alone, the conversion engine
(:mod:`chunkio.convert`, :mod:`chunkio.convert.engine`, :mod:`chunkio.convert.durability`,
:mod:`chunkio.convert.shuffle`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_names

if TYPE_CHECKING:
    from ..format.label_index import LabelIndex, index_label_volume
    from ..format.volume_layout import VolumeSet
    from ..read import PatchReadStats
    from ..read.planning import PatchReadPlan, chunk_boxes, plan_patch_reads
    from .balanced import LabelBalancedSampler
    from .dataset import PatchDataset
    from .samplers import GridSampler, PatchSampler, RandomPatchSampler, grid_origins
    from .stitching import stitch

_LAZY = {
    "GridSampler": ".samplers",
    "LabelBalancedSampler": ".balanced",
    "LabelIndex": "..format.label_index",
    "PatchDataset": ".dataset",
    "PatchReadPlan": "..read.planning",
    "PatchReadStats": "..read",
    "PatchSampler": ".samplers",
    "RandomPatchSampler": ".samplers",
    "VolumeSet": "..format.volume_layout",
    "chunk_boxes": "..read.planning",
    "grid_origins": ".samplers",
    "index_label_volume": "..format.label_index",
    "plan_patch_reads": "..read.planning",
    "stitch": ".stitching",
}

__all__ = [
    "GridSampler",
    "LabelBalancedSampler",
    "LabelIndex",
    "PatchDataset",
    "PatchReadPlan",
    "PatchReadStats",
    "PatchSampler",
    "RandomPatchSampler",
    "VolumeSet",
    "chunk_boxes",
    "grid_origins",
    "index_label_volume",
    "plan_patch_reads",
    "stitch",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
