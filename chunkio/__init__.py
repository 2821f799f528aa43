"""chunkio: chunked Zarr v3 / HDF5 datasets that keep GPUs fed.

>>> import chunkio
>>> sorted(chunkio.__all__)[:3]
['ChunkBatchSampler', 'ChunkDataset', 'ChunkLoader']
"""

from __future__ import annotations

from .backends import Compression
from .batch import SampleBatch, collate
from .convert import ConversionResult, append_arrays, write_arrays
from .convert.images import convert_images
from .dataset import ChunkDataset
from .errors import ChunkioError
from .loader import ChunkLoader, make_loader
from .sampling import ChunkBatchSampler, read_amplification, shuffle_quality

__all__ = [
    "ChunkBatchSampler",
    "ChunkDataset",
    "ChunkLoader",
    "ChunkioError",
    "Compression",
    "ConversionResult",
    "SampleBatch",
    "append_arrays",
    "collate",
    "convert_images",
    "make_loader",
    "read_amplification",
    "shuffle_quality",
    "write_arrays",
]

__version__ = "0.1.0"
