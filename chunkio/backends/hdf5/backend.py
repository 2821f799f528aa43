"""HDF5 backend (h5py).

Fork safety: HDF5 state must not cross a fork (pytorch/pytorch#11887, h5py#934), so every
reader registers itself and all of them are closed just before this process forks
(:mod:`.registry`); a reader reopens lazily on its next read. Readers never pickle; datasets
carry the path instead, and for a dataset of many files what the parent learnt of each file
(:mod:`.described`).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  # registers the filters h5py decodes (LZ4, Zstd, Blosc)
import numpy as np
import numpy.typing as npt

from ...errors import (
    ChunkioError,
    CorruptChunkError,
    DatasetNotFoundError,
    FormatError,
    MissingChunkError,
    UnsafeInputError,
)
from ..base import ArrayInfo, Reader, StageClock, check_region, check_rows, coalesce
from .attrs import decode_attrs
from .checks import check_array, in_file_node, in_file_path, list_arrays, read_text
from .described import (
    DescribedArray,
    Made,
    as_description,
    check_made,
    file_state,
    made_of,
    make_description,
    open_described,
)
from .grid import RawGrid
from .raw import RawChunks
from .registry import open_hdf5_readers, register
from .storage import (
    array_info_of,
    chunk_runs,
    chunk_stored,
    chunks_of,
    failed_chunks,
    missing_chunks,
    open_file,
    open_same_file,
    require_stored,
    row_runs,
)

__all__ = ["HDF5Reader", "decode_attrs", "open_hdf5_readers"]


class HDF5Reader(Reader):
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
        documents: Mapping[str, Any] | None = None,
    ) -> None:
        """``raw_chunks=False`` reads everything through h5py, the general path (tests compare
        the raw chunk reads with it). ``fill_missing``: never-written chunks read as the fill
        value, as HDF5 defines them, instead of raising MissingChunkError. ``file_object``:
        makes the file object h5py reads instead of the path (a remote file's bytes; raw chunk
        reads are then the caller's, see :mod:`.remote`). ``documents``: what
        :meth:`description` returned in another process; its arrays are read without opening
        h5py while the file is the one described (:mod:`.described`)."""
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
        self._links: dict[str, Any] = {}  # of the open file, by path (checks.in_file_path)
        self._infos: dict[str, ArrayInfo] = {}
        #: the file's state when h5py opened it (what :meth:`description` describes)
        self._opened: tuple[int, ...] | None = None
        self._lock = threading.Lock()
        #: arrays as the process that made the dataset found them, valid while the file keeps
        #: the state it had then, and each one's shape, chunks and dtype then (:mod:`.described`)
        self._state, self._described, self._made = (
            as_description(documents) if raw_chunks else (None, {}, {})
        )
        #: what each array must still be, once the file is found changed since described
        self._compare: dict[str, Made] = {}
        for name, known in self._described.items():  # checked where it was described
            self._paths[name], self._missing[name] = known.path, known.missing
            self._checked.add(name)
        if file_object is None and not os.path.exists(self.location):
            raise DatasetNotFoundError(f"no HDF5 dataset at {self.location}")
        if not self._open_described():
            self._open()
        register(self)

    @property
    def is_open(self) -> bool:
        return self._fd is not None or (self._file is not None and bool(self._file.id.valid))

    def _open_described(self) -> bool:
        """Whether the described arrays can be read: the file opened for raw reads (no h5py)
        if it is still the file described; else the description is dropped."""
        if self._state is None or self._file_object is not None:
            return False
        if self._fd is None:
            self._fd = open_described(self.location, self._state)
            if self._fd is None:
                self._forget_description()
                return False
        return True

    def _forget_description(self) -> None:
        """The file changed since it was described: every array is looked at again (its path,
        checks and missing chunks found again by :meth:`_dataset`, its shape, chunks and dtype
        compared with the dataset's)."""
        self._compare = self._made
        self._checked -= self._described.keys()
        self._described.clear()
        self._state = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _known(self, name: str) -> DescribedArray | None:
        """Array ``name`` as described, if it was and the file is still the one described."""
        if name not in self._described or not self._open_described():
            return None
        return self._described.get(name)

    def _open(self) -> h5py.File:
        if self._file is None or not self._file.id.valid:
            if self._file_object is not None:
                return self._open_file_object()
            self._file, before = open_file(self.location)
            self._opened = file_state(before)
            if self._state is not None and self._opened != self._state:
                self._forget_description()  # changed since described: h5py's view only
            if self._fd is None:
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

    def description(self, names: Sequence[str]) -> dict[str, Any] | None:
        """What this reader learnt of arrays ``names`` (each opened and checked here), for
        ``documents=`` in another process (:mod:`.described`); None when this file is not
        read by raw chunks (a file object, or changed since it was opened)."""
        with self._lock:
            self._open()
            if self._file_object is not None or self._fd is None or not self._raw_chunks:
                return None
            arrays, made = {}, {}
            for name in names:
                try:
                    d = self._dataset(name)
                except ChunkioError:  # refused or missing: left to the reads to say so
                    continue
                made[name] = made_of(self._array_info(name))
                path = self._paths.get(name)
                if path is not None:  # not through an external link: h5py follows those
                    info, raw, grid = self._array_info(name), self._raw[name], self._grid[name]
                    grid = grid if raw is None or len(info.shape) > 1 else None  # 1-D: rows
                    fill, missing = d.fillvalue, self._missing.get(name, frozenset())
                    arrays[name] = DescribedArray(info, path, raw, grid, fill, missing).fresh()
            state = file_state(os.fstat(self._fd))
            return make_description(state, arrays, made) if state == self._opened else None

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
            return list_arrays(self._open(), self.location)

    def _dataset(self, name: str) -> h5py.Dataset:
        f = self._open()
        cached = self._datasets.get(name)
        if cached is not None and cached.id.valid:
            # Reopening a dataset per read costs its object header and, worse, its chunk
            # cache: HDF5 keeps one per open dataset.
            return cached
        if name in self._checked:
            dset = f[self._paths[name] or name]
        else:
            path, link = in_file_path(f, name, self.location, self._links)
            if path is None and not self._trust:
                raise UnsafeInputError(
                    f"{self.location}: {name!r} is (or passes through) a "
                    f"{type(link).__name__}; chunkio follows soft links inside the file but "
                    "refuses links that may point outside it unless trust_codecs=True"
                )
            self._paths[name] = path  # None: through an external link, trusted
            dset = f[path or name]
            check_array(dset, name, self.location, trust=self._trust)
            self._missing[name] = missing_chunks(dset)
            self._checked.add(name)
        made = self._compare.get(name)
        if made is not None:  # the file changed since the dataset was made: still the same?
            now = (tuple(dset.shape), chunks_of(dset), np.dtype(dset.dtype).str)
            check_made(self.location, name, made, now)
        path = self._paths[name]
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
            raw = self._raw[name] = RawChunks.build(dset, self.location, name) if usable else None
            # a 1-D array read by rows reads its boxes through h5py, as when described: its
            # chunk index is not read twice (about 5 us a chunk, seconds at millions)
            rows = raw is not None and dset.ndim == 1
            self._grid[name] = RawGrid.build(dset, name) if usable and not rows else None
        return dset

    def array_info(self, name: str) -> ArrayInfo:
        with self._lock:
            return self._array_info(name)

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            f, links = self._open(), self._links
            node = in_file_node(f, name, self.location, trust=self._trust, links=links)
            return decode_attrs(node.attrs) if isinstance(node, h5py.Group) else None

    def read_text(self, name: str) -> list[str]:
        with self._lock:
            f, links = self._open(), self._links
            return read_text(in_file_node(f, name, self.location, trust=self._trust, links=links))

    def _array_info(self, name: str) -> ArrayInfo:
        known = self._known(name)
        if known is not None:
            return known.info
        found = self._infos.get(name)  # asked for again and again while a dataset is made
        if found is None:
            found = self._infos[name] = self._info_of(name)
        return found

    def _info_of(self, name: str) -> ArrayInfo:
        d = self._dataset(name)
        return array_info_of(d, name, self._raw.get(name))

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        with self._lock:
            self._read_locked(name, ranges, out)

    def _read_locked(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        num_rows = self._array_info(name).shape[0]
        check_rows(ranges, num_rows, f"{self.location}: array {name!r}")
        raw, grid = self._chunk_readers(name)
        if raw is not None and self._fd is not None:
            self._read_raw(raw, self._fd, ranges, out)
            return
        if grid is not None and self._fd is not None:  # chunks that split samples
            rest = tuple(slice(0, n) for n in grid.shape[1:])
            for start, stop, offset in coalesce(ranges):
                box = (slice(start, stop), *rest)
                self._require_chunks(name, box, (grid.shape, grid.chunks))
                self._read_grid(grid, self._fd, [(box, out[offset : offset + stop - start])])
            return
        d = self._dataset(name)
        started = time.perf_counter()
        try:
            for start, stop, offset in coalesce(ranges):
                self._read_h5py(d, name, start, stop, out[offset : offset + stop - start])
        finally:
            self.clock.decode += time.perf_counter() - started  # HDF5 does every stage

    def _chunk_readers(self, name: str) -> tuple[RawChunks | None, RawGrid | None]:
        """Array ``name``'s raw readers by rows and by boxes (None: h5py reads it), as
        described (no h5py opened) or from the file opened here."""
        known = self._known(name)
        if known is not None:
            return known.raw, known.grid
        self._dataset(name)
        return self._raw.get(name), self._grid.get(name)

    def _read_raw(
        self,
        raw: RawChunks,
        fd: int,
        ranges: Sequence[tuple[int, int]],
        out: npt.NDArray[Any],
    ) -> None:
        step, where = raw.chunk_rows, f"{self.location}: array {raw.name!r}"
        if raw.checksum:  # only the chunks whose Fletcher-32 was checked depend on its state
            raw.check_file(fd)

        def by_h5py(chunk: int) -> bool:  # a filter skipped when written, or never written
            return chunk in raw.masked or (self._fill_missing and chunk not in raw.index)

        apart = by_h5py if raw.masked or self._fill_missing else None
        for start, stop, offset in row_runs(ranges, step, where):
            for first, end, alone in chunk_runs(start // step, -(-stop // step), apart):
                rows = min(end * step, stop) - first * step
                part, offset = out[offset : offset + rows], offset + rows
                if alone:  # HDF5 reads it (and does every stage)
                    started, at = time.perf_counter(), first * step
                    self._read_h5py(self._dataset(raw.name), raw.name, at, at + rows, part)
                    self.clock.decode += time.perf_counter() - started
                    continue
                try:  # the chunks between, in one call
                    raw.read_run_into(fd, first, end - first, part, self.clock)
                except (CorruptChunkError, MissingChunkError) as err:
                    raise type(err)(f"{self.location}: {err}") from err

    def _read_h5py(
        self, d: h5py.Dataset, name: str, start: int, stop: int, out: npt.NDArray[Any]
    ) -> None:
        if stop <= start:
            return
        self._require_chunks(name, (slice(start, stop),), (d.shape, d.chunks or d.shape))
        try:
            d.read_direct(out, np.s_[start:stop], np.s_[0 : stop - start])
        except OSError as err:
            raise CorruptChunkError(
                f"{self.location}: array {name!r}, {failed_chunks(d, start, stop)} (in samples "
                f"{start}..{stop - 1}) cannot be read (checksum or decoding failed): {err}"
            ) from err

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        self.read_regions(name, [region], [out])

    def read_regions(
        self, name: str, regions: Sequence[tuple[slice, ...]], outs: Sequence[npt.NDArray[Any]]
    ) -> None:
        with self._lock:
            where = f"{self.location}: array {name!r}"
            _, grid = self._chunk_readers(name)
            if grid is not None and self._fd is not None:
                boxes = []
                for region, out in zip(regions, outs, strict=True):
                    if check_region(region, grid.shape, out, where):
                        self._require_chunks(name, region, (grid.shape, grid.chunks))
                        boxes.append((region, out))
                self._read_grid(grid, self._fd, boxes)
                return
            d = self._dataset(name)
            for region, out in zip(regions, outs, strict=True):
                if not check_region(region, tuple(d.shape), out, where):
                    continue
                self._require_chunks(name, region, (d.shape, d.chunks or d.shape))
                try:
                    # h5py's fast reader (d[...]) beats read_direct's Python-level selection
                    # handling several-fold on the small boxes patch reads ask for
                    out[...] = d[region]
                except OSError as err:
                    box = [(s.start, s.stop) for s in region]
                    raise CorruptChunkError(f"{where}: box {box} cannot be read: {err}") from err

    def _read_grid(
        self, grid: RawGrid, fd: int, boxes: Sequence[tuple[tuple[slice, ...], npt.NDArray[Any]]]
    ) -> None:
        """Each ``(region, out)`` of ``boxes`` by raw chunk reads (:mod:`.grid`), the file's
        state checked once; chunks HDF5 must decode itself (a filter mask the pipeline lacks)
        through h5py."""

        def by_h5py(box: tuple[slice, ...], part: npt.NDArray[Any]) -> None:
            try:
                part[...] = self._dataset(grid.name)[box]
            except OSError as err:
                where = [(s.start, s.stop) for s in box]
                raise CorruptChunkError(
                    f"{self.location}: array {grid.name!r}, box {where} cannot be read: {err}"
                ) from err

        if boxes:
            fill = self._fill_value(grid.name) if self._fill_missing else None
            grid.read_boxes(fd, boxes, self.clock, fallback=by_h5py, fill=fill, where=self.location)

    def _fill_value(self, name: str) -> Any:
        known = self._known(name)
        return known.fill_value if known is not None else self._dataset(name).fillvalue

    def _require_chunks(
        self, name: str, box: tuple[slice, ...], grid: tuple[tuple[int, ...], tuple[int, ...]]
    ) -> None:
        """Raise if a chunk the box touches (of an array of ``grid``: shape, chunks) was never
        stored: it would read back as the fill value."""
        if not self._fill_missing:  # else as asked: HDF5's fill value
            where, fill = f"{self.location}: array {name!r}", lambda: self._fill_value(name)
            require_stored(self._missing.get(name), box, grid, where, fill)

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        with self._lock:
            return chunk_stored(self._dataset(name), chunk, self._missing.get(name, frozenset()))

    def read_path(self, name: str) -> str:
        with self._lock:
            return "h5py" if self._chunk_readers(name) == (None, None) else "raw"

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        self._datasets.clear()
        self._links.clear()
        self._infos.clear()
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
