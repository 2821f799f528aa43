"""ChunkDataset: a torch Dataset over a chunkio dataset (Zarr v3 or HDF5).

Handles are per process: ``__init__`` reads the metadata and closes what it opened; the first
read in each process (keyed by pid) opens that process's own handle, and pickling drops it.
So a dataset is safe to use in the parent and then hand to DataLoader workers under fork,
spawn or forkserver (HDF5 readers additionally close themselves right before any fork).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from .backends import Reader, ReaderOptions, detect_format, open_reader, reader_documents
from .batch import SampleBatch, to_tensor
from .foreign import foreign_layout, is_chunkio_dataset
from .grid import SampleGrid
from .layout import DatasetLayout, check_arrays, validate_sequence_of_names
from .order import check_int
from .planning import normalize_indices
from .read import ReadCore
from .read.core import ReadCoreDataset
from .sample_transforms import FieldTransform, is_field_transform, stored_output_shape
from .windows import Anchors, Field, WindowSet, is_windowed, open_windows, window_fields

__all__ = ["DEFAULT_PRELOAD_BYTES", "ChunkDataset"]

#: fields whose whole array is at most this large (labels, ids) are read once per process
DEFAULT_PRELOAD_BYTES = 16 * 2**20


class ChunkDataset(ReadCoreDataset, Dataset[Any]):
    """Samples of a chunkio dataset, read chunk by chunk.

    Parameters
    ----------
    path
        A ``.zarr`` directory, an ``.h5`` file, a URL zarr understands, or a zarr store.
    fields
        ``None``: every field, samples are ``{name: tensor}`` dicts. A sequence of names:
        samples are tuples in that order (``for x, y in loader``). A single name: samples are
        that field's tensor.
        For an HDF5 file or Zarr store chunkio did not write (h5py, zarr-python, xarray's
        ``to_zarr``), ``fields`` names its arrays: ``{"image": "train/images", ...}`` or a
        list of array paths (see :mod:`chunkio.foreign`). Their values come back as stored:
        CF attributes (``scale_factor``, ``add_offset``, ``_FillValue``) are not applied.
        A :class:`chunkio.Field` reads a window of steps around each anchor, e.g.
        ``[Field(["t2m", "u10"], steps=range(-1, 1)), Field("t2m", steps=[1]), "time"]``
        gives ``(2, 2, H, W)``, ``(1, H, W)`` and the anchor's time; samples are then the
        valid anchors (see :mod:`chunkio.windows`).
    anchors
        Windows: which anchors to sample, a range or an index array of rows (a time split,
        e.g. ``range(0, 2000)``) or a :class:`chunkio.Anchors` (with a valid-mask or excluded
        ranges). Anchors whose window would leave the arrays or cross a gap are skipped.
    transform
        Applied to each sample. A :class:`~chunkio.sample_transforms.FieldTransform` such
        as :class:`chunkio.transforms.Compose` (a declared output shape, one field, random
        parameters from ``(seed, epoch, index)``) is applied while reading, straight into
        the batch, and keeps a loader on its shared-memory ring. Any other callable gets the
        sample (slow path: the batch is then stacked by torch's collate).
    batch_transform
        Applied to each stacked batch inside the worker (fast path).
    cache_bytes
        Decoded chunks each process keeps (a :class:`~chunkio.read.DecodedChunkCache` per field,
        least recently used evicted first), so a chunk that later batches need again is not
        decoded again: :func:`~chunkio.make_loader` raises it, in the copy it reads, to hold
        its mixing pool. Whatever its size, a process holds at least the chunks of the batch
        it is reading.
    preload_bytes
        Fields whose whole array is at most this many bytes are read once per process.
    trust_codecs
        Allow codecs, filters and links chunkio does not consider safe (see the README).
    channels_last
        Batches of images that chunkio decodes or transforms (encoded fields, the field
        transform's field) keep the ``(B, C, H, W)`` shape but are laid out channels last in
        memory, as decoders and resamplers produce them (torch's ``channels_last`` memory
        format, which convolutions take as it is; FFCV's default too): this saves a
        transposing copy per image. ``x.is_contiguous()`` is then false; use ``.reshape``
        rather than ``.view``, or pass ``channels_last=False`` for contiguous batches.
    download_cache, download_cache_bytes
        A remote dataset (``s3://``, ``https://``...): a local folder where fetched chunks are
        kept, at most ``download_cache_bytes`` (least recently used dropped first), shared
        safely by every process that reads it; later epochs then read locally.
    decode_threads
        Threads each process decodes encoded images and applies field transforms with (the
        decoders and torch's resampling release the GIL). 1 suits a loader with a worker per
        core; more helps a process that reads on its own (``num_workers=0``).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from chunkio import write_arrays
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.zarr")
    >>> _ = write_arrays(path, {"x": np.arange(12).reshape(6, 2), "y": np.arange(6)},
    ...                  shuffle=False)  # keep source order, so row 5 is sample 5
    >>> ds = ChunkDataset(path, fields=["x", "y"])
    >>> len(ds), ds[5][0].tolist(), int(ds[5][1])
    (6, [10, 11], 5)
    """

    #: Reads follow an epoch order that asks for each sample once (set by make_loader): a
    #: chunk a batch uses whole, in order, is decoded into the batch and not cached.
    reads_once: bool = False
    #: a reader already open on the location, lent to ``__init__`` by :meth:`_opened`
    _lent: Reader | None = None

    def __init__(
        self,
        path: Any,
        fields: Sequence[str] | Mapping[str, str] | str | None = None,
        transform: Callable[[Any], Any] | None = None,
        *,
        batch_transform: Callable[[Any], Any] | None = None,
        cache_bytes: int = 0,
        preload_bytes: int = DEFAULT_PRELOAD_BYTES,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
        decode_threads: int = 1,
        channels_last: bool = True,
        download_cache: str | os.PathLike[str] | None = None,
        download_cache_bytes: int = 8 << 30,
        anchors: Any = None,
    ) -> None:
        self.location = os.fspath(path) if isinstance(path, os.PathLike) else path
        self.channels_last = bool(channels_last)
        self.transform = transform
        self.field_transform: FieldTransform | None = (
            transform if is_field_transform(transform) else None
        )
        self.batch_transform = batch_transform
        if cache_bytes < 0 or preload_bytes < 0:
            raise ValueError(
                f"cache_bytes and preload_bytes must be >= 0; got {cache_bytes}, {preload_bytes}"
            )
        self.cache_bytes = int(cache_bytes)
        decode_threads = check_int("decode_threads", decode_threads, 1)
        if download_cache_bytes < 0:
            raise ValueError(f"download_cache_bytes must be >= 0; got {download_cache_bytes}")
        cache = None
        if download_cache is not None:
            cache = (os.fspath(download_cache), int(download_cache_bytes))
        self._options: dict[str, Any] = {
            "download_cache": cache,
            "decode_threads": decode_threads,
            "preload_bytes": int(preload_bytes),
            "storage_options": dict(storage_options) if storage_options else None,
            "trust_codecs": bool(trust_codecs),
            # a remote group's metadata, read once here and reused by every process's reader
            "documents": None,
            "fill_missing": False,
        }
        self._selection = fields  # a store chunkio did not write: its arrays, by field
        # windows: fields with steps, sampled at valid anchors (chunkio.windows)
        self._windows: WindowSet | None = None
        self._window_spec: tuple[tuple[Field, ...], Anchors] | None = None
        if is_windowed(fields, anchors):
            self._window_spec = (window_fields(fields, str(self.location)), Anchors.of(anchors))
        self.layout = self._read_layout()  # first: a missing path is DatasetNotFoundError
        self.format = detect_format(self.location)
        self.grid = SampleGrid(self.layout.num_samples, self.layout.samples_per_chunk)
        self._single = isinstance(fields, str | Field)
        names: Sequence[str] | None
        if self._windows is not None:  # windows: the window fields, in the order given
            names = list(self._windows.fields)
        elif self.layout.foreign or isinstance(fields, Mapping):
            names = list(self.layout.field_names)  # fields named arrays: the layout's order
        else:
            names = [fields] if isinstance(fields, str) else fields
        self.fields = validate_sequence_of_names(names, self.layout, str(self.location))
        self._as_tuple = fields is not None and not self._single
        if self.field_transform is not None:
            info = self.layout.field(self.field_transform.field, where=str(self.location))
            if info.kind == "window":
                raise TypeError(
                    f"{self.location}: field {info.name!r} is a window; field transforms "
                    "apply to images (use batch_transform, e.g. chunkio's Normalize)"
                )
        self._local: ReadCore | None = None

    @classmethod
    @contextmanager
    def _opened(
        cls,
        path: Any,
        fields: Sequence[str] | str | None,
        transform: Callable[[Any], Any] | None,
        storage_options: Mapping[str, Any] | None,
    ) -> Iterator[tuple[ChunkDataset, Reader]]:
        """A dataset and the reader that described it, left open for the caller's other
        metadata reads (make_loader's labels) and closed on exit: one open in all."""
        location = os.fspath(path) if isinstance(path, os.PathLike) else path
        reader = open_reader(location, storage_options=dict(storage_options or {}) or None)
        try:
            dataset = cls.__new__(cls)
            dataset._lent = reader  # taken by _read_layout instead of opening another
            cls.__init__(dataset, path, fields, transform, storage_options=storage_options)
            if dataset._options["fill_missing"]:
                # A store chunkio did not write: chunks never written (xarray and zarr skip
                # those equal to the fill value) read as the fill value, the caller's reads
                # too (make_loader's labels), so the reader is reopened as the dataset reads.
                reader.close()
                reader = open_reader(dataset.location, **dataset._reader_options())
            yield dataset, reader
        finally:
            reader.close()

    def _read_layout(self) -> DatasetLayout:
        lent: Reader | None = self.__dict__.pop("_lent", None)
        reader = lent if lent is not None else open_reader(self.location, **self._reader_options())
        try:
            where = reader.location
            attrs = reader.attrs()
            if self._window_spec is not None:
                return self._read_windows(reader, attrs, *self._window_spec)
            if not is_chunkio_dataset(attrs):
                self._options["fill_missing"] = True  # never-written chunks hold the fill
                preload = self._options["preload_bytes"]
                foreign = foreign_layout(reader, self._selection, preload_bytes=preload)
                self._options["documents"] = reader_documents(reader)
                return foreign
            layout = DatasetLayout.from_attrs(attrs, where=where)
            arrays = {}
            for f in layout.fields:
                for name in f.array_names():
                    if name in reader.array_names():
                        info = reader.array_info(name)
                        arrays[name] = (info.shape, info.dtype, info.chunks)
            check_arrays(layout, arrays, where=where)
            self._options["documents"] = reader_documents(reader)
            self._channel_counts = self._read_channels(reader, layout)
            return layout
        finally:
            if lent is None:
                reader.close()

    def _read_windows(
        self, reader: Reader, attrs: Mapping[str, Any], fields: Sequence[Field], anchors: Anchors
    ) -> DatasetLayout:
        """Windows: the layout of the window fields, and the anchors (:attr:`_windows`)."""
        native = None
        if is_chunkio_dataset(attrs):
            native = DatasetLayout.from_attrs(attrs, where=reader.location)
        else:
            self._options["fill_missing"] = True  # never-written chunks hold the fill
        preload = self._options["preload_bytes"]
        self._windows = open_windows(reader, native, fields, anchors, preload_bytes=preload)
        self._options["documents"] = reader_documents(reader)
        return self._windows.layout

    def _rows(self, indices: Sequence[int] | npt.ArrayLike) -> Any:
        """Windows: sample indices -> anchor rows (others pass through)."""
        if self._windows is None:
            return indices
        try:
            idx = normalize_indices(indices, len(self))
        except IndexError as err:
            raise IndexError(f"{self.location}: {err}") from err
        return self._windows.anchors[idx]

    @property
    def anchors(self) -> npt.NDArray[np.int64] | None:
        """Windows: the row of each sample's anchor (sorted); ``None`` without windows."""
        return None if self._windows is None else self._windows.anchors

    def _read_channels(self, reader: Reader, layout: DatasetLayout) -> dict[str, int]:
        """Channels of the encoded image field of several sizes that a fixed-size field
        transform makes batches of (the first stored shape's; batch shapes need it)."""
        t = self.field_transform
        if t is None or getattr(t, "fixed_size", None) is None:
            return {}
        found = [f for f in layout.fields if f.name == t.field and f.kind == "encoded"]
        if not found or found[0].sample_shape is not None:
            return {}
        name = found[0].array_names()[2]
        info = reader.array_info(name)
        grid = SampleGrid(int(info.shape[0]), int(info.chunks[0]))
        if not grid.num_chunks:
            return {t.field: 3}
        first = np.empty((grid.bounds(0)[1], *info.shape[1:]), info.dtype)
        reader.read_into(name, [grid.bounds(0)], first)
        return {t.field: int(first[0, 0])}

    # -- metadata ---------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._windows is not None:
            return len(self._windows.anchors)
        return self.layout.num_samples

    @property
    def samples_per_chunk(self) -> int:
        return self.layout.samples_per_chunk

    @property
    def class_names(self) -> tuple[str, ...] | None:
        return self.layout.class_names

    @property
    def remote(self) -> bool:
        """Whether the dataset is read over a network (S3, HTTP, ...): its reader fetched
        the metadata that every process's reader now reuses."""
        return self._options["documents"] is not None

    def chunk_sizes(self) -> npt.NDArray[np.int64]:
        """Samples in each chunk along the sample axis, in storage order (windows: anchors
        per run of row chunks, :func:`chunkio.windows.anchor_groups`)."""
        if self._windows is not None:
            return self._windows.group_sizes
        return self.grid.chunk_sizes()

    def chunk_nbytes(self) -> int:
        """Decoded bytes of one full chunk, summed over the selected dense fields (windows:
        of every array they read, and of the chunks beyond an order chunk they reach)."""
        if self._windows is not None:
            return self._row_chunk_nbytes() * (1 + self._windows.edge_chunks)
        return sum(self.layout.field(f).sample_nbytes for f in self.fields) * self.samples_per_chunk

    def _row_chunk_nbytes(self) -> int:
        """Windows: decoded bytes of one row chunk of every array the windows read."""
        return (0 if self._windows is None else self._windows.row_nbytes) * self.samples_per_chunk

    def with_cache(self, cache_bytes: int) -> ChunkDataset:
        """A copy (same files and options, no open handle) keeping ``cache_bytes`` of chunks."""
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0; got {cache_bytes}")
        clone = copy.copy(self)  # pickles through __getstate__: the handle stays behind
        clone.cache_bytes = int(cache_bytes)
        return clone

    def _for_loader(self, cache_bytes: int) -> ChunkDataset:
        """The copy a loader reads (the caller's dataset is left as it is): keeping at least
        ``cache_bytes`` of chunks, and reading each sample once per epoch (:attr:`reads_once`)."""
        clone = self.with_cache(max(self.cache_bytes, cache_bytes))
        clone.reads_once = True
        return clone

    def __repr__(self) -> str:
        return (
            f"ChunkDataset({self.location!r}, fields={list(self.fields)}, "
            f"samples={len(self)}, samples_per_chunk={self.samples_per_chunk})"
        )

    # -- per-process handles ------------------------------------------------------------------

    def _open_reader(self) -> ReadCore:
        per_chunk = self._row_chunk_nbytes() if self._windows is not None else self.chunk_nbytes()
        cache_chunks = self.cache_bytes // max(1, per_chunk)
        o = self._options
        return ReadCore(
            self.location,
            self.layout,
            cache_chunks=cache_chunks,
            preload_bytes=o["preload_bytes"],
            decode_threads=o["decode_threads"],
            reader=ReaderOptions(**self._reader_options(), download_cache=o["download_cache"]),
        )

    # -- reading ------------------------------------------------------------------------------

    def read_batch(
        self,
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        once: bool | None = None,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """Read samples ``indices`` of the selected fields as NumPy arrays, by field.

        Each chunk the batch touches is decoded once, in storage order; ``out`` may supply
        preallocated arrays (dense fields) to scatter into. ``once=True`` promises that no
        later read asks for these samples again (a loader's epoch): chunks the batch uses
        whole and in order are then decoded straight into ``out`` instead of the cache.
        Default: :attr:`reads_once`. A field transform is applied on the way, keyed by
        ``epoch`` (the epoch the batch belongs to: loaders pass it with every batch).
        """
        once = self.reads_once if once is None else once
        return self._reader().read(
            self.fields,
            self._rows(indices),
            out,
            once=once,
            transform=self.field_transform,
            epoch=int(epoch),
        )

    def prefetch(self, indices: Sequence[int] | npt.ArrayLike) -> None:
        """Start fetching what a later read of ``indices`` needs (remote datasets fetch the
        chunks in the background; a hint, it returns at once). Ring workers call it for the
        batches queued behind the one they are reading."""
        self._reader().prefetch(self.fields, self._rows(indices))

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an int; got {type(index).__name__}")
        columns = {k: to_tensor(v) for k, v in self.read_batch([int(index)]).items()}
        sample = self.arrange({k: v[0] for k, v in columns.items()})
        return self._per_sample(sample) if self._per_sample is not None else sample

    @property
    def _per_sample(self) -> Callable[[Any], Any] | None:
        """The transform applied to whole samples after reading (not a field transform)."""
        return None if self.field_transform is not None else self.transform

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        """Samples ``indices`` as one :class:`~chunkio.batch.SampleBatch`.

        Both :func:`chunkio.collate` (no copy) and torch's ``default_collate`` (which sees
        the list of samples) turn it into the batch; with a ``transform`` it holds the
        transformed samples, with a ``batch_transform`` it splits the transformed batch.
        """
        epoch = getattr(indices, "epoch", 0)  # batches of a ChunkBatchSampler carry it
        columns = {k: to_tensor(v) for k, v in self.read_batch(indices, epoch=epoch).items()}
        n = len(indices)
        per_sample = self._per_sample
        if per_sample is not None and n:
            samples = [
                per_sample(self.arrange({k: v[j] for k, v in columns.items()})) for j in range(n)
            ]
            batch = SampleBatch.from_samples(samples)
            if self.batch_transform is None:
                return batch
            collated = batch.collated
        else:
            collated = self.arrange(columns)
        if self.batch_transform is not None:
            collated = self.batch_transform(collated)
        return SampleBatch(collated, n)

    def batch_fields(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """The selected fields as a transport preallocates them: ``(dtype, sample_shape)``
        (see :class:`chunkio.transport.BatchSource`), after the field transform; fields of
        samples with different shapes have none (a ``TypeError``)."""
        out = {}
        for name in self.fields:
            info = self.layout.field(name)
            shape = self.output_shape(name)
            if shape is None:
                raise TypeError(
                    f"{self.location}: field {name!r} holds samples of different shapes "
                    f"({info.kind}): no batch shape"
                )
            out[name] = (info.dtype, shape)
        return out

    def channels_last_fields(self) -> frozenset[str]:
        """Fields a transport lays out channels last (see ``channels_last``)."""
        if not self.channels_last:
            return frozenset()
        t = self.field_transform
        out = {
            name
            for name in self.fields
            if self.layout.field(name).kind == "encoded" or (t is not None and t.field == name)
        }
        return frozenset(n for n in out if len(self.output_shape(n) or ()) == 3)

    def output_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of field ``name`` in a batch (after the field transform), or ``None``
        when its samples differ (ragged, or images of several sizes and no fixed-size
        transform)."""
        info = self.layout.field(name, where=str(self.location))
        t = self.field_transform
        if t is None or t.field != name:
            return None if info.sample_shape is None else tuple(info.sample_shape)
        if info.sample_shape is not None:
            return stored_output_shape(t, tuple(info.sample_shape))
        fixed = getattr(t, "fixed_size", None)
        if info.kind == "encoded" and fixed is not None:
            channels = self._channels(name)
            return (channels, int(fixed[0]), int(fixed[1]))
        return None

    def _channels(self, name: str) -> int:
        """Channels of an encoded image field of several sizes (read with the metadata)."""
        return self._channel_counts[name]

    def _reader_options(self) -> dict[str, Any]:
        return {
            "storage_options": self._options["storage_options"],
            "trust_codecs": bool(self._options["trust_codecs"]),
            "documents": self._options["documents"],
            "fill_missing": bool(self._options["fill_missing"]),
        }

    def arrange(self, columns: dict[str, Any]) -> Any:
        """Columns by field -> a sample or batch as ``fields`` asks: a dict, a tuple in
        ``fields`` order, or the one field's value."""
        if self._single:
            return columns[self.fields[0]]
        if self._as_tuple:
            return tuple(columns[f] for f in self.fields)
        return columns
