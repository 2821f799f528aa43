"""The stores of a :class:`~chunkio.patches.PatchDataset`, described once in the parent.

Each store is a chunkio volume dataset, a user's own HDF5 file or Zarr store (``fields``
names its arrays) or an OME-Zarr image (:mod:`chunkio.patches.ome_zarr`). Several stores are
one dataset: their volumes end to end (:func:`combine`), each store read by its own
:class:`~chunkio.read.ReadCore` in each process (:class:`StoreCores`), through the same plan
-> read -> scatter path as one store.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import Reader, ReaderOptions
from ..errors import FormatError, MissingFieldError
from ..format.foreign import FieldSelection
from ..format.label_index import LabelIndex
from ..format.layout import ATTR_KEY, DatasetLayout
from ..format.store_layout import LayoutOptions, open_layout
from ..format.volume_layout import VOLUMES_KEY, VolumeSet
from ..read import ReadCore, ReadStats, read_whole
from .label_reads import index_labels_by_slabs
from .masks import PatchMask, VolumeMask, mask_by_shape
from .named_axes import NamedAxes, axes_volumes
from .ome_reads import ome_label_index, ome_mask
from .ome_zarr import OmeVolumes, is_ome_zarr, label_names, ome_volumes

__all__ = ["PatchStore", "StoreCores", "StoreRequest", "combine", "open_store"]


@dataclass(frozen=True)
class StoreRequest:
    """What the dataset asks of every store: ``spatial`` axes, ``fields`` (a foreign store's
    arrays) and their ``axes``, for OME-Zarr the ``scale`` level and the ``label`` image
    (``None``: the first the store lists; ``False``: none), and the ``mask`` (a name in the
    store, or an array placed by its shape)."""

    spatial: int
    fields: FieldSelection | None = None
    scale: int = 0
    label: str | bool | None = None
    mask: Any = None
    axes: NamedAxes | None = None


@dataclass(frozen=True, eq=False)
class PatchStore:
    """One store: where it is, how each process opens it, its fields and volumes."""

    location: Any
    reader_options: ReaderOptions
    layout: DatasetLayout
    volumes: VolumeSet
    native: bool = False
    ome: OmeVolumes | None = None
    label_index: LabelIndex | None = None
    mask: tuple[VolumeMask, ...] | None = None


def open_store(location: Any, options: ReaderOptions, request: StoreRequest) -> PatchStore:
    """Read the metadata of the store at ``location`` (and close it again)."""
    # chunks an OME-Zarr writer skipped (equal to the fill value) read as it, in the mask too;
    # chunkio's own stores are not read here beyond their metadata
    reader = dataclasses.replace(options, fill_missing=True).open(location)
    try:
        attrs = reader.attrs()
        kinds = as_kinds(request.fields)
        if (request.fields is None or kinds is not None) and is_ome_zarr(attrs):
            label = False if kinds == ("image",) else request.label
            if label is None:  # the first label image the store lists, when it has one
                label = next(iter(label_names(reader)), None)
            found = ome_volumes(
                reader,
                request.spatial,
                scale=request.scale,
                label=None if label is False else label,  # type: ignore[arg-type]
            )
            _same_axes(found, request.axes)
            mask = (
                ome_mask(reader, found, request.mask)
                if isinstance(request.mask, str)
                else _array_mask(location, request.mask, found.volumes)
            )
            # chunkio writes every chunk of its own OME-Zarr images (attribute "chunkio"): a
            # missing one there is lost data, an error; other writers skip fill-value chunks
            written_by_chunkio = isinstance(attrs, Mapping) and isinstance(
                attrs.get(ATTR_KEY), Mapping
            )
            return PatchStore(
                location,
                dataclasses.replace(options, fill_missing=not written_by_chunkio),
                found.layout,
                found.volumes,
                ome=found,
                mask=mask,
            )
        _ome_only(location, request)
        if request.axes is not None:
            return _named(reader, location, options, request, request.axes)
        layout_found = open_layout(reader, request.fields, LayoutOptions(spatial=request.spatial))
        layout, volumes = layout_found.dataset_layout(), layout_found.volumes
        if volumes is None:  # open_layout describes volumes when spatial is asked for
            raise FormatError(f"{location}: no volumes of {request.spatial} axes")
        return PatchStore(
            location,
            layout_found.reader_options(options),
            layout,
            volumes,
            native=layout_found.native,
            mask=_store_mask(reader, request.mask, volumes),
        )
    finally:
        reader.close()


def _named(
    reader: Reader, location: Any, options: ReaderOptions, request: StoreRequest, axes: NamedAxes
) -> PatchStore:
    """A user's image array read by the ``axes`` the request names."""
    attrs = reader.attrs()
    if isinstance(attrs, Mapping) and isinstance(attrs.get(ATTR_KEY), Mapping):
        raise FormatError(
            f"{location}: axes={axes.names!r} names the axes of a store chunkio did not "
            "write; this is a chunkio dataset, which describes its own volumes"
        )
    layout, volumes = axes_volumes(reader, request.fields, axes, request.spatial)
    return PatchStore(
        location,
        dataclasses.replace(options, fill_missing=True),  # a foreign store's skipped chunks
        layout,
        volumes,
        mask=_store_mask(reader, request.mask, volumes),
    )


def _same_axes(found: OmeVolumes, axes: NamedAxes | None) -> None:
    """An OME-Zarr image names its own axes: ``axes``, if given, must be those."""
    names = "".join(a.name for a in found.image.axes)
    if axes is not None and axes.names != names.lower():
        raise FormatError(
            f"{found.image.location}: {found.image.key}.axes: expected axes={axes.names!r} "
            f"as given; the image's are {names!r} (an OME-Zarr image needs no axes)"
        )


def _store_mask(reader: Reader, mask: Any, volumes: VolumeSet) -> tuple[VolumeMask, ...] | None:
    """The mask of a store without OME-Zarr metadata: an array of the store (by name) or in
    memory, covering each volume whole (:func:`~chunkio.patches.masks.mask_by_shape`)."""
    if not isinstance(mask, str):
        return _array_mask(reader.location, mask, volumes)
    try:
        values = read_whole(reader, mask.strip("/"))
    except MissingFieldError as err:
        raise FormatError(
            f"{reader.location}: mask {mask!r}: expected an array of the store; nothing there "
            f"(arrays: {reader.array_names()})"
        ) from err
    return mask_by_shape(values, volumes.shapes, reader.location, mask)


def _array_mask(location: Any, mask: Any, volumes: VolumeSet) -> tuple[VolumeMask, ...] | None:
    return None if mask is None else mask_by_shape(mask, volumes.shapes, str(location), "array")


def as_kinds(fields: FieldSelection | None) -> tuple[str, ...] | None:
    """``fields`` as kinds to read (``"image"`` and/or ``"label"``), or ``None`` when it is
    not such a list (a foreign store's arrays, or nothing)."""
    if fields is None or isinstance(fields, Mapping | str):
        return None
    names = tuple(str(f) for f in fields)
    return names if names and set(names) <= {"image", "label"} else None


def _ome_only(location: Any, request: StoreRequest) -> None:
    asked = {
        k: v for k, v in (("scale", request.scale), ("label", request.label)) if v not in (None, 0)
    }
    if asked:
        raise FormatError(
            f"{location}: {', '.join(asked)} apply to OME-Zarr stores (a 'multiscales' "
            f"attribute); this store has none; got {asked}"
        )


def with_label_index(store: PatchStore) -> PatchStore:
    """``store`` with its label index: stored (chunkio's own datasets) or made by reading
    each label volume once (nothing is written)."""
    if store.volumes.label is None:
        return store
    reader = store.reader_options.open(store.location)
    try:
        index: LabelIndex | None
        if store.ome is not None:
            index = ome_label_index(reader, store.ome)
        elif store.native:
            index = read_label_index(reader, store.layout.extra[VOLUMES_KEY].get("label_index"))
        else:
            label = store.layout.field("label")
            index = index_labels_by_slabs(reader, store.volumes, label.roles.values, label.dtype)
    finally:
        reader.close()
    return dataclasses.replace(store, label_index=index)


def read_label_index(reader: Any, meta: Any) -> LabelIndex | None:
    """Read the index described by ``extra["volumes"]["label_index"]`` (None if absent)."""
    if not meta:
        return None
    arrays = []
    for key in ("rows", "points"):
        name = str(meta.get(key))
        if name not in reader.array_names():
            raise FormatError(f"{reader.location}: label index array {name!r} is missing")
        arrays.append(read_whole(reader, name).astype(np.int64, copy=False))
    return LabelIndex(arrays[0], arrays[1])


def combine(
    stores: Sequence[PatchStore],
) -> tuple[VolumeSet, LabelIndex | None, PatchMask | None]:
    """The volumes of every store end to end (the samplers' view: chunk-grouped orders
    follow the first store's chunks), their label indexes and masks likewise."""
    first = stores[0]
    if len(stores) == 1:
        mask = None if first.mask is None else PatchMask(first.mask)
        return first.volumes, first.label_index, mask
    channels = {s.volumes.channels for s in stores}
    if len(channels) != 1:
        found = {str(s.location): s.volumes.channels for s in stores}
        raise FormatError(f"the stores must have the same channels to make one batch; got {found}")
    shapes = tuple(shape for s in stores for shape in s.volumes.shapes)
    labelled = all(s.volumes.label is not None for s in stores)
    volumes = VolumeSet(
        shapes=shapes,
        chunks=first.volumes.chunks,
        stacked=len(set(shapes)) == 1,
        channels=first.volumes.channels,
        label="label" if labelled else None,
    )
    index: LabelIndex | None = None
    parts, offset = [], 0
    for s in stores:
        if s.label_index is None or not labelled:
            break
        rows = s.label_index.rows.copy()
        rows[:, 0] += offset  # volume numbers of the whole dataset
        parts.append((rows, s.label_index.points))
        offset += s.volumes.count
    else:
        index = LabelIndex.concat(parts, volumes.ndim)
    mask = None
    if any(s.mask is not None for s in stores):
        missing = [str(s.location) for s in stores if s.mask is None]
        if missing:
            raise FormatError(f"the mask is missing from stores {missing}")
        mask = PatchMask(tuple(m for s in stores for m in s.mask or ()))
    return volumes, index, mask


class StoreCores:
    """This process's read cores, one per store, each opened on its first read."""

    def __init__(self, stores: Sequence[PatchStore], cache_bytes: int) -> None:
        self.pid = os.getpid()
        self.stores, self.cache_bytes = stores, cache_bytes
        self.cores: list[ReadCore | None] = [None] * len(stores)

    def core(self, i: int) -> ReadCore:
        found = self.cores[i]
        if found is None:
            s = self.stores[i]
            # the stores share the process's cache_bytes: memory does not grow with them
            share = self.cache_bytes // len(self.stores)
            found = self.cores[i] = ReadCore(
                s.location, s.layout, cache_bytes=share, reader=s.reader_options
            )
        return found

    @property
    def stats(self) -> ReadStats:
        """The counters of every store's reads, added up."""
        opened = [c.stats for c in self.cores if c is not None]
        if len(opened) == 1:
            return opened[0]
        total = ReadStats()
        for st in opened:
            for f in dataclasses.fields(ReadStats):
                value = getattr(st, f.name)
                if isinstance(value, int | float):
                    setattr(total, f.name, getattr(total, f.name) + value)
            for k, n in st.per_field.items():
                total.per_field[k] = total.per_field.get(k, 0) + n
            for stage in ("read", "checksum", "decode"):
                setattr(total.clock, stage, getattr(total.clock, stage) + getattr(st.clock, stage))
        return total

    def close(self) -> None:
        for c in self.cores:
            if c is not None:
                c.close()
        self.cores = [None] * len(self.stores)
