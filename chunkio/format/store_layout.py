"""What a store holds, decided in one place: :func:`open_layout`.

A store is *native* (written by chunkio: a ``chunkio`` root attribute,
:mod:`chunkio.format.layout`) or *foreign* (a user's own HDF5 file or Zarr store, read in
place: ``fields`` names its arrays, :mod:`chunkio.format.foreign`). Every dataset, converter
and report asks :func:`open_layout`, and reads the answer (a :class:`StoreLayout`) instead of
deciding again; the kind of each field (dense, ragged, encoded, a volume's image or label) is
decided here too, so a new kind of field or of foreign layout is one more branch of this
module, not of every caller. Fields with steps (:class:`chunkio.Field`) or ``anchors`` make
window fields over either kind of store (:mod:`chunkio.format.windows`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends import ArrayInfo, Reader, ReaderOptions
from ..errors import ChunkioError, FormatError
from .cf import decode_layout
from .foreign import FieldSelection, field_arrays, foreign_fields, foreign_volumes, layout_of
from .layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, check_arrays
from .sparse import native_sparse
from .volume_layout import VolumeSet
from .windows import Anchors, WindowSet, is_windowed, open_windows, window_fields

__all__ = ["DEFAULT_PRELOAD_BYTES", "LayoutOptions", "StoreLayout", "open_layout"]

#: what h5py and zarr-python raise on bytes they cannot parse (h5py maps HDF5's errors to
#: these; a chunkio error, a missing file and a refused permission pass through as they are)
_LIBRARY_ERRORS = (OSError, RuntimeError, KeyError)

#: fields whose whole array is at most this large (labels, ids) are read once per process
DEFAULT_PRELOAD_BYTES = 16 * 2**20


@dataclass(frozen=True)
class LayoutOptions:
    """How :func:`open_layout` reads a store.

    ``preload_bytes``: arrays of a foreign store this small are read whole once per process, so
    their chunks do not order reads (a dataset's ``preload_bytes``).
    ``spatial``: read volumes of that many spatial axes (a patch size's length): a native store
    must then be a volume dataset, a foreign one's arrays are read as volumes
    (:func:`chunkio.format.foreign.foreign_volumes`).
    ``strict=False`` describes what is there instead of refusing it (reports, and a converter
    that refuses chunkio datasets anyway): a native store's attributes are parsed without the
    completion marker and its arrays are not checked (an attribute that does not parse is kept
    in :attr:`StoreLayout.error`); a foreign store without ``fields`` has no layout.
    """

    preload_bytes: int = 0
    spatial: int | None = None
    strict: bool = True
    #: windows: which anchors to sample (a range, an index array or an :class:`Anchors`)
    anchors: Any = None
    #: CF-encoded arrays are decoded on read (:mod:`chunkio.format.cf`)
    decode_cf: bool = False


@dataclass(frozen=True)
class StoreLayout:
    """A store as :func:`open_layout` found it.

    ``layout``: the fields a dataset reads (``None``: a foreign store whose arrays were not
    named, or native attributes that did not parse, see ``error``; only when not strict).
    ``arrays``: a foreign store's named arrays by field (empty for a native store).
    ``volumes``: the volumes, when asked for (``LayoutOptions.spatial``).
    """

    location: str
    attrs: Mapping[str, Any]
    native: bool
    layout: DatasetLayout | None
    arrays: Mapping[str, ArrayInfo] = field(default_factory=dict)
    volumes: VolumeSet | None = None
    error: FormatError | None = None
    #: fields with steps: the window fields' anchors and order (:mod:`chunkio.format.windows`)
    windows: WindowSet | None = None

    @property
    def foreign(self) -> bool:
        """A store chunkio did not write, read in place."""
        return not self.native

    @property
    def complete(self) -> bool:
        """A native store's conversion finished (its completion marker is set)."""
        return self.native and self.attrs.get(COMPLETE_KEY) is True

    def reader_options(self, options: ReaderOptions) -> ReaderOptions:
        """``options`` as every reader of this store opens it: chunks a foreign store never
        wrote read as its fill value (Zarr's and HDF5's contract; xarray and zarr skip chunks
        equal to the fill value), chunkio's own missing chunks are errors."""
        return dataclasses.replace(options, fill_missing=self.foreign)

    def dataset_layout(self) -> DatasetLayout:
        """:attr:`layout`, which a reader of samples needs: else the error that left it out."""
        if self.layout is None:
            raise self.error or FormatError(
                f"{self.location}: not a chunkio dataset, so fields must name its arrays"
            )
        return self.layout


def _is_native(attrs: Mapping[str, Any]) -> bool:
    """Whether a store's root attributes declare a chunkio dataset."""
    return ATTR_KEY in attrs


def open_layout(
    reader: Reader,
    fields: FieldSelection | None = None,
    options: LayoutOptions = LayoutOptions(),
) -> StoreLayout:
    """The layout of the store ``reader`` has open: native or foreign, decided here once.

    ``fields``: for a foreign store, the arrays to read (see :mod:`chunkio.format.foreign`); a
    native store describes its own fields (a dataset selects among them).

    Examples
    --------
    >>> import numpy as np
    >>> from chunkio import write_arrays
    >>> from chunkio.backends import open_reader
    >>> _ = write_arrays("memory://layout-doc", {"x": np.zeros((6, 2), "u1")}, shuffle=False)
    >>> reader = open_reader("memory://layout-doc")
    >>> found = open_layout(reader)
    >>> found.native, found.layout.field_names, found.layout.num_samples
    (True, ('x',), 6)
    >>> reader.close()

    A file its library cannot parse while the layout is read (h5py's ``OSError`` or
    ``RuntimeError`` on a damaged object header, zarr-python's on a damaged document) is a
    :class:`~chunkio.errors.FormatError` naming the store.
    """
    try:
        attrs = reader.attrs()
        if is_windowed(fields, options.anchors):
            found = _windows(reader, attrs, fields, options)
        elif _is_native(attrs):
            found = _native(reader, attrs, options)
        else:
            found = _foreign(reader, attrs, fields, options)
        return _cf_decoded(reader, found) if options.decode_cf else found
    except (ChunkioError, FileNotFoundError, PermissionError):
        raise
    except _LIBRARY_ERRORS as err:
        raise FormatError(
            f"{reader.location}: its layout cannot be read: the file is damaged or not one "
            f"its library reads ({type(err).__name__}: {err})"
        ) from err


def _cf_decoded(reader: Reader, found: StoreLayout) -> StoreLayout:
    """``found`` with its CF-encoded fields decoded on read (:mod:`chunkio.format.cf`)."""
    if found.layout is None:
        return found
    layout = decode_layout(reader, found.layout)
    windows = found.windows and dataclasses.replace(found.windows, layout=layout)
    return dataclasses.replace(found, layout=layout, windows=windows)


def _native(reader: Reader, attrs: Mapping[str, Any], options: LayoutOptions) -> StoreLayout:
    where = reader.location
    try:
        layout = DatasetLayout.from_attrs(attrs, where=where, require_complete=options.strict)
    except FormatError as err:
        if options.strict:
            raise
        return StoreLayout(where, attrs, native=True, layout=None, error=err)
    if options.strict:
        present = set(reader.array_names())
        arrays = {}
        for f in layout.fields:
            for name in f.array_names():
                if name in present:
                    info = reader.array_info(name)
                    arrays[name] = (info.shape, info.dtype, info.chunks)
        check_arrays(layout, arrays, where=where)
        layout = _native_sparse(reader, layout)
    volumes = None
    if options.spatial is not None:
        volumes = VolumeSet.from_extra(layout.extra, where=where)
    return StoreLayout(where, attrs, native=True, layout=layout, volumes=volumes)


def _native_sparse(reader: Reader, layout: DatasetLayout) -> DatasetLayout:
    """``layout`` with its sparse fields described from their arrays (checked already)."""
    if not any(f.kind_def.sized_by_arrays for f in layout.fields):
        return layout
    fields = tuple(
        native_sparse(reader, f, layout) if f.kind_def.sized_by_arrays else f for f in layout.fields
    )
    return dataclasses.replace(layout, fields=fields)


def _foreign(
    reader: Reader,
    attrs: Mapping[str, Any],
    fields: FieldSelection | None,
    options: LayoutOptions,
) -> StoreLayout:
    where = reader.location
    if fields is None and not options.strict:
        return StoreLayout(where, attrs, native=False, layout=None)
    if options.spatial is not None:
        layout, volumes = foreign_volumes(reader, fields, options.spatial)
        return StoreLayout(where, attrs, native=False, layout=layout, volumes=volumes)
    arrays, tables = foreign_fields(reader, fields)
    order = list(field_arrays(fields, where)) if fields is not None else []
    layout = layout_of(
        arrays, where, preload_bytes=options.preload_bytes, tables=tables, order=order
    )
    return StoreLayout(where, attrs, native=False, layout=layout, arrays=arrays)


def _windows(
    reader: Reader, attrs: Mapping[str, Any], fields: Any, options: LayoutOptions
) -> StoreLayout:
    """Window fields over a native or a foreign store: their layout and anchors."""
    where = reader.location
    native = None
    if _is_native(attrs):
        native = _native(reader, attrs, dataclasses.replace(options, anchors=None)).layout
    wanted = window_fields(fields, where)
    found = open_windows(
        reader, native, wanted, Anchors.of(options.anchors), preload_bytes=options.preload_bytes
    )
    return StoreLayout(where, attrs, native=native is not None, layout=found.layout, windows=found)
