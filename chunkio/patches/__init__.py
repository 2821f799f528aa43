"""Patch-based training and inference on chunked volumes.

:class:`PatchDataset` serves patches of a volume dataset (written by
:func:`chunkio.convert.volumes.convert_volumes`), :class:`GridSampler`,
:class:`RandomPatchSampler` and :class:`LabelBalancedSampler` choose them, and :func:`stitch`
writes per-patch predictions back into full volumes.
"""

from __future__ import annotations

from .balanced import LabelBalancedSampler
from .dataset import PatchDataset
from .label_index import LabelIndex, index_label_volume
from .layout import VolumeSet
from .planning import PatchReadPlan, chunk_boxes, plan_patch_reads
from .reading import PatchReadStats
from .samplers import GridSampler, PatchSampler, RandomPatchSampler, grid_origins

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
]
