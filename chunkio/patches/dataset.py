"""PatchDataset: fixed-size patches of the volumes of a chunkio volume dataset.

Handles follow :class:`~chunkio.ChunkDataset`'s rules: ``__init__`` reads the metadata (and
the label index) and closes what it opened; each process opens its own handle on first read
(keyed by pid) and pickling drops it, so the dataset works in DataLoader workers under fork,
spawn and forkserver.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from ..backends import Reader, ReaderOptions, detect_format
from ..errors import FormatError
from ..format.foreign import FieldSelection
from ..format.label_index import LabelIndex, index_label_volumes
from ..format.layout import DatasetLayout
from ..format.store_layout import LayoutOptions, open_layout
from ..format.volume_layout import VOLUMES_KEY, VolumeSet
from ..read import PadMode, ReadCore, read_whole
from ..read.batch import SampleBatch, to_tensor
from ..read.core import ReadCoreDataset
from ..read.planning import plan_patch_reads
from .balanced import LabelBalancedSampler
from .samplers import GridSampler, PatchSampler

__all__ = ["PatchDataset"]

KINDS = ("image", "label")


class PatchDataset(ReadCoreDataset, Dataset[Any]):
    """Patches of the volumes of a chunkio volume dataset (see :mod:`chunkio.format.volume_layout`),
    or of volume arrays in a user's own HDF5 file or Zarr store, read in place.

    Items are addressed by *patch keys* ``(volume, *origin)``, which the bound ``sampler``
    yields; an item is ``{"image", "label" (when the dataset has labels), "volume",
    "origin"}`` of tensors. Use ``DataLoader(ds, sampler=ds.sampler, batch_size=...)``;
    ``__getitems__`` decodes each chunk a batch touches once, even when patches overlap.

    Parameters
    ----------
    path
        A volume dataset (``.zarr`` directory, ``.h5`` file, URL or store), or an HDF5 file
        or Zarr store chunkio did not write (then ``fields`` names its arrays).
    patch_size
        Spatial size of a patch, one int per spatial axis.
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
        label volume once here.
    transform
        Applied to each item (the batch is then stacked by torch's collate).
    pad_mode, pad_value, label_pad_value
        How the part of a patch outside its volume is filled: ``"constant"`` (with
        ``pad_value`` for images, ``label_pad_value`` for labels) or ``"edge"`` (nearest
        voxel).
    cache_bytes
        Decoded chunks each process keeps besides those of the batch it is reading (the
        same chunk pool :class:`~chunkio.ChunkDataset` uses; least recently used evicted
        first; helps overlapping grids). With 0 a process keeps only the last batch's chunks.
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
        patch_size: Sequence[int],
        *,
        sampler: PatchSampler | None = None,
        fields: FieldSelection | None = None,
        transform: Callable[[Any], Any] | None = None,
        pad_mode: PadMode = "constant",
        pad_value: float = 0,
        label_pad_value: int = 0,
        cache_bytes: int = 0,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
    ) -> None:
        self.location = os.fspath(path) if isinstance(path, os.PathLike) else path
        self.format = detect_format(self.location)
        if pad_mode not in ("constant", "edge"):
            raise ValueError(f"pad_mode must be 'constant' or 'edge'; got {pad_mode!r}")
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0; got {cache_bytes}")
        self.transform, self.pad_mode = transform, pad_mode
        self.cache_bytes = int(cache_bytes)
        #: how every process opens its reader of the store (set again by the metadata read)
        self.reader_options = ReaderOptions(
            storage_options=dict(storage_options) if storage_options else None,
            trust_codecs=bool(trust_codecs),
        )
        self.patch_size = tuple(int(p) for p in patch_size)
        self.layout, self.volumes, self.label_index = self._read_metadata(fields, sampler)
        self.fields = self._select(None if self.layout.foreign else fields)
        self.dtypes = {k: self._dtype(k) for k in self.fields}
        self.pad_values = {"image": pad_value, "label": label_pad_value}
        self.sampler = (sampler if sampler is not None else GridSampler()).bind(
            self.volumes, self.patch_size, self.label_index
        )
        self._local: ReadCore | None = None

    def _read_metadata(
        self, fields: FieldSelection | None, sampler: PatchSampler | None
    ) -> tuple[DatasetLayout, VolumeSet, LabelIndex | None]:
        reader = self.reader_options.open(self.location)
        try:
            options = LayoutOptions(spatial=len(self.patch_size))
            found = open_layout(reader, fields, options)
            layout, volumes = found.dataset_layout(), found.volumes
            if volumes is None:  # open_layout describes volumes when spatial is asked for
                raise FormatError(f"{self.location}: no volumes of {len(self.patch_size)} axes")
            self.reader_options = found.reader_options(self.reader_options)
            if found.native:
                index = read_label_index(reader, layout.extra[VOLUMES_KEY].get("label_index"))
                return layout, volumes, index
        finally:
            reader.close()
        balanced = isinstance(sampler, LabelBalancedSampler) and volumes.label is not None
        return layout, volumes, self._index_labels(layout, volumes) if balanced else None

    def _index_labels(self, layout: DatasetLayout, volumes: VolumeSet) -> LabelIndex:
        """The label index of a store chunkio did not write, read from its labels (as a
        foreign store is read: never-written chunks hold the fill value)."""
        label = layout.field("label")
        reader = self.reader_options.open(self.location)
        try:
            return index_label_volumes(reader, volumes, label.array_names()[0], label.dtype)
        finally:
            reader.close()

    def _select(self, fields: FieldSelection | None) -> tuple[str, ...]:
        available = KINDS if self.volumes.label is not None else KINDS[:1]
        if fields is None:
            return available
        if isinstance(fields, str):
            raise TypeError(f"fields must be a sequence of names, not a string; got {fields!r}")
        for name in fields:
            if name not in available:
                raise KeyError(f"{self.location}: no {name!r} patches; available: {available}")
        return tuple(fields)

    def _dtype(self, kind: str) -> np.dtype[Any]:
        names = self.volumes.field_names(kind)
        return np.result_type(*(self.layout.field(n).dtype for n in names))

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
    def _open_handle(self) -> ReadCore:
        # the same per-process read core as ChunkDataset's (plan, read, cache, scatter)
        return ReadCore(
            self.location, self.layout, cache_bytes=self.cache_bytes, reader=self.reader_options
        )

    # -- reading ------------------------------------------------------------------------------
    def read_patches(self, keys: Sequence[Any] | npt.ArrayLike) -> dict[str, npt.NDArray[Any]]:
        """Patches ``keys`` as NumPy arrays by field, plus ``volume`` and ``origin``."""
        plan = plan_patch_reads(keys, self.patch_size, self.volumes)
        out = self._handle().patches.read(
            self.volumes,
            self.fields,
            plan,
            self.patch_size,
            dtypes=self.dtypes,
            pad_mode=self.pad_mode,
            pad_values=self.pad_values,
        )
        out["volume"] = plan.keys[:, 0].copy()
        out["origin"] = plan.keys[:, 1:].copy()
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
        columns = {k: to_tensor(v) for k, v in self.read_patches(list(keys)).items()}
        n = len(keys)
        if self.transform is None:
            return SampleBatch(columns, n)
        if not n:
            return SampleBatch(columns, 0)
        # as ChunkDataset does: the batch is the transformed samples, stacked on first use
        # with tuples kept tuples (default_collate alone would turn them into lists)
        items = [self.transform({k: v[j] for k, v in columns.items()}) for j in range(n)]
        return SampleBatch.from_samples(items)


def read_label_index(reader: Reader, meta: Mapping[str, Any] | None) -> LabelIndex | None:
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
