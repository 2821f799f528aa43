"""chunkio: chunked Zarr v3 / HDF5 datasets that keep GPUs fed.

Names are imported on first use (PEP 562), so processes that only convert or inspect data
(conversion workers, ``python -m chunkio info``) never pay for importing torch.

>>> import chunkio
>>> sorted(chunkio.__all__)[:3]
['Anchors', 'ChunkBatchSampler', 'ChunkDataset']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .util.lazy import lazy_names

if TYPE_CHECKING:
    from .backends import Compression
    from .convert import ConversionResult, Execution, Output, append_arrays, write_arrays
    from .convert.arrays import convert_arrays
    from .convert.images import ImageOptions, convert_images
    from .convert.volumes import convert_volumes
    from .dataset import ChunkDataset
    from .diagnose.stats import compute_stats
    from .errors import ChunkioError
    from .format.windows import Anchors, Field
    from .loader import ChunkLoader, make_loader
    from .loader_options import Ordering, Workers
    from .patches import PatchDataset
    from .read.batch import SampleBatch, collate
    from .read.provenance import read_source_paths
    from .sampling.label_check import LabelMixingWarning
    from .sampling.label_metrics import label_mixing, stored_label_order
    from .sampling.sampler import ChunkBatchSampler, read_amplification, shuffle_quality
    from .transforms.stats import Normalize, Stats

_LAZY = {
    "Anchors": ".format.windows",
    "ChunkBatchSampler": ".sampling.sampler",
    "ChunkDataset": ".dataset",
    "ChunkLoader": ".loader",
    "ChunkioError": ".errors",
    "Compression": ".backends",
    "ConversionResult": ".convert",
    "Execution": ".convert",
    "Field": ".format.windows",
    "ImageOptions": ".convert.images",
    "LabelMixingWarning": ".sampling.label_check",
    "Normalize": ".transforms.stats",
    "Ordering": ".loader_options",
    "Output": ".convert",
    "PatchDataset": ".patches",
    "SampleBatch": ".read.batch",
    "Stats": ".transforms.stats",
    "Workers": ".loader_options",
    "append_arrays": ".convert",
    "collate": ".read.batch",
    "compute_stats": ".diagnose.stats",
    "convert_arrays": ".convert.arrays",
    "convert_images": ".convert.images",
    "convert_volumes": ".convert.volumes",
    "label_mixing": ".sampling.label_metrics",
    "make_loader": ".loader",
    "read_amplification": ".sampling.sampler",
    "read_source_paths": ".read.provenance",
    "shuffle_quality": ".sampling.sampler",
    "stored_label_order": ".sampling.label_metrics",
    "write_arrays": ".convert",
}

__all__ = [
    "Anchors",
    "ChunkBatchSampler",
    "ChunkDataset",
    "ChunkLoader",
    "ChunkioError",
    "Compression",
    "ConversionResult",
    "Execution",
    "Field",
    "ImageOptions",
    "LabelMixingWarning",
    "Normalize",
    "Ordering",
    "Output",
    "PatchDataset",
    "SampleBatch",
    "Stats",
    "Workers",
    "append_arrays",
    "collate",
    "compute_stats",
    "convert_arrays",
    "convert_images",
    "convert_volumes",
    "label_mixing",
    "make_loader",
    "read_amplification",
    "read_source_paths",
    "shuffle_quality",
    "stored_label_order",
    "write_arrays",
]

__version__ = "0.1.0"


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
