"""chunkio: chunked Zarr v3 / HDF5 datasets that keep GPUs fed.

Names are imported on first use (PEP 562), so processes that only convert or inspect data
(conversion workers, ``python -m chunkio info``) never pay for importing torch.

>>> import chunkio
>>> sorted(chunkio.__all__)[:3]
['Anchors', 'ChunkBatchSampler', 'ChunkDataset']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:
    from .backends import Compression
    from .batch import SampleBatch, collate
    from .convert import ConversionResult, append_arrays, write_arrays
    from .convert.images import convert_images
    from .convert.stores import convert_arrays
    from .convert.volumes import convert_volumes
    from .dataset import ChunkDataset
    from .errors import ChunkioError
    from .label_check import LabelMixingWarning
    from .loader import ChunkLoader, make_loader
    from .mixing import label_mixing, stored_label_order
    from .patches import PatchDataset
    from .provenance import read_source_paths
    from .sampling import ChunkBatchSampler, read_amplification, shuffle_quality
    from .stats import Normalize, Stats, compute_stats
    from .windows import Anchors, Field

_LAZY = {
    "Anchors": ".windows",
    "ChunkBatchSampler": ".sampling",
    "ChunkDataset": ".dataset",
    "ChunkLoader": ".loader",
    "ChunkioError": ".errors",
    "Compression": ".backends",
    "ConversionResult": ".convert",
    "Field": ".windows",
    "LabelMixingWarning": ".label_check",
    "Normalize": ".stats",
    "PatchDataset": ".patches",
    "SampleBatch": ".batch",
    "Stats": ".stats",
    "append_arrays": ".convert",
    "collate": ".batch",
    "compute_stats": ".stats",
    "convert_arrays": ".convert.stores",
    "convert_images": ".convert.images",
    "convert_volumes": ".convert.volumes",
    "label_mixing": ".mixing",
    "make_loader": ".loader",
    "read_amplification": ".sampling",
    "read_source_paths": ".provenance",
    "shuffle_quality": ".sampling",
    "stored_label_order": ".mixing",
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
    "Field",
    "LabelMixingWarning",
    "Normalize",
    "PatchDataset",
    "SampleBatch",
    "Stats",
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
