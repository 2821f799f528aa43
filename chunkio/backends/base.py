"""The backend protocol: the only place where Zarr and HDF5 differ.

A :class:`Reader` serves chunk-aligned sample ranges of named arrays into preallocated
buffers; a :class:`Writer` creates arrays and writes chunk-aligned blocks. Both are
per-process objects: they hold open handles and never travel between processes; what
travels is the location string they were opened from.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from .codec_names import CodecInfo
from .codec_table import CODECS, DEFAULT_CODEC, Compression

__all__ = [
    "CODECS",
    "DEFAULT_CODEC",
    "MAX_WHOLE_BYTES",
    "ArrayInfo",
    "ArraySpec",
    "CodecInfo",
    "Compression",
    "Reader",
    "StageClock",
    "Writer",
    "check_region",
    "check_rows",
    "coalesce",
    "read_all",
    "region_shape",
]


@dataclass(frozen=True)
class ArrayInfo:
    """Shape, dtype, chunking and encoding of one stored array.

    ``codecs`` are the backend's own descriptions (Zarr codec JSON, HDF5 filter names);
    ``compression`` says the same in chunkio's terms.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    codecs: tuple[str, ...]
    stored_nbytes: int | None = None
    compression: CodecInfo | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class StageClock:
    """Seconds a reader has spent on each stage of its chunk reads, in this process.

    ``read``: getting the stored bytes (file reads); ``checksum``: verifying them; ``decode``:
    decompressing into the destination. Backends that cannot tell the stages apart (a library
    doing all three) count everything as ``decode``.
    """

    read: float = 0.0
    checksum: float = 0.0
    decode: float = 0.0

    def total(self) -> float:
        return self.read + self.checksum + self.decode


@runtime_checkable
class Reader(Protocol):
    """Read-only access to one dataset, opened in the current process.

    Capabilities, not class names, tell callers (and the contract tests) how a backend
    behaves: ``reports_missing_chunks`` is true when reading a chunk that was never written
    raises :class:`~chunkio.errors.MissingChunkError` rather than returning the fill value;
    :attr:`prefetches` is true when :meth:`prefetch` fetches ahead (a remote store). Backends
    subclass this protocol, as zarr-python's stores do its ``Store`` ABC, so the optional
    capabilities have their defaults here (local: nothing to fetch ahead) and callers never
    probe for them.
    """

    location: str
    #: reading a never-written chunk raises MissingChunkError (else: check chunk_exists)
    reports_missing_chunks: bool
    #: seconds spent reading, checking and decoding chunks in this process
    clock: StageClock

    def attrs(self) -> dict[str, Any]: ...

    def array_names(self) -> list[str]: ...

    def array_info(self, name: str) -> ArrayInfo: ...

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        """The attributes of group ``name`` (an AnnData sparse matrix or dataframe column is
        a group of arrays); ``None`` when ``name`` is an array; a
        :class:`~chunkio.errors.MissingFieldError` when nothing is there."""
        ...

    def read_text(self, name: str) -> list[str]:
        """Every element of the 1-D string array ``name`` (categories, column names), read
        whole; a :class:`~chunkio.errors.FormatError` when it holds no strings."""
        ...

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        """Read rows ``[a, b)`` for each range, concatenated in order, into ``out``.

        Ranges are sorted, disjoint and aligned to chunk boundaries (the last may end at the
        array's end), so each stored chunk is decoded at most once. A range outside the
        array's rows, or reversed, is an ``IndexError`` (:func:`check_rows`).
        """
        ...

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        """Read the box ``region`` (one ``slice(start, stop)`` per axis) into ``out``.

        The box may start and end anywhere inside the array (patch reads of volumes chunked
        along every axis); ``out.shape`` equals the box's shape. Missing and corrupt chunks
        raise like :meth:`read_into`.
        """
        ...

    def read_regions(
        self, name: str, regions: Sequence[tuple[slice, ...]], outs: Sequence[npt.NDArray[Any]]
    ) -> None:
        """:meth:`read_region` of each box of ``regions`` into its buffer of ``outs`` (a
        patch batch's chunks, one box each): a backend may pay its per-call costs once."""
        for region, out in zip(regions, outs, strict=True):
            self.read_region(name, region, out)

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        """Whether a chunk is stored: ``chunk`` is its number along the sample axis (the
        first chunk of that row of the grid), or its grid coordinates along every axis."""
        ...

    def read_path(self, name: str) -> str:
        """Which of the backend's read paths serves array ``name``: ``"engine"`` (chunkio's
        Zarr engine), ``"zarr-python"``, ``"raw"`` (HDF5 chunks read and decoded by chunkio),
        ``"h5py"`` or ``"memory"``. Tests and ``chunkio info`` use it; reads do not."""
        ...

    @property
    def prefetches(self) -> bool:
        """Whether :meth:`prefetch` does anything (chunks fetched over a network)."""
        return False

    def prefetch(self, name: str, chunks: list[int]) -> None:
        """Start fetching sample-axis ``chunks`` of array ``name`` ahead of their read (a hint:
        it returns at once; a local store has nothing to fetch ahead and ignores it)."""
        return None

    def close(self) -> None: ...


def region_shape(region: tuple[slice, ...], shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """Validate a box against an array shape; return the box's shape.

    >>> region_shape((slice(1, 3), slice(0, 4)), (5, 4), "x")
    (2, 4)
    """
    if len(region) != len(shape):
        raise ValueError(f"{where}: region needs {len(shape)} slices; got {len(region)}")
    dims = []
    for axis, (s, n) in enumerate(zip(region, shape, strict=True)):
        start, stop = s.start, s.stop
        ints = (int, np.integer)
        if not (isinstance(start, ints) and isinstance(stop, ints) and s.step in (None, 1)):
            raise ValueError(f"{where}: region axis {axis} must be slice(start, stop); got {s}")
        if not 0 <= start <= stop <= n:
            raise IndexError(f"{where}: region axis {axis} {start}:{stop} outside 0:{n}")
        dims.append(stop - start)
    return tuple(dims)


def check_region(
    region: tuple[slice, ...], shape: tuple[int, ...], out: npt.NDArray[Any], where: str
) -> bool:
    """Validate a box and its output buffer; ``False`` when the box is empty (nothing to read).

    >>> check_region((slice(1, 3), slice(0, 0)), (5, 4), np.empty((2, 0)), "x")
    False
    """
    box = region_shape(region, shape, where)
    if out.shape != box:
        raise ValueError(f"{where}: output buffer must have shape {box}; got {out.shape}")
    return 0 not in box


def check_rows(ranges: Sequence[tuple[int, int]], num_rows: int, where: str) -> None:
    """Refuse a row range of :meth:`Reader.read_into` outside ``[0, num_rows)`` or reversed:
    a chunk past either end would read back as nothing, as the fill value or as another
    chunk's rows, never as an error of its own. ``where`` names the file and array.

    >>> check_rows([(0, 4), (8, 10)], 10, "x")
    >>> check_rows([(8, 12)], 10, "a.zarr: array 'x'")
    Traceback (most recent call last):
    ...
    IndexError: a.zarr: array 'x': rows 8:12 outside 0:10 (the array's rows)
    """
    for start, stop in ranges:
        if not 0 <= start <= stop <= num_rows:
            raise IndexError(
                f"{where}: rows {start}:{stop} outside 0:{num_rows} (the array's rows)"
            )


@dataclass(frozen=True)
class ArraySpec:
    """One array a writer creates: its shape, dtype, chunks and encoding. ``shard_chunks``:
    store that many chunks along axis 0 per object where the format has shards (Zarr v3
    ``sharding_indexed``); other formats ignore it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    compression: Compression
    shard_chunks: int | None = None


class Writer(ABC):
    """Creates arrays and writes chunk-aligned blocks of one dataset (one subclass per
    format: the keyword call below is the same for all of them)."""

    location: str

    def create_array(
        self,
        name: str,
        *,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        chunks: tuple[int, ...],
        compression: Compression,
        shard_chunks: int | None = None,
    ) -> None:
        """Create (or replace) array ``name`` (see :class:`ArraySpec`)."""
        shape, chunks = tuple(int(n) for n in shape), tuple(int(c) for c in chunks)
        self.create(ArraySpec(name, shape, np.dtype(dtype), chunks, compression, shard_chunks))

    def create_rows_like(
        self,
        name: str,
        like: npt.NDArray[Any],
        rows: int,
        compression: Compression,
        shard_chunks: int | None = None,
    ) -> None:
        """Create array ``name`` with the shape and dtype of ``like``, chunked every ``rows``
        rows along axis 0 and whole along the others."""
        chunks = (rows, *like.shape[1:])
        self.create(ArraySpec(name, like.shape, like.dtype, chunks, compression, shard_chunks))

    @abstractmethod
    def create(self, spec: ArraySpec) -> None:
        """Create (or replace) the array ``spec`` describes."""

    @abstractmethod
    def write_block(self, name: str, start: int, data: npt.NDArray[Any]) -> None: ...

    def write_runs(self, name: str, runs: Sequence[tuple[int, npt.NDArray[Any]]]) -> bool:
        """Write runs ``(start, values)`` of whole chunks that are all the shards they fall in
        will ever hold (the chunks between them stay empty): each shard once, whole. ``False``
        when the array has no shards this writer writes itself (the default): nothing was
        written, and the caller writes each run with :meth:`write_block`."""
        return False

    @abstractmethod
    def write_region(self, name: str, region: tuple[Any, ...], data: npt.NDArray[Any]) -> None:
        """Write ``data`` into ``array[region]`` (ints and slices); callers own whole chunks."""

    def flush(self) -> None:  # noqa: B027 - writers whose writes reach the OS at once
        """Push written chunks to the OS, so they survive this process dying."""

    @abstractmethod
    def set_attrs(self, attrs: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def attrs(self) -> dict[str, Any]: ...

    @abstractmethod
    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """What a conversion asks of a format besides arrays (:mod:`chunkio.backends._storage`).

    Capabilities, not format names: code outside ``backends/`` never compares formats.
    """

    format: str
    #: several processes may write disjoint chunks of one array at once
    concurrent_writers: bool
    #: a chunk left by a killed writer is whole or absent (else it is read back on resume)
    atomic_chunks: bool
    #: can only be written at a local path
    local_only: bool
    #: lives in this process's memory: nothing to stage, sync or publish
    in_memory: bool
    #: can store many chunks in one object (Zarr v3 ``sharding_indexed``)
    shards: bool

    def holds_data(self, location: Any) -> bool: ...

    def clear(self, location: Any) -> None: ...

    def sync_chunks(self, path: str, arrays: Sequence[str], first: int, stop: int) -> None: ...

    def seal(self, path: str, scratch: str, *, pack: bool = False) -> None:
        """Make a finished staging ready to publish; ``pack``: store small chunks in few
        objects where the format has shards."""
        ...

    def copy_for_growth(
        self, src: str, dst: str, names: Sequence[str], old_samples: int, new_samples: int
    ) -> None: ...


def coalesce(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Merge touching ranges; return ``(start, stop, offset_in_out)`` runs.

    >>> coalesce([(0, 4), (4, 8), (12, 16)])
    [(0, 8, 0), (12, 16, 8)]
    """
    runs: list[tuple[int, int, int]] = []
    offset = 0
    for a, b in ranges:
        if runs and runs[-1][1] == a:
            s, _, o = runs[-1]
            runs[-1] = (s, b, o)
        else:
            runs.append((a, b, offset))
        offset += b - a
    return runs


#: the most bytes :func:`read_all` allocates for one array, by its declared shape: the arrays
#: read whole are per-sample indexes (offsets, spans, labels, codes; 8 GiB: the offsets of a
#: billion samples), so a larger declaration is damage or a hostile file, refused before any
#: allocation instead of met as a MemoryError (or a swap storm) sized by metadata
MAX_WHOLE_BYTES = 2**33


def read_all(reader: Reader, name: str) -> npt.NDArray[Any]:
    """Every element of array ``name``, read chunk by chunk along axis 0 (small arrays:
    labels, offsets, a table's columns).

    An array declaring more than :data:`MAX_WHOLE_BYTES` is a
    :class:`~chunkio.errors.FormatError` naming it, before anything is allocated."""
    info = reader.array_info(name)
    # Python ints: a hostile shape's product must not wrap around to a small number
    nbytes = math.prod(int(n) for n in info.shape) * info.dtype.itemsize
    if nbytes > MAX_WHOLE_BYTES:
        raise FormatError(
            f"{reader.location}: array {name!r} declares shape {tuple(info.shape)} "
            f"{info.dtype}: {nbytes} bytes, read whole; at most {MAX_WHOLE_BYTES} expected "
            "(an index of samples; the shape is corrupt)"
        )
    out = np.empty(info.shape, dtype=info.dtype)
    rows = int(info.shape[0]) if info.shape else 0
    if rows:
        step = max(1, int(info.chunks[0])) if info.chunks else rows
        reader.read_into(name, [(a, min(a + step, rows)) for a in range(0, rows, step)], out)
    elif not info.shape:
        raise FormatError(f"{reader.location}: array {name!r} is 0-D; expected axis 0")
    return out
