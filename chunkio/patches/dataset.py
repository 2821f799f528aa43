"""PatchDataset: fixed-size patches of the volumes of a chunkio volume dataset.

Handles follow :class:`~chunkio.ChunkDataset`'s rules: ``__init__`` reads the metadata (and
the label index) and closes what it opened; each process opens its own handle on first read
(keyed by pid) and pickling drops it, so the dataset works in DataLoader workers under fork,
spawn and forkserver.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset, get_worker_info

from ..backends import ReaderOptions, detect_format
from ..errors import FormatError
from ..format.foreign import FieldSelection
from ..read import PadMode, ReadCore, ReadStats
from ..read.batch import SampleBatch, to_tensor
from ..read.planning import normalize_keys, plan_patch_reads
from ..util.handles import PerProcessHandle
from .balanced import LabelBalancedSampler
from .named_axes import NamedAxes
from .ome_reads import physical_origins
from .samplers import GridSampler, PatchSampler
from .stores import (
    PatchStore,
    StoreCores,
    StoreRequest,
    as_kinds,
    combine,
    open_store,
    read_label_index,
    with_label_index,
)

__all__ = ["PatchDataset", "read_label_index"]

KINDS = ("image", "label")
Units = Literal["voxels", "physical"]


class PatchDataset(PerProcessHandle[ReadCore | StoreCores], Dataset[Any]):
    """Patches of the volumes of a chunkio volume dataset (see :mod:`chunkio.format.volume_layout`),
    of volume arrays in a user's own HDF5 file or Zarr store, or of OME-Zarr images, read in
    place; several stores are one dataset.

    Items are addressed by *patch keys* ``(volume, *origin)``, which the bound ``sampler``
    yields; an item is ``{"image", "label" (when the dataset has labels), "volume",
    "origin"}`` of tensors, plus ``"spacing"`` and ``"origin_physical"`` for OME-Zarr stores.
    Use ``DataLoader(ds, sampler=ds.sampler, batch_size=...)``; ``__getitems__`` decodes each
    chunk a batch touches once, even when patches overlap.

    Parameters
    ----------
    path
        A volume dataset (``.zarr`` directory, ``.h5`` file, URL or store), an HDF5 file
        or Zarr store chunkio did not write (then ``fields`` names its arrays), an OME-Zarr
        image (NGFF 0.4 on Zarr v2, 0.5 on Zarr v3), or a list of them: their volumes end to
        end (volume numbers run on from store to store).
    patch_size
        Spatial size of a patch, one per spatial axis: voxels at the read scale, or physical
        units (OME-Zarr, ``units="physical"``: each size divided by the voxel spacing and
        rounded, at least one voxel; every store must come to the same voxels).
    sampler
        A :class:`~chunkio.patches.PatchSampler` (grid, random, label-balanced), bound here
        to the volumes; default: a non-overlapping :class:`~chunkio.patches.GridSampler`.
    fields
        ``"image"`` and/or ``"label"``; default: both when the dataset has labels. For a store
        chunkio did not write, the arrays, as for :class:`~chunkio.ChunkDataset`:
        ``{"image": "vol/image", "label": "vol/label"}`` (label optional) or a list of paths,
        image first. What a volume is follows from the number of spatial axes (``len(
        patch_size)``): an image array of that many axes is one volume; one more axis is a
        volume axis (axis 0, as the sample axis of ``ChunkDataset``): ``(N, D, H, W)`` holds
        ``N`` 3-D volumes; two more are volumes with channels, ``(N, C, D, H, W)``. A label
        array has the image's shape without channels. Nothing is written to the store: a
        :class:`~chunkio.patches.LabelBalancedSampler` gets its label index by reading each
        label volume once here. An OME-Zarr image needs no ``fields``: its axes say what
        each is (time points are volumes, channels the channel axis); a mapping of arrays
        reads it as a plain Zarr store.
    scale
        OME-Zarr: the scale level read (0: full resolution, as ``multiscales`` lists them).
    label
        OME-Zarr: the label image (``labels/<label>``) read as the label field, at the level
        of the image's scale; default: the first the store lists (none: no labels).
    mask
        A mask restricting where patches are centred (see :mod:`chunkio.patches.masks`), at
        any scale no finer than the image; nonzero voxels are inside. OME-Zarr: a label
        image (``"tissue"``, at its coarsest level), a level's array (``"labels/tissue/s2"``)
        or a plain array of the store (``"masks/tissue"``, placed by its shape). Any store:
        a NumPy array (e.g. a tissue mask at 1/32 of a slide), or the name of an array of a
        store without OME-Zarr metadata, covering each volume whole (placed by the ratio of
        the shapes). A mask is read whole: give it at a coarse scale.
    axes
        A store chunkio did not write: what each axis of the image array is, as OME-NGFF
        names them: an optional ``"t"`` (volumes), an optional ``"c"`` (channels), then one
        letter per space axis (``"cyx"``: one RGB slide ``(3, H, W)``; ``"tcyx"``; ``"zyx"``);
        default: told by the number of dimensions, as above. An OME-Zarr image names its own.
    units
        ``"voxels"`` (default) or ``"physical"``: the unit of ``patch_size``.
    transform
        Applied to each item (the batch is then stacked by torch's collate).
    pad_mode, pad_value, label_pad_value
        How the part of a patch outside its volume is filled: ``"constant"`` (with
        ``pad_value`` for images, ``label_pad_value`` for labels) or ``"edge"`` (nearest
        voxel).
    cache_bytes
        Decoded chunks each process may keep besides those of the batch it is reading (the
        same chunk pool :class:`~chunkio.ChunkDataset` uses; least recently used evicted
        first), as many for the label as for the image, never more than the volumes' chunks,
        shared by the stores of a list. It is taken once the reads come back to a chunk
        decoded before (overlapping random patches, a second epoch), then written through
        once. With 0 (the default) a process keeps only the last batch's chunks, and reads
        patches on the chunk grid that share no chunk straight into the batch.
    storage_options
        With a URL: options for its fsspec filesystem, as for :class:`~chunkio.ChunkDataset`
        (e.g. ``{"anon": True}``).
    trust_codecs
        Allow codecs, filters and links chunkio does not consider safe, as for
        :class:`~chunkio.ChunkDataset`.
    """

    def __init__(
        self,
        path: Any,
        patch_size: Sequence[float],
        *,
        sampler: PatchSampler | None = None,
        fields: FieldSelection | None = None,
        scale: int = 0,
        label: str | None = None,
        mask: str | npt.ArrayLike | None = None,
        axes: str | None = None,
        units: Units = "voxels",
        transform: Callable[[Any], Any] | None = None,
        pad_mode: PadMode = "constant",
        pad_value: float = 0,
        label_pad_value: int = 0,
        cache_bytes: int = 0,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
    ) -> None:
        locations = _locations(path)
        self.location = locations[0] if len(locations) == 1 else locations
        self.format = detect_format(locations[0])
        if pad_mode not in ("constant", "edge"):
            raise ValueError(f"pad_mode must be 'constant' or 'edge'; got {pad_mode!r}")
        if units not in ("voxels", "physical"):
            raise ValueError(f"units must be 'voxels' or 'physical'; got {units!r}")
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0; got {cache_bytes}")
        self.transform, self.pad_mode = transform, pad_mode
        self.cache_bytes = int(cache_bytes)
        options = ReaderOptions(
            storage_options=dict(storage_options) if storage_options else None,
            trust_codecs=bool(trust_codecs),
        )
        if isinstance(fields, str):
            raise TypeError(f"fields must be a sequence of names, not a string; got {fields!r}")
        named = None if axes is None else NamedAxes.parse(axes, len(patch_size))
        request = StoreRequest(
            len(patch_size), fields, scale=scale, label=label, mask=mask, axes=named
        )
        stores = [open_store(loc, options, request) for loc in locations]
        self.patch_size = _voxels(patch_size, units, stores)
        _check_fits(stores, self.patch_size)
        if isinstance(sampler, LabelBalancedSampler) or any(s.native for s in stores):
            stores = [with_label_index(s) for s in stores]
        self.stores = tuple(stores)
        #: the first store's fields and how every process opens it
        self.layout, self.reader_options = stores[0].layout, stores[0].reader_options
        self.volumes, self.label_index, self.mask = combine(stores)
        self.fields = self._select(None if _foreign(stores) else as_kinds(fields) or fields)
        self.dtypes = {
            k: np.result_type(
                *(s.layout.field(n).dtype for s in stores for n in s.volumes.field_names(k))
            )
            for k in self.fields
        }
        self.pad_values = {"image": pad_value, "label": label_pad_value}
        self.sampler = (sampler if sampler is not None else GridSampler()).bind(
            self.volumes, self.patch_size, self.label_index, mask=self.mask
        )
        self._first = np.cumsum([0] + [s.volumes.count for s in stores])
        self._local: ReadCore | StoreCores | None = None

    def _select(self, fields: FieldSelection | None) -> tuple[str, ...]:
        available = KINDS if self.volumes.label is not None else KINDS[:1]
        if fields is None:
            return available
        for name in fields:
            if name not in available:
                raise KeyError(f"{self.location}: no {name!r} patches; available: {available}")
        return tuple(fields)

    # -- metadata ---------------------------------------------------------------------------
    def __len__(self) -> int:
        """Patches the bound sampler yields per epoch on this rank."""
        return len(self.sampler)

    def __repr__(self) -> str:
        return (
            f"PatchDataset({self.location!r}, patch_size={self.patch_size}, "
            f"volumes={self.volumes.count}, fields={list(self.fields)}, "
            f"sampler={type(self.sampler).__name__})"
        )

    # -- per-process handles ------------------------------------------------------------------
    def _open_handle(self) -> ReadCore | StoreCores:
        # the same per-process read core as ChunkDataset's (plan, read, cache, scatter); one
        # per store when there are several
        if len(self.stores) == 1:
            s = self.stores[0]
            return ReadCore(
                s.location, s.layout, cache_bytes=self.cache_bytes, reader=s.reader_options
            )
        return StoreCores(self.stores, self.cache_bytes)

    def _core(self, store: int) -> ReadCore:
        handle = self._handle()
        return handle if isinstance(handle, ReadCore) else handle.core(store)

    def read_stats(self) -> ReadStats:
        """Read counters of *this* process (workers keep their own), every store's added."""
        return self._handle().stats

    # -- reading ------------------------------------------------------------------------------
    def read_patches(
        self,
        keys: Sequence[Any] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        """Patches ``keys`` as NumPy arrays by field, plus ``volume`` and ``origin`` (and, for
        OME-Zarr, ``spacing`` and ``origin_physical``: voxel size and the position of the
        origin voxel's centre, in the image's physical units). ``out``: arrays by field, each
        ``(len(keys), *shape)`` (a loader's ring slot), that the patches are read into and
        returned as."""
        key_arr = normalize_keys(keys, self.volumes)
        store_of = np.searchsorted(self._first, key_arr[:, 0], side="right") - 1
        stores = np.unique(store_of).tolist()
        several = len(stores) != 1  # none (no keys): empty arrays
        # several stores: each store's patches copied straight into their rows of one batch
        batch = self._batch_arrays(len(key_arr), out) if several else None
        into = out if batch is None else batch
        parts = []
        for i in stores:  # each store's patches through its own core
            rows = np.flatnonzero(store_of == i)
            local = key_arr[rows].copy()
            local[:, 0] -= self._first[i]
            store = self.stores[i]
            got = self._core(i).patches.read(
                store.volumes,
                self.fields,
                plan_patch_reads(local, self.patch_size, store.volumes),
                self.patch_size,
                dtypes=self.dtypes,
                pad_mode=self.pad_mode,
                pad_values=self.pad_values,
                out=into,
                rows=rows.tolist() if several else None,
            )
            if store.ome is not None:
                got["spacing"] = np.tile(np.asarray(store.ome.spacing), (len(rows), 1))
                got["origin_physical"] = physical_origins(store.ome, local[:, 1:])
            parts.append((rows, got))
        found = parts[0][1] if batch is None else self._gather(len(key_arr), parts, batch)
        found["volume"] = key_arr[:, 0].copy()
        found["origin"] = key_arr[:, 1:].copy()
        for name, buf in (out or {}).items():
            if found[name] is not buf:
                buf[...] = found[name]
                found[name] = buf
        return found

    def _batch_arrays(
        self, n: int, out: Mapping[str, npt.NDArray[Any]] | None
    ) -> dict[str, npt.NDArray[Any]]:
        """The arrays of each field the patches of ``n`` keys are read into: ``out``'s, else
        new ones."""
        given = out or {}
        return {
            k: given[k]
            if k in given
            else np.empty((n, *self.volumes.item_shape(k, self.patch_size)), self.dtypes[k])
            for k in self.fields
        }

    def _gather(
        self,
        n: int,
        parts: Sequence[tuple[npt.NDArray[np.int64], dict[str, npt.NDArray[Any]]]],
        batch: Mapping[str, npt.NDArray[Any]],
    ) -> dict[str, npt.NDArray[Any]]:
        """The patches of several stores (or none), read into ``batch`` in the order of the
        keys, with their OME-Zarr placement."""
        out = dict(batch)
        if all(s.ome is not None for s in self.stores):  # else items of some stores lack them
            out["spacing"] = np.zeros((n, self.volumes.ndim))
            out["origin_physical"] = np.zeros((n, self.volumes.ndim))
            for rows, got in parts:
                for k in ("spacing", "origin_physical"):
                    out[k][rows] = got[k]
        return out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | np.integer):
            raise TypeError(
                "PatchDataset items are addressed by patch keys (volume, *origin), not by "
                f"position; got {key!r}: use DataLoader(ds, sampler=ds.sampler, ...)"
            )
        batch = self.__getitems__([key])
        return batch[0]

    def __getitems__(self, keys: Sequence[Any]) -> SampleBatch:
        n = len(keys)
        shared = self._shared_batch(n) if self.transform is None else {}
        into = {k: t.numpy() for k, t in shared.items()} or None
        found = self.read_patches(list(keys), out=into)
        columns = {k: shared[k] if k in shared else to_tensor(v) for k, v in found.items()}
        if self.transform is None:
            return SampleBatch(columns, n)
        if not n:
            return SampleBatch(columns, 0)
        # as ChunkDataset does: the batch is the transformed samples, stacked on first use
        # with tuples kept tuples (default_collate alone would turn them into lists)
        items = [self.transform({k: v[j] for k, v in columns.items()}) for j in range(n)]
        return SampleBatch.from_samples(items)

    def _shared_batch(self, n: int) -> dict[str, torch.Tensor]:
        """In a DataLoader worker: tensors in shared memory the patches are read into, as
        torch's ``default_collate`` stacks there; the worker then sends the batch to the main
        process without copying it into shared memory first (a copy of every byte)."""
        if get_worker_info() is None or not n:
            return {}
        found = {}
        for kind in self.fields:
            shape = (n, *self.volumes.item_shape(kind, self.patch_size))
            elem = torch.from_numpy(np.empty(0, self.dtypes[kind]))
            # as torch's own collate allocates it: a fresh shared segment, nothing copied
            typed = elem._typed_storage()  # type: ignore[no-untyped-call]
            storage = typed._new_shared(int(np.prod(shape)), device=elem.device)
            found[kind] = elem.new(storage).resize_(*shape)
        return found


def _locations(path: Any) -> list[Any]:
    """The stores ``path`` names: one location, or a list or tuple of them."""
    given = list(path) if isinstance(path, list | tuple) else [path]
    if not given:
        raise ValueError("path names no store; got an empty list")
    return [os.fspath(p) if isinstance(p, os.PathLike) else p for p in given]


def _foreign(stores: Sequence[PatchStore]) -> bool:
    """Whether ``fields`` named the stores' arrays (plain foreign stores)."""
    return any(not s.native and s.ome is None for s in stores)


def _voxels(size: Sequence[float], units: Units, stores: Sequence[PatchStore]) -> tuple[int, ...]:
    """The patch size in voxels: as given, or physical sizes divided by each store's
    spacing (every store must come to the same voxels: a batch holds one shape)."""
    if units == "voxels":
        return tuple(_whole(p) for p in size)
    found = {}
    for s in stores:
        if s.ome is None:
            raise FormatError(
                f"{s.location}: units='physical' needs the voxel spacing of an OME-Zarr image "
                "('multiscales' coordinateTransformations); this store has none"
            )
        vox = tuple(max(1, round(float(p) / d)) for p, d in zip(size, s.ome.spacing, strict=True))
        found[str(s.location)] = vox
    if len(set(found.values())) != 1:
        raise FormatError(
            f"patch_size {tuple(size)} (physical) is a different number of voxels in each "
            f"store: {found}; read the stores at scales of one spacing"
        )
    return next(iter(found.values()))


def _whole(value: Any) -> int:
    """A voxel count: an int, or a float that is one (``32.0``); never cut (``32.5``)."""
    if isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    raise ValueError(
        f"patch_size in voxels must be whole numbers; got {value!r} (give units='physical' "
        "for a physical size)"
    )


def _check_fits(stores: Sequence[PatchStore], size: tuple[int, ...]) -> None:
    """An OME-Zarr image must hold a whole patch at the chosen scale."""
    for s in stores:
        if s.ome is None:
            continue
        shape = s.volumes.shapes[0]
        if len(shape) == len(size) and any(p > n for p, n in zip(size, shape, strict=True)):
            raise FormatError(
                f"{s.location}: {s.ome.image.key}.datasets ({s.ome.level.path}): expected a "
                f"volume of at least the patch size {size} (axes {list(s.ome.axes)}); got "
                f"shape {shape}"
            )
