"""What a dataset's metadata says: read once, when the dataset is made, through the parent's
metadata reader (which the dataset then closes: workers open their own)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader, ReaderOptions, detect_format, reader_documents
from ..collection.files import FileSet, reading_documents
from ..format.columns import column_values
from ..format.grid import SampleGrid
from ..format.layout import (
    DatasetLayout,
    label_field,
    native_selection,
    validate_sequence_of_names,
)
from ..format.sparse import with_sparse_batches
from ..format.store_layout import LayoutOptions, open_layout
from ..format.windows import Field
from ..read.batch import BatchShapes
from ..transforms.sample import FieldTransform
from .samples import SampleIndex

__all__ = ["Description", "channel_counts", "describe", "read_labels"]


@dataclass(frozen=True)
class Description:
    """A dataset as its metadata describes it (:func:`describe`)."""

    layout: DatasetLayout
    #: how every process's reader opens the store
    reader_options: ReaderOptions
    format: str
    fields: tuple[str, ...]
    samples: SampleIndex
    shapes: BatchShapes


def describe(
    reader: Reader,
    fields: Sequence[str] | Mapping[str, str] | str | None,
    *,
    location: Any,
    reader_options: ReaderOptions,
    options: LayoutOptions,
    files: FileSet | None = None,
    sparse_batches: str = "dense",
    transform: FieldTransform | None = None,
    channels_last: bool = True,
) -> Description:
    """Dataset ``location`` as ``reader`` (open on it with ``reader_options``) reads its
    metadata, ``fields`` selected (see :class:`chunkio.ChunkDataset`); ``files``: many files
    read end to end, which the first (``reader``'s) describes."""
    found = open_layout(reader, fields, options)
    if files is not None:
        found = dataclasses.replace(found, layout=files.layout)
    where = reader.location
    layout = with_sparse_batches(found.dataset_layout(), sparse_batches, where=where)
    # how every process's reader opens the store: a foreign store's never-written chunks
    # hold its fill value; a remote group's metadata, read once here, is reused, and so is
    # what this process learnt of a local HDF5 file's arrays (each worker would otherwise
    # walk their paths and read their chunk index again: about 8 ms per process for an h5ad;
    # many files carry one description per file, made by FileSet)
    documents = reader_documents(reader) if files is not None else reading_documents(reader, layout)
    opens = dataclasses.replace(found.reader_options(reader_options), documents=documents)
    names: Sequence[str] | None
    if found.foreign or found.windows:
        names = list(layout.field_names)  # fields named arrays: the layout's order
    else:  # a chunkio dataset's own names; a mapping selects, never renames
        names = native_selection(fields, str(location))
    selected = validate_sequence_of_names(names, layout, str(location))
    single = isinstance(fields, str | Field)
    shapes = BatchShapes(
        location,
        layout,
        selected,
        transform,
        channels_last,
        single=single,
        as_tuple=fields is not None and not single,
        channel_counts=channel_counts(reader, layout, transform),
    )
    chunks = None if files is None else files.chunks_per_file()
    samples = SampleIndex(location, layout, selected, found.windows, chunks)
    return Description(layout, opens, detect_format(where), selected, samples, shapes)


def channel_counts(
    reader: Reader, layout: DatasetLayout, transform: FieldTransform | None
) -> dict[str, int]:
    """Channels of the encoded or ragged image field of several sizes that a fixed-size
    field ``transform`` makes batches of (the first stored shape's; batch shapes need it)."""
    if transform is None or getattr(transform, "fixed_size", None) is None:
        return {}
    found = [f for f in layout.fields if f.name == transform.field and f.sample_shape is None]
    if not found or not found[0].kind_def.flat:
        return {}
    name = found[0].roles.shapes
    info = reader.array_info(name)
    grid = SampleGrid(int(info.shape[0]), int(info.chunks[0]))
    if not grid.num_chunks:
        return {transform.field: 3}
    first = np.empty((grid.bounds(0)[1], *info.shape[1:]), info.dtype)
    reader.read_into(name, [grid.bounds(0)], first)
    return {transform.field: int(first[0, 0])} if first.shape[1] == 3 else {}  # not (H, W)


def read_labels(
    layout: DatasetLayout, files: FileSet | None, open_reader: Callable[[], Reader]
) -> npt.NDArray[np.int64] | None:
    """Every sample's integer label, in storage order, read whole (through a reader
    ``open_reader`` opens, and closed: the calling process keeps no handle); ``None``
    without a label field (:func:`chunkio.format.layout.label_field`)."""
    info = label_field(layout)
    if info is None:
        return None
    if files is not None:
        return files.labels(info)
    reader = open_reader()
    try:  # "label", or the array (or column) a store chunkio did not write names
        return np.asarray(column_values(reader, info), dtype=np.int64)
    finally:
        reader.close()
