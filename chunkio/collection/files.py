"""Many files or stores read as one dataset, concatenated along the sample axis.

``ChunkDataset([path1, path2, ...], fields=...)``: each file is described as a single one
would be (:func:`chunkio.format.store_layout.open_layout`: an AnnData collection, images split
over several HDF5 files, chunkio datasets), in the order given; sample ``i`` of the whole is
sample ``i - start`` of the file holding it. Every file must hold the same fields (name, kind,
dtype, sample shape; the error names the first file and field that differ). Categorical
fields may list different categories per file: the dataset's categories are their union, in
order of first appearance, and each file's codes are remapped to it (:attr:`FileSet.remaps`).
The chunk-aware order runs over the files' chunks end to end, so the mixing pool, DDP and
resume span files. Nothing is opened per file in the parent after this description; each
reading process opens the files it reads lazily (:mod:`chunkio.collection.core`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader, ReaderOptions, reader_documents
from ..errors import FormatError
from ..format.columns import column_values
from ..format.grid import SampleGrid
from ..format.layout import DatasetLayout, FieldInfo
from ..format.sparse import with_sparse_batches
from ..format.store_layout import LayoutOptions, open_layout
from ..format.windows import is_windowed
from ..util.messages import listing
from ..util.numeric import IntArray
from .describe import describe_all

__all__ = [
    "FilePart",
    "FileSet",
    "describe_file",
    "is_file_list",
    "open_files",
    "reading_documents",
]


def is_file_list(path: Any) -> bool:
    """Whether ``ChunkDataset(path)`` names several files (a list or tuple of paths)."""
    return isinstance(path, list | tuple)


@dataclass(frozen=True, eq=False)
class FilePart:
    """One file of a :class:`FileSet`: where it is, how each process opens it, its layout and
    the whole dataset's index of its first sample."""

    location: str
    options: ReaderOptions
    layout: DatasetLayout
    start: int
    #: chunks of this file along the order (counted once: every process asks per file)
    layout_chunks: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout_chunks", int((_chunk_sizes(self.layout) > 0).sum()))


@dataclass(frozen=True, eq=False)
class FileSet:
    """The files of one dataset (pickled with it), and their concatenated ``layout``.

    ``remaps[i][field]``: file ``i``'s categorical codes -> the dataset's (indexed by code + 1,
    so pandas' missing code -1 stays -1); only for files whose categories differ.
    """

    parts: tuple[FilePart, ...]
    layout: DatasetLayout
    remaps: tuple[Mapping[str, IntArray], ...]

    @property
    def starts(self) -> IntArray:
        """Each file's first sample, and the total at the end."""
        return np.array([p.start for p in self.parts] + [self.layout.num_samples], np.int64)

    def chunks_per_file(self) -> IntArray:
        """Chunks of each file holding samples, in order (``layout.order_sizes`` file by
        file): what keeps a file's chunks together in the order
        (:mod:`chunkio.sampling.file_order`)."""
        return np.array([p.layout_chunks for p in self.parts if p.layout_chunks], np.int64)

    def remap(self, part: int, name: str, values: Any) -> Any:
        """Codes of categorical field ``name`` read from file ``part``, in the dataset's
        categories (other fields as they are)."""
        table = self.remaps[part].get(name)
        if table is None:
            return values
        return table[np.asarray(values, dtype=np.int64) + 1]

    def labels(self, info: FieldInfo) -> npt.NDArray[np.int64]:
        """Field ``info``'s values of every sample, file after file, read whole."""
        return np.concatenate([self.part_labels(i, info) for i in range(len(self.parts))])

    def part_labels(self, part: int, info: FieldInfo) -> npt.NDArray[np.int64]:
        """Field ``info``'s values of file ``part``'s samples (in the dataset's categories),
        read whole; the file opened and closed here."""
        where = self.parts[part]
        reader = where.options.open(where.location)
        try:
            mine = where.layout.field(info.name, where=where.location)
            values = self.remap(part, info.name, column_values(reader, mine))
        finally:
            reader.close()
        return np.asarray(values).astype(np.int64)


def open_files(
    paths: Sequence[Any],
    fields: Any,
    options: ReaderOptions,
    *,
    preload_bytes: int = 0,
    anchors: Any = None,
    sparse_batches: str = "dense",
) -> FileSet:
    """Describe ``paths`` as one dataset (each opened and closed here, once); sparse fields
    read as ``sparse_batches`` (``ChunkDataset(sparse_batches=...)``) in every file."""
    locations = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in paths]
    if not locations:
        raise FormatError("ChunkDataset([]): a dataset of several files needs at least one")
    if any(not isinstance(loc, str) for loc in locations):
        raise TypeError(f"a dataset of several files takes paths or URLs; got {paths!r}")
    if is_windowed(fields, anchors):
        raise FormatError(
            f"windows (chunkio.Field steps, anchors=) read one store; got {len(locations)} "
            "files: concatenate the time axis into one store"
        )
    one = functools.partial(
        describe_file,
        fields=fields,
        options=options,
        preload_bytes=preload_bytes,
        sparse_batches=sparse_batches,
    )
    parts: list[FilePart] = []
    start = 0
    for location, (mine, layout) in zip(locations, describe_all(locations, one), strict=True):
        parts.append(FilePart(location, mine, layout, start))
        start += layout.num_samples
    for part in parts[1:]:
        _check_same_fields(parts[0], part)
    fields_info, remaps = _categories(parts)
    sizes = np.concatenate([_chunk_sizes(p.layout) for p in parts])
    sizes = sizes[sizes > 0]
    first = parts[0].layout
    layout = DatasetLayout(
        num_samples=start,
        samples_per_chunk=max(1, round(start / len(sizes))) if len(sizes) else 1,
        fields=fields_info,
        class_names=first.class_names,
        extra={"files": len(parts)},
        foreign=first.foreign,
        order_sizes=tuple(int(s) for s in sizes),
    )
    return FileSet(tuple(parts), layout, remaps)


def describe_file(
    location: str,
    *,
    fields: Any,
    options: ReaderOptions,
    preload_bytes: int = 0,
    sparse_batches: str = "dense",
) -> tuple[ReaderOptions, DatasetLayout]:
    """One file of a dataset of many files, opened and closed here: how each process opens
    it (with what this process learnt of it) and its layout (:func:`open_files`' arguments;
    run in a pool's process for many files, :mod:`.describe`)."""
    reader = options.open(location)  # a missing file: DatasetNotFoundError, named
    try:
        found = open_layout(reader, fields, LayoutOptions(preload_bytes))
        layout = with_sparse_batches(found.dataset_layout(), sparse_batches, where=reader.location)
        mine = dataclasses.replace(
            found.reader_options(options), documents=reading_documents(reader, layout)
        )
    finally:
        reader.close()
    return mine, layout


def reading_documents(reader: Reader, layout: DatasetLayout) -> Mapping[str, Any] | None:
    """What each reading process is handed to open this file with: a remote file's fetched
    metadata, or what this process learnt of a local HDF5 file's arrays (their checks passed,
    their chunk index read: ``HDF5Reader.description``), so that a worker opening one file
    after another pays a file system open per file, not h5py's and chunkio's first look at
    each array (tens of ms per file, more than reading a small file's rows)."""
    fetched = reader_documents(reader)
    describe = getattr(reader, "description", None)
    if fetched is not None or not callable(describe):
        return fetched
    names = dict.fromkeys(n for info in layout.fields for n in info.array_names())
    found: Mapping[str, Any] | None = describe(list(names))
    return found


def _chunk_sizes(layout: DatasetLayout) -> IntArray:
    if layout.order_sizes is not None:
        return np.asarray(layout.order_sizes, np.int64)
    return SampleGrid(layout.num_samples, layout.samples_per_chunk).chunk_sizes()


def _describe(info: FieldInfo) -> tuple[Any, ...]:
    return (info.kind, str(info.dtype), info.sample_shape, info.encoding)


def _check_same_fields(first: FilePart, other: FilePart) -> None:
    """Raise naming the first field where ``other`` differs from ``first``."""
    mine, theirs = first.layout, other.layout
    if mine.field_names != theirs.field_names:
        raise FormatError(
            f"{other.location}: holds fields {listing(theirs.field_names)}, but "
            f"{first.location} holds {listing(mine.field_names)}; the files of one dataset must "
            "hold the same fields"
        )
    for a, b in zip(mine.fields, theirs.fields, strict=True):
        if _describe(a) != _describe(b) and not _both_codes(a, b):
            keys = ("kind", "dtype", "sample shape", "encoding")
            k = next(k for k, x, y in zip(keys, _describe(a), _describe(b), strict=True) if x != y)
            ours, theirs_ = _describe(a)[keys.index(k)], _describe(b)[keys.index(k)]
            raise FormatError(
                f"{other.location}: field {b.name!r} has {k} {theirs_!r}, but in "
                f"{first.location} {ours!r}; the files of one dataset must hold the same fields"
            )
    if mine.class_names != theirs.class_names:
        raise FormatError(
            f"{other.location}: class names {theirs.class_names} differ from "
            f"{first.location}'s {mine.class_names}: labels would mean different classes"
        )


def _both_codes(a: FieldInfo, b: FieldInfo) -> bool:
    """Categorical codes of any integer width (remapped to one list of categories)."""
    ca, cb = getattr(a, "categories", None), getattr(b, "categories", None)
    return ca is not None and cb is not None and a.kind == b.kind and a.dtype.kind in "iu"


def _categories(
    parts: Sequence[FilePart],
) -> tuple[tuple[FieldInfo, ...], tuple[dict[str, IntArray], ...]]:
    """The first file's fields with each categorical's categories the union of the files',
    and each file's code remaps."""
    fields = list(parts[0].layout.fields)
    remaps: list[dict[str, IntArray]] = [{} for _ in parts]
    for j, info in enumerate(fields):
        if info.categories is None:  # an AnnData categorical, or a converted one
            continue
        per_file = [getattr(p.layout.fields[j], "categories", None) or () for p in parts]
        union = list(dict.fromkeys(c for cats in per_file for c in cats))
        position = {c: k for k, c in enumerate(union)}
        for i, cats in enumerate(per_file):
            if list(cats) != union[: len(cats)]:
                table = [-1] + [position[c] for c in cats]
                remaps[i][info.name] = np.asarray(table, np.int64)
        dtype = np.result_type(
            *(p.layout.fields[j].dtype for p in parts), np.min_scalar_type(-len(union))
        )
        fields[j] = dataclasses.replace(info, categories=tuple(union), dtype=np.dtype(dtype))
    return tuple(fields), tuple(remaps)
