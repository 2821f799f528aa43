"""What ``chunkio doctor`` says about the data itself: the bytes one sample decodes to, as
training receives it, and the codecs its arrays are stored with.

Both are read from the dataset rather than derived from its declared layout: an encoded
image field declares a byte region, a ragged or sparse field no fixed size, so a per-sample
figure from the layout alone would count JPEG datasets as a few dozen bytes per sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dataset import ChunkDataset
from ..errors import ChunkioError

__all__ = ["SAMPLES_WEIGHED", "dataset_codecs", "sample_nbytes"]

#: samples read, spread over the dataset, to weigh one (sizes vary in ragged fields)
SAMPLES_WEIGHED = 8


def sample_nbytes(ds: ChunkDataset) -> int:
    """Mean decoded bytes of one sample over the selected fields, from
    :data:`SAMPLES_WEIGHED` samples read across the dataset (images decoded, ragged and
    sparse rows as read); the layout's figure for an empty dataset."""
    n = min(len(ds), SAMPLES_WEIGHED)
    if n == 0:
        return ds.chunk_nbytes() // ds.samples_per_chunk
    picks = np.unique(np.linspace(0, len(ds) - 1, n).round().astype(np.int64))
    found = ds.read_batch(picks.tolist())
    return max(1, round(_nbytes(found) / len(picks)))


def _nbytes(value: Any) -> int:
    """Bytes of a read batch: arrays and tensors, lists and dicts of them, sparse rows."""
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "indptr") and hasattr(value, "data"):  # scipy sparse rows
        return sum(_nbytes(getattr(value, p)) for p in ("data", "indices", "indptr"))
    if hasattr(value, "element_size") and hasattr(value, "nelement"):  # a torch tensor
        if getattr(value, "is_sparse", False) or "sparse" in str(getattr(value, "layout", "")):
            return sum(_nbytes(p) for p in _sparse_parts(value))
        return int(value.element_size() * value.nelement())
    return int(getattr(value, "nbytes", 0))


def _sparse_parts(tensor: Any) -> list[Any]:
    if str(tensor.layout) == "torch.sparse_csr":
        return [tensor.values(), tensor.col_indices(), tensor.crow_indices()]
    return [tensor._values(), tensor._indices()]


def dataset_codecs(ds: ChunkDataset) -> list[str]:
    """The codecs (``"lz4"``, ``"zstd"``, ``"none"``, ...) of the arrays the selected fields
    read, in the first file; arrays a backend cannot describe are left out."""
    first = ds.location[0] if isinstance(ds.location, tuple | list) else ds.location
    reader = ds.reader_options.open(first)
    try:
        found: set[str] = set()
        for field in ds.layout.fields:
            if field.name not in ds.fields:
                continue
            for name in field.array_names():
                try:
                    compression = reader.array_info(name).compression
                except (ChunkioError, KeyError, OSError):
                    continue  # a window's or a table's arrays: named otherwise
                if compression is not None:
                    found.add(compression.codec)
        return sorted(found)
    finally:
        reader.close()
