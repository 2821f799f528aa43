"""Where stored samples came from: the ``path`` field of image datasets, as text.

``convert_images`` stores each image's source path (relative to the source folder) in the
field ``path`` as zero-padded bytes, and - when it shuffles, the default - each image's
position in the sorted file listing in ``source_index``. :func:`read_source_paths` reads and
decodes the paths of chosen stored rows without importing torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..backends import open_reader
from ..errors import FormatError, MissingFieldError
from ..format.layout import DatasetLayout
from ..util.messages import listing
from .planning import normalize_indices

__all__ = ["PATH_FIELD", "Located", "decode_paths", "read_source_paths"]

#: the field holding each image's source path
PATH_FIELD = "path"


@runtime_checkable
class Located(Protocol):
    """A dataset that says where it is stored (:class:`~chunkio.ChunkDataset` does): its
    ``location`` (what :func:`~chunkio.backends.open_reader` opens) and its ``layout``."""

    location: Any
    layout: DatasetLayout


def decode_paths(path_field: npt.ArrayLike) -> list[str]:
    """Decode rows of the ``path`` field (``(N, L)`` uint8, zero-padded) into paths.

    >>> decode_paths(np.array([[97, 47, 120, 0], [98, 47, 121, 122]], np.uint8))
    ['a/x', 'b/yz']
    """
    arr = np.asarray(path_field, dtype=np.uint8)
    return [os.fsdecode(bytes(row).rstrip(b"\0")) for row in arr.reshape(len(arr), -1)]


def read_source_paths(
    dataset: Located | str | os.PathLike[str] | object,
    indices: Sequence[int] | npt.ArrayLike | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """The source paths of stored rows ``indices`` (default: all, in stored order).

    Parameters
    ----------
    dataset
        A dataset location (``.zarr`` directory, ``.h5`` file, ``memory://NAME``, URL or zarr
        Store) or a :class:`~chunkio.ChunkDataset` (any :class:`Located`: it is read from its
        ``location``).
    indices
        Stored row numbers (negative ones count from the end), as for
        :meth:`~chunkio.ChunkDataset.read_batch`; the paths come back in this order.
    storage_options
        For remote Zarr URLs, as for :class:`~chunkio.ChunkDataset`.

    Returns
    -------
    list[str]
        Paths relative to the converted folder (absolute for a converted list of paths).

    Raises
    ------
    MissingFieldError
        The dataset has no ``path`` field (only ``convert_images`` stores one).
    IndexError
        An index is out of range.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from PIL import Image
    >>> from chunkio import Execution, convert_images
    >>> src = tempfile.mkdtemp()
    >>> for cls in ("cat", "dog"):
    ...     os.mkdir(os.path.join(src, cls))
    ...     for i in range(2):
    ...         Image.new("RGB", (4, 4)).save(os.path.join(src, cls, f"{i}.png"))
    >>> dst = os.path.join(tempfile.mkdtemp(), "pets.zarr")
    >>> _ = convert_images(src, dst, execution=Execution(workers=1, progress=False))
    >>> read_source_paths(dst)
    ['dog/0.png', 'cat/0.png', 'cat/1.png', 'dog/1.png']
    >>> read_source_paths(dst, [0, -1])
    ['dog/0.png', 'dog/1.png']
    """
    if isinstance(dataset, Located) and isinstance(dataset.layout, DatasetLayout):
        dataset = dataset.location  # a ChunkDataset: open its files here, not its handle
    reader = open_reader(dataset, storage_options=storage_options)
    try:
        where = reader.location
        layout = DatasetLayout.from_attrs(reader.attrs(), where=where)
        if PATH_FIELD not in layout.field_names:
            raise MissingFieldError(
                f"{where}: no {PATH_FIELD!r} field to read source paths from (convert_images "
                f"stores one); the dataset has fields {listing(layout.field_names)}"
            )
        field = layout.field(PATH_FIELD, where=where)
        shape = field.sample_shape
        plain = field.kind_def.one_row and field.dtype == np.uint8
        if not plain or shape is None or len(shape) != 1:
            raise FormatError(
                f"{where}: field {PATH_FIELD!r} should hold (N, L) uint8 encoded paths; got "
                f"{field.kind} {field.dtype} samples of shape {shape}"
            )
        n, spc = layout.num_samples, layout.samples_per_chunk
        idx = normalize_indices(np.arange(n) if indices is None else indices, n)
        if idx.size == 0:
            return []
        chunks, pos = np.unique(idx // spc, return_inverse=True)
        ranges = [(int(c) * spc, min((int(c) + 1) * spc, n)) for c in chunks]
        starts = np.cumsum([0] + [b - a for a, b in ranges])[:-1]
        rows = np.empty((starts[-1] + ranges[-1][1] - ranges[-1][0], shape[0]), np.uint8)
        reader.read_into(PATH_FIELD, ranges, rows)  # each chunk decoded once
        return decode_paths(rows[starts[pos.reshape(-1)] + idx % spc])
    finally:
        reader.close()
