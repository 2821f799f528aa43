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

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import ReaderOptions
from ..errors import FormatError, SourceError
from ..format.foreign import FieldSelection
from ..format.layout import DatasetLayout, FieldInfo
from ..format.store_layout import LayoutOptions, open_layout
from ..read import ReadCore
from ..util.handles import PerProcessHandle
from .durability.staging import is_local

__all__ = ["StoreSource", "check_apart"]


class StoreSource(PerProcessHandle[ReadCore]):
    """The arrays ``fields`` names in the store at ``location``, as a block source.

    Validated when made, in the calling process (missing arrays, unequal lengths, dtypes
    chunkio cannot store, untrusted codecs: typed errors naming the store and the array).
    ``fields`` of the result are plain fields named as ``fields`` names them.
    """

    def __init__(
        self,
        location: Any,
        fields: FieldSelection,
        *,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
    ) -> None:
        self.location = os.fspath(location) if isinstance(location, os.PathLike) else location
        options = ReaderOptions(
            storage_options=dict(storage_options) if storage_options else None,
            trust_codecs=bool(trust_codecs),
        )
        reader = options.open(self.location)
        try:
            # not strict: a chunkio dataset, complete or not, is refused by the message below
            found = open_layout(reader, fields, LayoutOptions(strict=False))
            if found.native:
                raise FormatError(
                    f"{reader.location}: already a chunkio dataset; read it with "
                    "ChunkDataset, or rewrite it with write_arrays (chunkio.convert)"
                )
            self.layout: DatasetLayout = found.dataset_layout()
            self._stamp = _stamp(self.location, reader, self.layout)
        finally:
            reader.close()
        # never-written chunks of a foreign store hold its fill value
        self.options = found.reader_options(options)
        self.num_samples = self.layout.num_samples
        self.fields: tuple[FieldInfo, ...] = tuple(
            FieldInfo(f.name, f.dtype, f.sample_shape) for f in self.layout.fields
        )
        self._names = [f.name for f in self.fields]

    @property
    def read_chunk(self) -> int:
        """Samples per chunk of the field that costs most to read: blocks aligned to it
        decode each of its chunks once."""
        return self.layout.samples_per_chunk

    def _open_handle(self) -> ReadCore:
        return ReadCore(self.location, self.layout, reader=self.options)

    def fingerprint(self) -> str:
        """The store, the arrays (path, shape, dtype, chunks, codecs) and, for local files,
        their sizes and modification times. Chunk contents are not hashed (a store may hold
        terabytes): resuming assumes a Zarr store whose metadata is unchanged is unchanged."""
        return self._stamp

    def read_block(self, start: int, stop: int) -> dict[str, npt.NDArray[Any]]:
        """Samples ``[start, stop)`` of every field, in source order."""
        return self._read(np.arange(start, stop, dtype=np.int64), once=True)

    def read_rows(self, indices: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[Any]]:
        """Samples ``indices`` (any order), in that order (each chunk decoded once per call)."""
        return self._read(np.asarray(indices, dtype=np.int64), once=False)

    def _read(self, idx: npt.NDArray[np.int64], *, once: bool) -> dict[str, npt.NDArray[Any]]:
        try:
            return dict(self._handle().read(self._names, idx, once=once))
        except SourceError:
            raise
        except Exception as err:
            where = f"samples {idx[0]}..{idx[-1]}" if len(idx) else "no samples"
            raise SourceError(
                f"{self.location}: reading {where} failed: {type(err).__name__}: {err}"
            ) from err


def _stamp(location: Any, reader: Any, layout: DatasetLayout) -> str:
    path = is_local(location)
    # a local store by its real path: a rerun from another folder, through a symlink or with
    # an absolute path is the same conversion
    root = None if path is None else os.path.realpath(path)
    parts = [repr(location if root is None else root)]
    for f in layout.fields:
        info = reader.array_info(f.array_names()[0])
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
