"""chunkio: chunked Zarr v3 / HDF5 datasets that keep GPUs fed.

Names are imported on first use (PEP 562), so processes that only convert or inspect data
(conversion workers, ``python -m chunkio info``) never pay for importing torch.

>>> import chunkio
>>> sorted(chunkio.__all__)[:3]
['Anchors', 'ChunkBatchSampler', 'ChunkDataset']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .util.lazy import declared_names, lazy_names

# The public names, each listed once: imported here for type checkers and IDEs (``X as X``:
# an explicit re-export), and on first use at run time from the table read off this block.
if TYPE_CHECKING:
    from .backends import Compression as Compression
    from .convert import ConversionResult as ConversionResult
    from .convert import Execution as Execution
    from .convert import Output as Output
    from .convert import append_arrays as append_arrays
    from .convert import write_arrays as write_arrays
    from .convert.arrays import convert_arrays as convert_arrays
    from .convert.images import ImageOptions as ImageOptions
    from .convert.images import convert_images as convert_images
    from .convert.volumes import convert_volumes as convert_volumes
    from .dataset import ChunkDataset as ChunkDataset
    from .dataset import Decoding as Decoding
    from .dataset import DownloadCache as DownloadCache
    from .diagnose.stats import compute_stats as compute_stats
    from .errors import ChunkioError as ChunkioError
    from .format.windows import Anchors as Anchors
    from .format.windows import Field as Field
    from .loader import ChunkLoader as ChunkLoader
    from .loader import make_loader as make_loader
    from .loader_options import Ordering as Ordering
    from .loader_options import Workers as Workers
    from .patches import PatchDataset as PatchDataset
    from .read.batch import SampleBatch as SampleBatch
    from .read.batch import collate as collate
    from .read.provenance import read_source_paths as read_source_paths
    from .sampling.label_check import LabelMixingWarning as LabelMixingWarning
    from .sampling.label_metrics import label_mixing as label_mixing
    from .sampling.label_metrics import stored_label_order as stored_label_order
    from .sampling.sampler import ChunkBatchSampler as ChunkBatchSampler
    from .sampling.sampler import read_amplification as read_amplification
    from .sampling.sampler import shuffle_quality as shuffle_quality
    from .transforms.stats import Normalize as Normalize
    from .transforms.stats import Stats as Stats

#: public name -> the module that defines it (the ``TYPE_CHECKING`` block above)
_LAZY = declared_names(__file__)
__all__ = sorted(_LAZY)

__version__ = "0.1.0"


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
