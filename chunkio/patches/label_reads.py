"""Label indexes of label images read in place, in bounded memory.

A store chunkio did not write (a user's array, an OME-Zarr label image) has no stored label
index, so :class:`~chunkio.patches.LabelBalancedSampler` needs one made by reading each label
volume once. A whole-slide label image is as large as its slide (20k x 20k int32: 1.6 GB),
so it is read one *slab* at a time: one row of chunks along the first spatial axis, indexed
and dropped before the next is read. The index equals that of the whole volume
(:func:`~chunkio.format.label_index.index_label_volume` given the slab's chunk coordinates).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import Reader
from ..format.label_index import LabelIndex, index_label_volume
from ..format.volume_layout import VolumeSet

__all__ = ["index_labels_by_slabs"]


def index_labels_by_slabs(
    reader: Reader, volumes: VolumeSet, array: str, dtype: np.dtype[Any]
) -> LabelIndex:
    """The label index of the label volumes in ``array`` (nothing is written), read one row
    of chunks at a time: memory holds one slab, ``chunks[0]`` voxels deep."""
    parts = []
    depth = volumes.chunks[0]
    for v, shape in enumerate(volumes.shapes):
        for row, start in enumerate(range(0, shape[0], depth)):
            lo = (start, *(0,) * (volumes.ndim - 1))
            hi = (min(start + depth, shape[0]), *shape[1:])
            region = volumes.region("label", v, lo, hi)
            buf = np.empty(tuple(r.stop - r.start for r in region), dtype)
            reader.read_region(array, region, buf)
            slab = buf.reshape(tuple(b - a for a, b in zip(lo, hi, strict=True)))
            first = (row, *(0,) * (volumes.ndim - 1))
            parts.append(index_label_volume(slab, v, volumes.chunks, first=first))
    return LabelIndex.concat(parts, volumes.ndim)
