"""ChunkDataset: a torch Dataset over a chunkio dataset (Zarr v3 or HDF5).

Handles are per process: ``__init__`` reads the metadata and closes what it opened; the first
read in each process (keyed by pid) opens that process's own handle, and pickling drops it.
So a dataset is safe to use in the parent and then hand to DataLoader workers under fork,
spawn or forkserver (HDF5 readers additionally close themselves right before any fork).

A dataset holds an object per concept: its samples (:mod:`.samples`), its batches' shapes,
its options (:mod:`.options`), in each process its read core; :mod:`.describe` reads its
metadata, :mod:`.opening` is make_loader's one open of a path, and :mod:`.views` builds the
values the layers below it get instead of the dataset (they never read its attributes).
Modules here may import :mod:`chunkio.backends`, :mod:`chunkio.collection`, :mod:`chunkio.format`,
:mod:`chunkio.read`, :mod:`chunkio.sampling`, :mod:`chunkio.transforms`, :mod:`chunkio.util` and
:mod:`chunkio.errors`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from torch.utils.data import Dataset

from ..backends import Reader, read_over_network
from ..collection.core import FileSetCore
from ..collection.files import FileSet, is_file_list, open_files
from ..errors import FormatError
from ..format.grid import SampleGrid
from ..format.layout import check_among
from ..format.store_layout import DEFAULT_PRELOAD_BYTES, LayoutOptions
from ..read import ReadCore
from ..read.base import ReadStats
from ..read.batch import SampleBatch, to_tensor
from ..read.core import check_transform
from ..sampling.label_check import LabelSource
from ..transforms.sample import Columns, is_columns_transform, is_field_transform
from ..util.deprecated import moved_keywords
from ..util.handles import PerProcessHandle
from ..util.numeric import IntArray
from ..util.shared_stack import HeldSegments
from .describe import describe, read_labels
from .options import MOVED_KEYWORDS, Decoding, DownloadCache, checked, reader_options
from .views import batch_columns

__all__ = ["DEFAULT_PRELOAD_BYTES", "ChunkDataset", "Decoding", "DownloadCache"]

DEFAULT_DECODING = Decoding()


class ChunkDataset(PerProcessHandle[ReadCore], Dataset[Any]):
    """Samples of a chunkio dataset, read chunk by chunk.

    Parameters
    ----------
    path
        A ``.zarr`` directory, an ``.h5``/``.h5ad`` file, a URL zarr understands, or a zarr
        store; or a list of them, read as one dataset end to end (:mod:`chunkio.collection`).
    fields
        ``None``: every field, samples are ``{name: tensor}`` dicts. A sequence of names:
        samples are tuples in that order (``for x, y in loader``). A single name: samples are
        that field's tensor.
        For an HDF5 file or Zarr store chunkio did not write (h5py, zarr-python, xarray's
        ``to_zarr``), ``fields`` names its arrays: ``{"image": "train/images", ...}`` or a
        list of array paths (see :mod:`chunkio.format.foreign`), a sparse CSR group
        (AnnData's ``"X"``) or a dataframe column (``"obs/cell_type"``, categorical: its
        codes, names from :meth:`categories`). Their values come back as stored unless
        ``decoding=Decoding(cf=True)``.
    anchors
        Windows (:class:`chunkio.Field`): anchor rows to sample (:mod:`chunkio.format.windows`).
    sparse_batches
        Fields naming a sparse CSR matrix (AnnData's ``X``): ``"dense"`` batches
        ``(B, n_cols)`` of its dtype, or ``"csr"``: ``torch.sparse_csr_tensor`` batches (for
        models that densify on the GPU; such batches go through a DataLoader, not the ring).
    transform
        Applied to each sample. A :class:`~chunkio.transforms.sample.FieldTransform` such
        as :class:`chunkio.transforms.image.Compose` (a declared output shape, one field, random
        parameters from ``(seed, epoch, index)``) is applied while reading, straight into
        the batch, and keeps a loader on its shared-memory ring; so is :class:`chunkio.Normalize`
        (in place, per batch). Any other callable gets the sample (slow path: torch's collate).
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
    storage_options
        A URL's fsspec filesystem options (s3fs: ``{"anon": True}``, ``key`` and ``secret``,
        ``client_kwargs={"endpoint_url": ...}``), passed with the pickled dataset to workers.
    trust_codecs
        Allow codecs, filters and links chunkio does not consider safe (code-running codecs,
        external links and storage; see the guarantees in the docs).
    decoding
        How stored values become a batch's arrays (:class:`~chunkio.Decoding`; default
        ``Decoding()``): decode threads per process, images laid out channels last, CF
        decoding.
    download
        A remote dataset (``s3://``, ``https://``...): the local folder where fetched chunks
        are kept (:class:`~chunkio.DownloadCache`), shared safely by every process that reads
        it; later epochs then read locally. Default: none.

    The keywords that moved into :class:`~chunkio.Decoding` (``decode_threads``,
    ``channels_last``, ``decode_cf``) and :class:`~chunkio.DownloadCache` (``download_cache``,
    ``download_cache_bytes``) are still accepted for one release, with a
    ``DeprecationWarning`` naming the new spelling.

    Attributes
    ----------
    samples, shapes
        Its samples (:class:`~chunkio.dataset.samples.SampleIndex`: count, rows, chunks and the
        bytes reading them keeps) and batches' shapes (:class:`~chunkio.read.batch.BatchShapes`).
    reader_options
        How every process opens its reader of the store: a frozen
        :class:`~chunkio.backends.ReaderOptions` (storage options, trust, download cache, and
        what reading the metadata found: a user's store reads never-written chunks as the fill
        value, a remote one reuses the metadata fetched here). It pickles with the dataset;
        the open reader never does (each process opens its own on first read).
    layout
        The fields and chunking, as :func:`chunkio.format.store_layout.open_layout` read them.

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
    #: many files read as one dataset (``ChunkDataset([path1, path2, ...])``), else ``None``
    _files: FileSet | None = None
    _cf: bool = False  # Decoding(cf) (see __init__)
    _anchors: Any = None  # the windows' anchors the dataset was made with

    @moved_keywords("ChunkDataset", MOVED_KEYWORDS)
    def __init__(
        self,
        path: Any,
        fields: Sequence[str] | Mapping[str, str] | str | None = None,
        transform: Callable[[Any], Any] | None = None,
        *,
        batch_transform: Callable[[Any], Any] | None = None,
        anchors: Any = None,
        cache_bytes: int = 0,
        preload_bytes: int = DEFAULT_PRELOAD_BYTES,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
        sparse_batches: str = "dense",
        decoding: Decoding = DEFAULT_DECODING,
        download: DownloadCache | None = None,
    ) -> None:
        self._configure(
            path,
            transform,
            batch_transform=batch_transform,
            cache_bytes=cache_bytes,
            preload_bytes=preload_bytes,
            storage_options=storage_options,
            trust_codecs=trust_codecs,
            decoding=decoding,
            download=download,
        )
        self._anchors, self._cf = anchors, decoding.cf  # windows' anchors; CF decoding
        self._sparse_batches = sparse_batches  # "dense" rows, or "csr" tensors
        if is_file_list(path):
            if self._cf:  # files may pack a variable differently (ERA5: a scale_factor a year)
                raise FormatError(
                    f"Decoding(cf=True) reads one store, not {len(path)} files: {path!r}"
                )
            self._files = open_files(path, fields, self.reader_options, preload_bytes=preload_bytes,
                                     anchors=anchors, sparse_batches=sparse_batches)  # fmt: skip
        reader = self._metadata_reader()  # a missing path: DatasetNotFoundError
        try:
            self._describe(reader, fields)
        finally:
            reader.close()

    def _configure(
        self,
        path: Any,
        transform: Callable[[Any], Any] | None,
        *,
        batch_transform: Callable[[Any], Any] | None = None,
        cache_bytes: int = 0,
        preload_bytes: int = DEFAULT_PRELOAD_BYTES,
        storage_options: Mapping[str, Any] | None = None,
        trust_codecs: bool = False,
        decoding: Decoding = DEFAULT_DECODING,
        download: DownloadCache | None = None,
    ) -> None:
        """The constructor's arguments, checked (no I/O): everything but the metadata."""
        self.location = os.fspath(path) if isinstance(path, os.PathLike) else path
        if is_file_list(path):  # many files: their paths, as given
            self.location = tuple(os.fspath(p) if isinstance(p, os.PathLike) else p for p in path)
        self.decoding = checked(decoding, Decoding, "decoding")
        self.channels_last = decoding.channels_last
        self.transform = transform
        self.field_transform = transform if is_field_transform(transform) else None
        self.columns_transform = transform if is_columns_transform(transform) else None
        self.batch_transform = batch_transform
        if cache_bytes < 0 or preload_bytes < 0:
            raise ValueError(
                f"cache_bytes and preload_bytes must be >= 0; got {cache_bytes}, {preload_bytes}"
            )
        self.cache_bytes = int(cache_bytes)
        #: fields whose whole array is at most this many bytes are read once per process
        self.preload_bytes = int(preload_bytes)
        #: a loader's shared-memory segments of stacked window variables, by their arrays
        #: (set on the loader's copy: its workers decode them once together)
        self.held_segments: dict[tuple[str, ...], str] = {}
        #: how every process opens its reader of the store (see :meth:`_describe`)
        self.reader_options = reader_options(storage_options, trust_codecs, download)
        self._local: ReadCore | None = None

    def _describe(
        self, reader: Reader, fields: Sequence[str] | Mapping[str, str] | str | None
    ) -> None:
        """The dataset's metadata, read through ``reader`` (open on :attr:`location` with
        :attr:`reader_options`; the caller closes it)."""
        found = describe(
            reader,
            fields,
            location=self.location,
            reader_options=self.reader_options,
            options=LayoutOptions(self.preload_bytes, anchors=self._anchors, decode_cf=self._cf),
            files=self._files,
            sparse_batches=getattr(self, "_sparse_batches", "dense"),  # make_loader's: dense
            transform=self.field_transform,
            channels_last=self.channels_last,
        )
        self.layout, self.reader_options = found.layout, found.reader_options
        self.format, self.fields = found.format, found.fields
        self.grid = SampleGrid(self.layout.num_samples, self.layout.samples_per_chunk)
        self.samples, self.shapes = found.samples, found.shapes
        if self.field_transform is not None:
            check_transform(self.field_transform, self.layout, self.fields, reader)
        if self.columns_transform is not None:  # e.g. Normalize: its stats fit the fields
            self.columns_transform.check_dataset(self.batch_columns())

    def _metadata_reader(self) -> Reader:
        """A reader for metadata and whole small arrays, opened as the dataset reads (its
        storage options, trust, fetched metadata) but without the download cache, which
        holds the chunks of batches. Many files: the first."""
        first = self.location[0] if self._files is not None else self.location
        return dataclasses.replace(self.reader_options, download_cache=None).open(first)

    @property
    def samples_per_chunk(self) -> int:
        return self.layout.samples_per_chunk

    @property
    def class_names(self) -> tuple[str, ...] | None:
        return self.layout.class_names

    @property
    def remote(self) -> bool:
        """Whether it is read over a network (its fetched metadata is reused per process, and
        the ring's workers are told the batches ahead); a local HDF5 file is not, though its
        description travels to the workers too."""
        documents = self.reader_options.documents
        locations = self.location if self._files is not None else (self.location,)
        return any(read_over_network(loc, documents) for loc in locations)

    def __len__(self) -> int:
        """Samples: the valid anchors with windows, else the rows of the sample axis."""
        return len(self.samples)

    def chunk_sizes(self) -> IntArray:
        """Samples in each chunk along the sample axis, in storage order."""
        return self.samples.chunk_sizes()

    @property
    def anchors(self) -> npt.NDArray[np.int64] | None:
        """Windows: the row of each sample's anchor (sorted); ``None`` without windows."""
        return self.samples.anchors

    def chunk_nbytes(self) -> int:
        """Decoded bytes of one full chunk, summed over the selected dense fields."""
        return self.samples.chunk_nbytes()

    def held_nbytes(self) -> int:
        """Decoded bytes of every chunk a batch may read, as a reader's caches hold them."""
        return self.samples.held_nbytes()

    def batch_fields(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """The selected fields as a transport preallocates them: ``(dtype, sample_shape)``."""
        return self.shapes.batch_fields()

    def channels_last_fields(self) -> frozenset[str]:
        """Fields a transport lays out channels last (see ``Decoding(channels_last)``)."""
        return self.shapes.channels_last_fields()

    def output_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of field ``name`` in a batch, or ``None`` when its samples differ."""
        return self.shapes.output_shape(name)

    def arrange(self, columns: dict[str, Any]) -> Any:
        """Columns by field -> a sample or batch as ``fields`` asks."""
        return self.shapes.arrange(columns)

    def batch_columns(self) -> Columns:
        """Its batches' fields as values, for a columns transform such as
        :class:`~chunkio.Normalize` to check (:mod:`.views`): it never reads the dataset."""
        return batch_columns(self.location, self.layout, self.fields)

    def label_source(self) -> LabelSource:
        """Its labels and chunks as values, for the loader's label-mixing check
        (:mod:`chunkio.sampling.label_check`): it never reads the dataset."""
        return LabelSource(
            location=self.location,
            layout=self.layout,
            num_samples=len(self),
            chunk_sizes=self.chunk_sizes(),
            read_labels=self.labels,
            reader_options=self.reader_options,
            remote=self.remote,
            files=self._files,
        )

    def read_stats(self) -> ReadStats:
        """Read counters of *this* process (workers keep their own)."""
        return self._handle().stats

    def with_cache(self, cache_bytes: int) -> ChunkDataset:
        """A copy (same files and options, no open handle) keeping ``cache_bytes`` of chunks."""
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0; got {cache_bytes}")
        clone = copy.copy(self)  # pickles through __getstate__: the handle stays behind
        clone.cache_bytes = int(cache_bytes)
        return clone

    def for_loader(
        self, order_bytes: int, *, workers: int, hold_bytes: int
    ) -> tuple[ChunkDataset, HeldSegments | None]:
        """The copy a loader reads, each sample once (this dataset is not changed), and the
        shared-memory segments its ``workers`` hold windows' arrays in (closed with the loader):
        each reader holds ``order_bytes`` of chunks for the order, all of them when they fit
        ``hold_bytes`` (:meth:`~chunkio.dataset.samples.SampleIndex.budget`)."""
        budget = self.samples.budget(order_bytes, workers=workers, hold_bytes=hold_bytes)
        clone = self.with_cache(max(self.cache_bytes, budget.cache_bytes))
        clone.reads_once = True
        clone.preload_bytes = max(self.preload_bytes, budget.preload_bytes)
        # a dataset taken from another loader does not keep that loader's segments
        clone.held_segments = budget.held()
        return clone, budget.segments

    def __repr__(self) -> str:
        return (
            f"ChunkDataset({self.location!r}, fields={list(self.fields)}, "
            f"samples={len(self)}, samples_per_chunk={self.samples_per_chunk})"
        )

    def _open_handle(self) -> ReadCore:
        cache_chunks = self.cache_bytes // max(1, self.samples.cache_chunk_nbytes())
        if self._files is not None:  # as a ReadCore reads: read, encoded, prefetch, stats
            files = FileSetCore(
                self._files,
                cache_chunks=cache_chunks,
                preload_bytes=self.preload_bytes,
                decode_threads=self.decoding.threads,
            )
            return cast(ReadCore, files)
        return ReadCore(
            self.location,
            self.layout,
            cache_chunks=cache_chunks,
            preload_bytes=self.preload_bytes,
            decode_threads=self.decoding.threads,
            reader=self.reader_options,
            held=self.held_segments,
        )

    def labels(self) -> npt.NDArray[np.int64] | None:
        """The integer label of every sample, in storage order, read whole from the store;
        ``None`` when the dataset has no label field (the first of
        :data:`~chunkio.format.layout.LABEL_FIELDS` it has, if it holds one integer per sample:
        ``label``, or ``labels``, ``target``... of a user's own store). Whatever ``fields``
        selects: the loader's label-mixing check and ``chunkio doctor`` read them so.

        It opens and closes its own reader: the calling process keeps no handle (DataLoader
        workers may fork later).

        >>> import numpy as np, tempfile, os
        >>> from chunkio import write_arrays
        >>> path = os.path.join(tempfile.mkdtemp(), "labels.zarr")
        >>> _ = write_arrays(path, {"x": np.zeros((4, 2)), "label": np.array([3, 1, 2, 0])},
        ...                  shuffle=False)
        >>> ChunkDataset(path, fields="x").labels().tolist()
        [3, 1, 2, 0]
        """
        return read_labels(self.layout, self._files, self._metadata_reader)

    def categories(self, name: str) -> tuple[str, ...] | None:
        """The category names of categorical field ``name`` (an AnnData ``obs`` column: its
        values are codes into them, -1 for missing); ``None`` for other fields."""
        return getattr(self.layout.field(name, where=str(self.location)), "categories", None)

    def read_batch(
        self,
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        once: bool | None = None,
        epoch: int = 0,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Read samples ``indices`` of the selected fields (or of ``fields``, some of them)
        as NumPy arrays, by field.

        Each chunk the batch touches is decoded once, in storage order; ``out`` may supply
        preallocated arrays (dense fields) to scatter into. ``once=True`` promises that no
        later read asks for these samples again (a loader's epoch): chunks the batch uses
        whole and in order are then decoded straight into ``out`` instead of the cache.
        Default: :attr:`reads_once`. A field transform is applied on the way, keyed by
        ``epoch`` (the epoch the batch belongs to: loaders pass it with every batch).
        """
        once = self.reads_once if once is None else once
        names = self.fields if fields is None else tuple(fields)
        check_among(names, self.fields, f"{self.location}: read_batch")
        rows = self.samples.rows(indices)  # windows: the samples' anchor rows
        found = self._handle().read(
            names, rows, out, once=once, transform=self.field_transform, epoch=int(epoch)
        )
        if self.columns_transform is not None:
            self.columns_transform.apply_columns(found)
        return found

    def read_encoded(
        self, indices: Sequence[int] | npt.ArrayLike, field: str
    ) -> tuple[list[npt.NDArray[np.uint8]], npt.NDArray[np.int64]]:
        """The encoded bytes (one array per sample) and stored ``(C, H, W)`` shapes of
        samples ``indices`` of encoded image field ``field``, not decoded: for decoders
        elsewhere (``make_loader(workers=Workers(decode="gpu"))`` decodes them on the GPU)."""
        check_among([field], self.fields, f"{self.location}: read_encoded")
        return self._handle().encoded(field, indices)

    def prefetch(self, indices: Sequence[int] | npt.ArrayLike) -> None:
        """Start fetching what a later read of ``indices`` needs (remote datasets fetch the
        chunks in the background; a hint, it returns at once). Ring workers call it for the
        batches queued behind the one they are reading."""
        handle = self._handle()
        # a local store fetches nothing: skip the anchors' lookup (many files: ask each)
        if handle.prefetches:
            handle.prefetch(self.fields, self.samples.rows(indices))

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an int; got {type(index).__name__}")
        columns = {k: to_tensor(v) for k, v in self.read_batch([int(index)]).items()}
        sample = self.arrange({k: v[0] for k, v in columns.items()})
        return self._per_sample(sample) if self._per_sample is not None else sample

    @property
    def _per_sample(self) -> Callable[[Any], Any] | None:
        """The transform applied to whole samples after reading (not a field transform)."""
        declared = self.field_transform is not None or self.columns_transform is not None
        return None if declared else self.transform

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        """Samples ``indices`` as one :class:`~chunkio.read.batch.SampleBatch`.

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
