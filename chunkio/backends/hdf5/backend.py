"""HDF5 backend (h5py).

Fork safety: HDF5 state must not cross a fork (pytorch/pytorch#11887, h5py#934), so every
reader registers itself and all of them are closed just before this process forks; a reader
reopens lazily on its next read. Readers never pickle; datasets carry the path instead.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  # registers the filters h5py decodes (LZ4, Zstd, Blosc)
import numpy as np
import numpy.typing as npt

from ...errors import (
    CorruptChunkError,
    DatasetNotFoundError,
    FormatError,
    MissingChunkError,
    UnsafeInputError,
)
from ...util.numeric import ceil_div
from ..base import ArrayInfo, StageClock, check_region, coalesce
from ..codec_table import HDF5_SAFE, hdf5_codec_info
from .checks import check_array, in_file_node, in_file_path, read_text
from .grid import RawGrid
from .raw import RawChunks
from .storage import chunks_of, first_bad_chunk, missing_chunks, open_same_file

__all__ = ["HDF5Reader", "decode_attrs", "open_hdf5_readers"]

_readers: weakref.WeakSet[HDF5Reader] = weakref.WeakSet()
_readers_lock = threading.Lock()


_held_at_fork: list[HDF5Reader] = []


def _close_all_before_fork() -> None:
    # Take every reader's lock (waiting for reads in other threads to finish), close its file
    # and keep the lock until the fork is done, so no thread can reopen a file in between.
    with _readers_lock:
        readers = list(_readers)
    for reader in readers:
        reader._lock.acquire()
        _held_at_fork.append(reader)
        reader._close_locked()


def _release_after_fork() -> None:
    while _held_at_fork:
        _held_at_fork.pop()._lock.release()


os.register_at_fork(
    before=_close_all_before_fork,
    after_in_parent=_release_after_fork,
    after_in_child=_release_after_fork,
)


def _close_all_at_exit() -> None:
    # h5py objects still alive when the HDF5 library terminates (its own exit handler, after
    # Python's) are closed by HDF5 itself, in no particular order: a virtual dataset's creation
    # property list closed after the lists it refers to crashes the process (a segfault as a
    # spawned DataLoader worker exits). Closing every reader first releases them in order.
    with _readers_lock:
        readers = list(_readers)
    for reader in readers:
        reader.close()


atexit.register(_close_all_at_exit)


def open_hdf5_readers() -> int:
    """Number of HDF5 readers holding an open file in this process (for tests)."""
    return sum(1 for r in list(_readers) if r.is_open)


def decode_attrs(attrs: Any) -> dict[str, Any]:
    """HDF5 attributes -> plain Python (``chunkio*`` objects are stored as JSON text)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(value, str) and key.startswith("chunkio"):
            value = json.loads(value) if key == "chunkio" else _json_or_text(value)
        elif isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class HDF5Reader:
    """Read-only access to a chunkio HDF5 file; opens the file on first use in each process.

    Arrays whose filters chunkio decodes are read as raw chunks (one ``pread`` each, checked
    and decoded here): by rows where chunks hold whole samples
    (:mod:`chunkio.backends.hdf5.raw`), by boxes of the chunk grid otherwise and for
    :meth:`read_region` (:mod:`chunkio.backends.hdf5.grid`); others through h5py.
    """

    #: a chunk never written is reported (HDF5 itself would return the fill value)
    reports_missing_chunks = True

    def __init__(
        self,
        location: str,
        *,
        trust_codecs: bool = False,
        raw_chunks: bool = True,
        fill_missing: bool = False,
        file_object: Callable[[], io.IOBase] | None = None,
    ) -> None:
        """``raw_chunks=False`` reads everything through h5py, the general path (tests compare
        the raw chunk reads with it). ``fill_missing``: never-written chunks read as the fill
        value, as HDF5 defines them, instead of raising MissingChunkError. ``file_object``:
        makes the file object h5py reads instead of the path (a remote file's bytes; raw chunk
        reads are then the caller's, see :mod:`.remote`)."""
        self.location = str(location)
        self._file_object = file_object
        self._fileobj: io.IOBase | None = None
        self._trust = trust_codecs
        self._raw_chunks = raw_chunks
        self._fill_missing = fill_missing
        self.clock = StageClock()
        #: per array, its raw chunk reader (None: read through h5py), for rows and for boxes
        self._raw: dict[str, RawChunks | None] = {}
        self._grid: dict[str, RawGrid | None] = {}
        self._fd: int | None = None
        self._file: h5py.File | None = None
        self._checked: set[str] = set()
        #: per array, its path through hard links (its soft links followed), or None when
        #: an external link (trusted) leads to it
        self._paths: dict[str, str | None] = {}
        #: per array, chunk grid coordinates with no stored chunk (HDF5 reads them as zeros)
        self._missing: dict[str, frozenset[tuple[int, ...]]] = {}
        self._datasets: dict[str, h5py.Dataset] = {}
        self._lock = threading.Lock()
        if file_object is None and not os.path.exists(self.location):
            raise DatasetNotFoundError(f"no HDF5 dataset at {self.location}")
        self._open()
        with _readers_lock:
            _readers.add(self)

    @property
    def is_open(self) -> bool:
        return self._file is not None and bool(self._file.id.valid)

    def _open(self) -> h5py.File:
        if self._file is None or not self._file.id.valid:
            if self._file_object is not None:
                return self._open_file_object()
            try:
                before = os.stat(self.location)
                # a shared lock where the file system has locks: a writer holding the file
                # is still refused below; a read-only mount without locks (NFS, Lustre) is
                # read, whatever the HDF5 build's default
                self._file = h5py.File(self.location, "r", locking="best-effort")
            except FileNotFoundError as err:
                raise DatasetNotFoundError(f"no HDF5 dataset at {self.location}") from err
            except OSError as err:
                if "unable to lock file" in str(err):  # HDF5 file locking: errno 11
                    raise FormatError(
                        f"{self.location}: another process has the file open for writing (HDF5 "
                        "file locking); chunkio reads files nobody is writing: close the writer "
                        f"and open it again ({err})"
                    ) from err
                raise FormatError(f"{self.location}: cannot open as HDF5: {err}") from err
            self._fd = open_same_file(self.location, before)
        return self._file

    def _open_file_object(self) -> h5py.File:
        if self._file_object is None:  # pragma: no cover - only called with one
            raise TypeError("no file object to open")
        try:
            self._fileobj = self._file_object()
        except FileNotFoundError as err:
            raise DatasetNotFoundError(f"no HDF5 dataset at {self.location}") from err
        try:
            self._file = h5py.File(self._fileobj, "r")
        except OSError as err:
            raise FormatError(f"{self.location}: cannot open as HDF5: {err}") from err
        return self._file

    def describe_raw(self, name: str) -> tuple[RawChunks | None, Any]:
        """Where array ``name``'s stored chunks lie and how they decode, for a reader of the
        file's bytes by other means (byte ranges; None: only h5py reads it), and its fill
        value."""
        with self._lock:
            d = self._dataset(name)
            in_file = self._paths.get(name) is not None  # soft links resolved, not external
            raw = RawChunks.build(d, self.location, name) if in_file else None
            return raw, d.fillvalue

    def describe_grid(self, name: str) -> RawGrid | None:
        """As :meth:`describe_raw`, by boxes of array ``name``'s chunk grid (None: h5py)."""
        with self._lock:
            d = self._dataset(name)
            return RawGrid.build(d, name) if self._paths.get(name) is not None else None

    def attrs(self) -> dict[str, Any]:
        with self._lock:
            return decode_attrs(self._open().attrs)

    def array_attrs(self, name: str) -> dict[str, Any]:
        with self._lock:  # as h5py reads them: NumPy values keep their dtype
            found, out = self._dataset(name).attrs, dict[str, Any]()
            for key in found:
                with contextlib.suppress(Exception):  # a type h5py cannot read: left out
                    out[key] = found[key]
            return out

    def array_names(self) -> list[str]:
        with self._lock:
            f = self._open()
            # Links are listed too (without resolving them), so that opening one is refused
            # by _dataset as unsafe rather than reported as a missing array; arrays in
            # groups by their path (visititems follows no links). A damaged header fails it.
            nested: list[str] = []
            try:
                top = [k for k in f if not isinstance(f.get(k, getlink=True), h5py.HardLink)]
                f.visititems(lambda path, obj: nested.append(path) if _is_array(obj) else None)
            except (RuntimeError, OSError, KeyError) as err:
                why = f"{type(err).__name__}: {err}"
                raise FormatError(f"{self.location}: its arrays cannot be listed ({why})") from err
            return sorted({*top, *nested})

    def _dataset(self, name: str) -> h5py.Dataset:
        f = self._open()
        cached = self._datasets.get(name)
        if cached is not None and cached.id.valid:
            # Reopening a dataset per read costs its object header and, worse, its chunk
            # cache: HDF5 keeps one per open dataset.
            return cached
        if name not in self._checked:
            path, link = in_file_path(f, name, self.location)
            if path is None and not self._trust:
                raise UnsafeInputError(
                    f"{self.location}: {name!r} is (or passes through) a "
                    f"{type(link).__name__}; chunkio follows soft links inside the file but "
                    "refuses links that may point outside it unless trust_codecs=True"
                )
            self._paths[name] = path  # None: through an external link, trusted
            check_array(f[path or name], name, self.location, trust=self._trust)
            self._missing[name] = missing_chunks(f[path or name])
            self._checked.add(name)
        path = self._paths[name]
        dset = f[path or name]
        self._datasets[name] = dset
        if name not in self._raw:
            # Raw reads use this file's descriptor, so only for data stored in this file: not
            # through an external link (trusted, it points into another file), and with the
            # chunk index read through the same open file (see _open).
            usable = (
                self._raw_chunks
                and path is not None
                and isinstance(dset, h5py.Dataset)
                and self._fd is not None
            )
            self._raw[name] = RawChunks.build(dset, self.location, name) if usable else None
            self._grid[name] = RawGrid.build(dset, name) if usable else None
        return dset

    def array_info(self, name: str) -> ArrayInfo:
        with self._lock:
            return self._array_info(name)

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            node = in_file_node(self._open(), name, self.location, trust=self._trust)
            return decode_attrs(node.attrs) if isinstance(node, h5py.Group) else None

    def read_text(self, name: str) -> list[str]:
        with self._lock:
            return read_text(in_file_node(self._open(), name, self.location, trust=self._trust))

    def _array_info(self, name: str) -> ArrayInfo:
        d = self._dataset(name)
        raw = self._raw.get(name)  # contiguous data is read in runs: those are its chunks
        plist = d.id.get_create_plist()
        filters = tuple(
            HDF5_SAFE.get(plist.get_filter(i)[0], str(plist.get_filter(i)[0]))
            for i in range(plist.get_nfilters())
        )
        return ArrayInfo(
            name=name,
            shape=tuple(d.shape),
            dtype=np.dtype(d.dtype),
            chunks=raw.chunks if raw is not None else chunks_of(d),
            codecs=filters,
            stored_nbytes=int(d.id.get_storage_size()),
            compression=hdf5_codec_info(
                [plist.get_filter(i)[:3:2] for i in range(plist.get_nfilters())]
            ),
        )

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        with self._lock:
            self._read_locked(name, ranges, out)

    def _read_locked(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        d = self._dataset(name)
        raw, grid = self._raw.get(name), self._grid.get(name)
        if raw is not None and self._fd is not None:
            self._read_raw(d, raw, self._fd, ranges, out)
            return
        if grid is not None and self._fd is not None:  # chunks that split samples
            rest = tuple(slice(0, n) for n in d.shape[1:])
            for start, stop, offset in coalesce(ranges):
                box = (slice(start, stop), *rest)
                self._require_chunks(name, box, grid.chunks)
                self._read_grid(d, grid, self._fd, box, out[offset : offset + stop - start])
            return
        started = time.perf_counter()
        try:
            for start, stop, offset in coalesce(ranges):
                self._read_h5py(d, name, start, stop, out[offset : offset + stop - start])
        finally:
            self.clock.decode += time.perf_counter() - started  # HDF5 does every stage

    def _read_raw(
        self,
        d: h5py.Dataset,
        raw: RawChunks,
        fd: int,
        ranges: Sequence[tuple[int, int]],
        out: npt.NDArray[Any],
    ) -> None:
        offset, step = 0, raw.chunk_rows
        raw.check_file(fd)
        for start, stop in ranges:
            for first in range(start, stop, step):
                rows = min(step, stop - first)
                chunk = first // step
                part = out[offset : offset + rows]
                # a filter skipped when it was written, or never written (and filled): HDF5's
                if chunk in raw.masked or (self._fill_missing and chunk not in raw.index):
                    started = time.perf_counter()
                    self._read_h5py(d, raw.name, first, first + rows, part)
                    self.clock.decode += time.perf_counter() - started  # HDF5: every stage
                else:
                    self._read_raw_chunk(raw, fd, chunk, part)
                offset += rows

    def _read_raw_chunk(self, raw: RawChunks, fd: int, chunk: int, out: npt.NDArray[Any]) -> None:
        try:
            raw.read_chunk_into(fd, chunk, out, self.clock)
        except (CorruptChunkError, MissingChunkError) as err:
            raise type(err)(f"{self.location}: {err}") from err

    def _read_h5py(
        self, d: h5py.Dataset, name: str, start: int, stop: int, out: npt.NDArray[Any]
    ) -> None:
        if stop <= start:
            return
        self._require_chunks(name, (slice(start, stop),), d.chunks or d.shape)
        try:
            d.read_direct(out, np.s_[start:stop], np.s_[0 : stop - start])
        except OSError as err:
            step = (d.chunks or d.shape)[0]
            bad = first_bad_chunk(d, start, stop, step)
            where = (
                f"chunk {bad}"
                if bad is not None
                else (f"chunks {start // step}..{(stop - 1) // step}")
            )
            raise CorruptChunkError(
                f"{self.location}: array {name!r}, {where} (in samples {start}..{stop - 1}) "
                f"cannot be read (checksum or decoding failed): {err}"
            ) from err

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        with self._lock:
            d = self._dataset(name)
            where = f"{self.location}: array {name!r}"
            if not check_region(region, tuple(d.shape), out, where):
                return
            self._require_chunks(name, region, d.chunks or d.shape)
            grid = self._grid.get(name)
            if grid is not None and self._fd is not None:
                self._read_grid(d, grid, self._fd, region, out)
                return
            try:
                # h5py's fast reader (d[...]) beats read_direct's Python-level selection
                # handling several-fold on the small boxes patch reads ask for
                out[...] = d[region]
            except OSError as err:
                box = [(s.start, s.stop) for s in region]
                raise CorruptChunkError(f"{where}: box {box} cannot be read: {err}") from err

    def _read_grid(
        self,
        d: h5py.Dataset,
        grid: RawGrid,
        fd: int,
        region: tuple[slice, ...],
        out: npt.NDArray[Any],
    ) -> None:
        """Box ``region`` by raw chunk reads (:mod:`.grid`); chunks HDF5 must decode itself
        (a filter mask the pipeline lacks) through h5py."""

        def by_h5py(box: tuple[slice, ...], part: npt.NDArray[Any]) -> None:
            try:
                part[...] = d[box]
            except OSError as err:
                where = [(s.start, s.stop) for s in box]
                raise CorruptChunkError(
                    f"{self.location}: array {grid.name!r}, box {where} cannot be read: {err}"
                ) from err

        grid.check_file(fd)
        fill = d.fillvalue if self._fill_missing else None
        try:
            grid.read_region(region, out, grid.pread(fd), self.clock, fallback=by_h5py, fill=fill)
        except (CorruptChunkError, MissingChunkError) as err:
            if str(err).startswith(self.location):
                raise
            raise type(err)(f"{self.location}: {err}") from err

    def _require_chunks(self, name: str, box: tuple[slice, ...], chunks: tuple[int, ...]) -> None:
        """Raise if a chunk the box touches was never stored: it would read back as zeros."""
        if self._fill_missing:
            return  # as asked: HDF5's fill value
        missing = self._missing.get(name)
        if not missing:
            return
        # a box with fewer slices than axes (whole rows) leaves the other axes unconstrained
        spans = [(s.start // c, ceil_div(s.stop, c)) for s, c in zip(box, chunks, strict=False)]
        for coords in sorted(missing):
            if all(a <= x < b for x, (a, b) in zip(coords, spans, strict=False)):
                chunk = coords[0] if not any(coords[1:]) else coords
                raise MissingChunkError(
                    f"{self.location}: array {name!r}: chunk {chunk} is missing from the file "
                    "(HDF5 would read it back as zeros)"
                )

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        with self._lock:
            d = self._dataset(name)
            if d.chunks is None:  # contiguous or compact: written once, whole
                return d.id.get_offset() is not None or d.id.get_storage_size() > 0
            if not isinstance(chunk, int):  # grid coordinates: listed when the array opened
                return tuple(chunk) not in self._missing.get(name, frozenset())
            step = d.chunks[0]
            info = d.id.get_chunk_info_by_coord((chunk * step,) + (0,) * (d.ndim - 1))
            return info.byte_offset is not None

    def read_path(self, name: str) -> str:
        with self._lock:
            self._dataset(name)
            raw = self._raw.get(name) is not None or self._grid.get(name) is not None
            return "raw" if raw else "h5py"

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        self._datasets.clear()
        self._grid.clear()
        self._raw.clear()  # rebuilt from the file opened next (it may have been replaced)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
        if self._fileobj is not None:
            self._fileobj.close()
            self._fileobj = None


def _is_array(obj: Any) -> bool:
    return isinstance(obj, h5py.Dataset)
