"""A store chunkio did not write (an HDF5 file, a Zarr v2/v3 store) as a conversion source.

:class:`StoreSource` is a :class:`~chunkio.convert.BlockSource` over the arrays ``fields``
names, read through chunkio's own read core (:class:`~chunkio.read.ReadCore`: the fast Zarr
engine, raw HDF5 chunk reads, any codec chunkio reads, remote URLs), exactly what
``ChunkDataset(src, fields=...)`` opens. It pickles as its location and options; each process
opens its own reader on first use (:class:`~chunkio.util.handles.PerProcessHandle`).

Reads are meant to follow the source's order: ``read_block(start, stop)`` decodes each chunk
of ``[start, stop)`` once, whole chunks straight into the block. Blocks aligned to
:attr:`StoreSource.read_chunk` (the chunks of the field that costs most to read) decode no
chunk twice; the others' chunks are decoded at most once per block they touch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import ReaderOptions
from ..backends.base import read_all
from ..collection.files import FilePart, is_file_list, open_files
from ..errors import FormatError, SourceError
from ..format.foreign import FieldSelection
from ..format.layout import DatasetLayout, FieldInfo
from ..format.sparse import SparseInfo, with_sparse_batches
from ..format.store_layout import LayoutOptions, open_layout
from ..read import ReadCore
from ..util.handles import PerProcessHandle
from ..util.numeric import IntArray
from .durability.staging import is_local
from .engine.kinds import write_kind
from .engine.sparse import SparseRows

__all__ = ["StoreSource", "check_apart"]


class _Cores:
    """This process's read cores, one per file, opened on their first read."""

    def __init__(self, parts: Sequence[FilePart]) -> None:
        self.pid = os.getpid()
        self.parts = parts
        self.open: dict[int, ReadCore] = {}

    def core(self, k: int) -> ReadCore:
        found = self.open.get(k)
        if found is None:
            part = self.parts[k]
            found = self.open[k] = ReadCore(part.location, part.layout, reader=part.options)
        return found

    def close(self) -> None:
        for core in self.open.values():
            core.close()
        self.open.clear()


class StoreSource(PerProcessHandle[_Cores]):
    """The arrays ``fields`` names in the store at ``location`` (or in each of a list of
    stores, end to end), as a block source.

    Validated when made, in the calling process (missing arrays, unequal lengths, dtypes
    chunkio cannot store, untrusted codecs, files whose fields differ: typed errors naming the
    store and the array). ``fields`` of the result are plain fields named as ``fields`` names
    them; a sparse matrix stays sparse (its rows read as CSR, stored as a sparse field); a
    categorical column keeps its categories (across files: their union, each file's codes
    remapped to it, as ``ChunkDataset`` of the files reads them).
    """

    def __init__(
        self,
        location: Any,
        fields: FieldSelection,
        *,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
    ) -> None:
        options = ReaderOptions(
            storage_options=dict(storage_options) if storage_options else None,
            trust_codecs=bool(trust_codecs),
        )
        if is_file_list(location):
            self.location: Any = [_path(p) for p in location]
            files = open_files(self.location, fields, options)
            self.parts: tuple[FilePart, ...] = files.parts
            self.remaps: tuple[Mapping[str, IntArray], ...] = files.remaps
            for part in self.parts:
                if not part.layout.foreign:
                    raise _native(part.location)
            layout = files.layout
        else:
            self.location = _path(location)
            layout, part = _one_store(self.location, fields, options)
            self.parts, self.remaps = (part,), ({},)
        self.layout: DatasetLayout = layout
        stamps = [_part_stamp(p) for p in self.parts]
        joined = hashlib.sha256("|".join(stamps).encode()).hexdigest()
        self._stamp = stamps[0] if len(stamps) == 1 else joined
        # sparse matrices read as CSR rows, never densified
        self.parts = tuple(
            dataclasses.replace(p, layout=with_sparse_batches(p.layout, "csr")) for p in self.parts
        )
        self.num_samples = self.layout.num_samples
        self.fields: tuple[FieldInfo, ...] = tuple(_stored(f) for f in self.layout.fields)
        self._names = [f.name for f in self.fields]
        self._starts = np.array([p.start for p in self.parts] + [self.num_samples], np.int64)

    @property
    def read_chunk(self) -> int:
        """Samples per chunk of the field that costs most to read: blocks aligned to it
        decode each of its chunks once."""
        return self.layout.samples_per_chunk

    def _open_handle(self) -> _Cores:
        return _Cores(self.parts)

    def fingerprint(self) -> str:
        """The stores, the arrays (path, shape, dtype, chunks, codecs) and, for local files,
        their sizes and modification times. Chunk contents are not hashed (a store may hold
        terabytes): resuming assumes a Zarr store whose metadata is unchanged is unchanged."""
        return self._stamp

    def ragged_shapes(self, name: str) -> npt.NDArray[np.int64]:
        """Stored values per row (N x 1) of sparse field ``name``: where its rows go."""
        counts = []
        for part in self.parts:
            reader = part.options.open(part.location)
            try:
                info = part.layout.field(name, where=part.location)
                if not isinstance(info, SparseInfo):
                    raise SourceError(f"{part.location}: field {name!r} is not a sparse field")
                counts.append(np.diff(read_all(reader, info.roles.offsets).astype(np.int64)))
            finally:
                reader.close()
        return np.concatenate(counts).astype(np.int64).reshape(-1, 1)

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        """Samples ``[start, stop)`` of every field, in source order."""
        return self._read(np.arange(start, stop, dtype=np.int64), once=True)

    def read_rows(self, indices: npt.NDArray[np.int64]) -> dict[str, Any]:
        """Samples ``indices`` (any order), in that order (each chunk decoded once per call)."""
        idx = np.asarray(indices, dtype=np.int64)
        order = np.argsort(idx, kind="stable")
        got = self._read(idx[order], once=False)
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        return {n: v.take(back) if isinstance(v, SparseRows) else v[back] for n, v in got.items()}

    def _read(self, idx: npt.NDArray[np.int64], *, once: bool) -> dict[str, Any]:
        """Rows ``idx`` (increasing): each file's part read by its core, end to end."""
        try:
            cores = self._handle()
            part_of = np.searchsorted(self._starts, idx, side="right") - 1
            pieces: list[tuple[int, dict[str, Any]]] = []
            for k in np.unique(part_of).tolist():
                local = idx[part_of == k] - self._starts[k]
                pieces.append((k, cores.core(k).read(self._names, local, once=once)))
            return {f.name: self._joined(f, pieces) for f in self.fields}
        except SourceError:
            raise
        except Exception as err:
            where = f"samples {idx[0]}..{idx[-1]}" if len(idx) else "no samples"
            raise SourceError(
                f"{self.location}: reading {where} failed: {type(err).__name__}: {err}"
            ) from err

    def _joined(self, f: FieldInfo, pieces: list[tuple[int, dict[str, Any]]]) -> Any:
        parts = [_remapped(self.remaps[k], f.name, got[f.name]) for k, got in pieces]
        return write_kind(f).joined(f, parts)


def _remapped(remaps: Mapping[str, IntArray], name: str, values: Any) -> Any:
    """A file's categorical codes in the dataset's categories (see
    :class:`chunkio.collection.files.FileSet`)."""
    table = remaps.get(name)
    return values if table is None else table[np.asarray(values, dtype=np.int64) + 1]


def _stored(f: FieldInfo) -> FieldInfo:
    """How field ``f`` of the source is stored: sparse as the native sparse kind (sized by its
    stored values), categoricals with their categories, the rest plain."""
    if isinstance(f, SparseInfo):
        return dataclasses.replace(f, group="", array=None, batches="dense")
    return FieldInfo(f.name, f.dtype, f.sample_shape, categories=f.categories)


def _path(location: Any) -> Any:
    return os.fspath(location) if isinstance(location, os.PathLike) else location


def _native(where: str) -> FormatError:
    return FormatError(
        f"{where}: already a chunkio dataset; read it with "
        "ChunkDataset, or rewrite it with write_arrays (chunkio.convert)"
    )


def _one_store(
    location: Any, fields: FieldSelection, options: ReaderOptions
) -> tuple[DatasetLayout, FilePart]:
    """The layout of one store, and how each process opens it."""
    reader = options.open(location)
    try:
        # not strict: a chunkio dataset, complete or not, is refused by the message below
        found = open_layout(reader, fields, LayoutOptions(strict=False))
        if found.native:
            raise _native(reader.location)
        layout = found.dataset_layout()
    finally:
        reader.close()
    # never-written chunks of a foreign store hold its fill value
    return layout, FilePart(location, found.reader_options(options), layout, 0)


def _part_stamp(part: FilePart) -> str:
    reader = part.options.open(part.location)
    try:
        return _stamp(part.location, reader, part.layout)
    finally:
        reader.close()


def _stamp(location: Any, reader: Any, layout: DatasetLayout) -> str:
    path = is_local(location)
    # a local store by its real path: a rerun from another folder, through a symlink or with
    # an absolute path is the same conversion
    root = None if path is None else os.path.realpath(path)
    parts = [repr(location if root is None else root)]
    for f in layout.fields:
        info = reader.array_info(f.roles.data)
        parts.append(repr((f.name, f.array, info.shape, info.dtype.str, info.chunks, info.codecs)))
    if root is not None:
        # An HDF5 file: its size and mtime; a Zarr directory: those of its metadata files.
        files = [root] if os.path.isfile(root) else _metadata_files(root, layout)
        for name in files:
            where = os.path.relpath(name, root)
            try:
                st = os.stat(name)
                parts.append(repr((where, st.st_size, st.st_mtime_ns)))
            except OSError:
                parts.append(repr((where, None)))
    return hashlib.sha256("|".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _metadata_files(root: str, layout: DatasetLayout) -> list[str]:
    out = []
    for f in layout.fields:
        folder = os.path.join(root, *(f.array or f.name).split("/"))
        out += [os.path.join(folder, n) for n in ("zarr.json", ".zarray", ".zattrs")]
    return out


def check_apart(src: Any, dst: Any) -> None:
    """Refuse a destination that is the source, or inside it, or that holds it: a
    conversion never writes to (or replaces) the store it reads.

    >>> check_apart("/data/a.h5", "/data/b.zarr")
    >>> check_apart("/data/a.zarr", "/data/a.zarr/out.zarr")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chunkio.errors.SourceError: /data/a.zarr/out.zarr is inside the source /data/a.zarr; ...
    """
    a, b = is_local(src), is_local(dst)
    if a is None or b is None:
        if isinstance(src, str) and isinstance(dst, str) and src.rstrip("/") == dst.rstrip("/"):
            raise SourceError(f"{dst} is the source; choose another destination")
        return
    a, b = os.path.realpath(a), os.path.realpath(b)
    tell = "a conversion never writes into the store it reads: choose another destination"
    if a == b:
        raise SourceError(f"{dst} is the source itself; {tell}")
    if b.startswith(a.rstrip(os.sep) + os.sep):
        raise SourceError(f"{dst} is inside the source {src}; {tell}")
    if a.startswith(b.rstrip(os.sep) + os.sep):
        raise SourceError(f"{dst} holds the source {src}; {tell}")
