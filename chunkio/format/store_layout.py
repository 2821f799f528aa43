"""What a store holds, decided in one place: :func:`open_layout`.

A store is *native* (written by chunkio: a ``chunkio`` root attribute,
:mod:`chunkio.format.layout`) or *foreign* (a user's own HDF5 file or Zarr store, read in
place: ``fields`` names its arrays, :mod:`chunkio.format.foreign`). Every dataset, converter
and report asks :func:`open_layout`, and reads the answer (a :class:`StoreLayout`) instead of
deciding again; the kind of each field (dense, ragged, encoded, a volume's image or label) is
decided here too, so a new kind of field or of foreign layout is one more branch of this
module, not of every caller. Fields with steps (:class:`chunkio.Field`) or ``anchors`` make
window fields over either kind of store: the spec and its rules are
:mod:`chunkio.format.windows`'s, opening it on a store (the arrays' descriptions, a valid-mask
read by path, the rows per chunk that order reads) is :func:`open_windows`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import ArrayInfo, Reader, ReaderOptions
from ..errors import ChunkioError, FormatError, WindowError
from .cf import decode_layout
from .foreign import (
    FieldSelection,
    _array_info,
    batchable,
    field_arrays,
    foreign_fields,
    foreign_volumes,
    layout_of,
    order_field,
)
from .grid import SampleGrid
from .layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, check_arrays
from .sparse import native_sparse
from .volume_layout import VolumeSet
from .windows import (
    Anchors,
    Field,
    WindowInfo,
    WindowSet,
    _short,
    anchor_groups,
    is_windowed,
    valid_anchors,
    window_fields,
)

__all__ = ["DEFAULT_PRELOAD_BYTES", "LayoutOptions", "StoreLayout", "open_layout", "open_windows"]

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


def open_windows(
    reader: Reader,
    native: DatasetLayout | None,
    fields: Sequence[Field],
    anchors: Anchors,
    *,
    preload_bytes: int = 0,
) -> WindowSet:
    """The windows of ``fields`` in the store ``reader`` has open: a chunkio dataset's
    (``native``, its layout: paths name its dense fields) or a store chunkio did not write
    (``native=None``: paths name arrays)."""
    where = reader.location
    infos: dict[str, tuple[str, tuple[int, ...], np.dtype[Any], int]] = {}
    for f in fields:
        for path in f.paths:
            if path not in infos:
                infos[path] = _describe(reader, native, path, f)
    lengths = {p: shape[0] for p, (_, shape, _, _) in infos.items()}
    if len(set(lengths.values())) != 1:
        raise WindowError(
            f"{where}: the arrays of windows need one length along axis 0; got {lengths}"
        )
    num_rows = next(iter(lengths.values()))
    made = tuple(_window_info(f, infos, where) for f in fields)
    valid = _mask(reader, native, anchors.valid, where)
    rows = valid_anchors(num_rows, fields, anchors, valid, where)
    spc = _order_rows(reader, native, infos, preload_bytes, num_rows)
    layout = DatasetLayout(
        num_samples=num_rows,
        samples_per_chunk=spc,
        fields=made,
        class_names=None if native is None else native.class_names,
        foreign=native is None,
    )
    lo = min(min(f.offsets) for f in fields)
    hi = max(max(f.offsets) for f in fields)
    sizes, edge = anchor_groups(rows, spc, lo, hi)
    row = sum(
        int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        for _, shape, dtype, _ in infos.values()
    )
    return WindowSet(
        layout=layout, anchors=rows, group_sizes=sizes, edge_chunks=edge, row_nbytes=row
    )


def _describe(
    reader: Reader, native: DatasetLayout | None, path: str, f: Field
) -> tuple[str, tuple[int, ...], np.dtype[Any], int]:
    """``(array name, shape, dtype, rows per chunk)`` of ``path``."""
    where = reader.location
    if native is not None:
        info = native.field(path, where=where)
        if not info.kind_def.window_source or info.sample_shape is None:
            raise WindowError(
                f"{where}: field {f.name!r}: windows read dense fields; {path!r} is {info.kind}"
            )
        shape = (native.num_samples, *info.sample_shape)
        return info.roles.values, shape, info.dtype, native.rows_per_chunk(info)
    found = _array_info(reader, path)
    dtype = np.dtype(found.dtype)
    if not batchable(dtype) or not found.shape:
        raise FormatError(
            f"{where}: field {f.name!r}: array {path!r} {tuple(found.shape)} {dtype} cannot be "
            "read as steps (numeric or boolean arrays with a step axis 0)"
        )
    shape = tuple(int(n) for n in found.shape)
    return found.name, shape, dtype, max(1, int(found.chunks[0]))


def _window_info(
    f: Field, infos: Mapping[str, tuple[str, tuple[int, ...], np.dtype[Any], int]], where: str
) -> WindowInfo:
    found = {p: (infos[p][1][1:], infos[p][2]) for p in f.paths}
    if len(set(found.values())) != 1:
        described = {p: f"{shape} {dtype}" for p, (shape, dtype) in found.items()}
        raise WindowError(
            f"{where}: field {f.name!r} stacks variables of different shapes or dtypes "
            f"(per step): {described}"
        )
    shape, dtype = next(iter(found.values()))
    sample = (
        *((len(f.offsets),) if f.steps is not None else ()),
        *((len(f.paths),) if f.stacked else ()),
        *shape,
    )
    return WindowInfo(
        f.name,
        dtype,
        tuple(sample),
        kind="window",
        arrays=tuple(infos[p][0] for p in f.paths),
        steps=f.offsets,
        rows=tuple(infos[p][3] for p in f.paths),
        stepped=f.steps is not None,
        stacked=f.stacked,
    )


def _mask(
    reader: Reader, native: DatasetLayout | None, valid: Any, where: str
) -> npt.NDArray[np.bool_] | None:
    if valid is None:
        return None
    if isinstance(valid, str):
        if native is not None:
            name = native.field(valid, where=where).roles.values
        else:
            name = _array_info(reader, valid).name
        arr = _read_whole(reader, name)
    else:
        arr = np.asarray(valid)
    if arr.dtype != np.bool_:
        raise WindowError(
            f"{where}: the valid-mask {_short(valid) if not isinstance(valid, str) else valid!r} "
            f"must be boolean; got {arr.dtype}"
        )
    return arr


def _read_whole(reader: Reader, name: str) -> npt.NDArray[Any]:
    """Array ``name`` (a valid-mask: one bool per step), read chunk by chunk."""
    info = reader.array_info(name)
    grid = SampleGrid(int(info.shape[0]), int(info.chunks[0]) if info.chunks else 1)
    out = np.empty(info.shape, dtype=info.dtype)
    if grid.num_chunks:
        reader.read_into(name, [grid.bounds(c) for c in range(grid.num_chunks)], out)
    return out


def _order_rows(
    reader: Reader,
    native: DatasetLayout | None,
    infos: Mapping[str, tuple[str, tuple[int, ...], np.dtype[Any], int]],
    preload_bytes: int,
    num_rows: int,
) -> int:
    """Rows per chunk of the array whose chunks order reads (as for a store's fields)."""
    if native is not None:
        return native.samples_per_chunk
    described = {p: reader.array_info(p) for p in infos}
    chosen = order_field(described, preload_bytes=preload_bytes)
    return max(1, min(infos[chosen][3], max(1, num_rows)))
