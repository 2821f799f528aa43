"""The per-process reads of a dataset of many files: one read core per file, opened on that
file's first read in this process, as many open at once as the chunks the loader's order holds
(at least :data:`MAX_OPEN_FILES`, at most :data:`MAX_OPEN_CEILING`; the least recently used
closed first), so hundreds of files cost neither hundreds of handles nor memory per worker,
and the file-aware order (:mod:`chunkio.sampling.file_order`) opens each about once per pass.
A batch is split by file, each file's samples read by its core, and the parts scattered into
the batch (categorical codes remapped to the dataset's categories); a loader's rows of
one-chunk files are served from the files read whole (:mod:`.held`), one gather per field.
"""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..read import ReadCore, ReadStats
from ..read.planning import normalize_indices
from ..read.sparse import CSRBatch, join_rows
from ..transforms.sample import FieldTransform
from .files import FileSet
from .held import HeldRows

__all__ = ["MAX_OPEN_FILES", "FileSetCore"]

#: files each process keeps open at once, at least
MAX_OPEN_FILES = 32
#: ... and at most, whatever the chunks it holds (a file handle is a descriptor, and HDF5's
#: metadata cache per open file is ~1 MB)
MAX_OPEN_CEILING = 512
#: decoded bytes of one-chunk files a process keeps read whole (.held), at most; a file over
#: 1/16 of it is read as a chunked one
WHOLE_FILES_BYTES = 256 << 20


class FileSetCore:
    """Serves batches of a :class:`FileSet` in the current process (the handle a
    :class:`chunkio.ChunkDataset` of several files opens in each process)."""

    def __init__(
        self,
        files: FileSet,
        *,
        cache_chunks: int = 0,
        preload_bytes: int = 0,
        decode_threads: int = 1,
        max_open: int = MAX_OPEN_FILES,
    ) -> None:
        self.pid = os.getpid()
        self.files = files
        self.layout = files.layout
        self._starts = files.starts
        self._settings = {
            "cache_chunks": cache_chunks,
            "preload_bytes": preload_bytes,
            "decode_threads": decode_threads,
        }
        # the loader sizes cache_chunks to the chunks its order needs held at once
        # (.sampling.file_order keeps those in a few files per lane), and each held chunk
        # lies in one file: that many files open, and a file is opened once per pass
        needed = min(cache_chunks, len(files.parts), MAX_OPEN_CEILING)
        self.max_open = max(1, int(max_open), needed)
        self._open: OrderedDict[int, ReadCore] = OrderedDict()
        self._closed = ReadStats()  # what closed cores had read
        #: files of one chunk (or none) along the order: read whole by a loader (.held)
        self._one_chunk = np.array([p.layout_chunks <= 1 for p in files.parts], bool)
        self._held: HeldRows | None = None
        #: some file opened here fetches ahead (a remote one): what :attr:`prefetches` says
        self._remote = False
        #: files opened in this process, in all (a file closed and read again counts twice)
        self.opened = 0

    def core(self, part: int) -> ReadCore:
        """File ``part``'s read core in this process (opened on first use)."""
        found = self._open.get(part)
        if found is not None:
            self._open.move_to_end(part)
            return found
        while len(self._open) >= self.max_open:
            gone, oldest = self._open.popitem(last=False)
            if self._held is not None:
                self._held.drop(gone)  # what is held of a file goes with its handle
            _add(self._closed, oldest.stats)
            oldest.close()
        info = self.files.parts[part]
        found = self._open[part] = ReadCore(
            info.location,
            info.layout,
            reader=info.options,
            cache_chunks=self._settings["cache_chunks"],
            preload_bytes=self._settings["preload_bytes"],
            decode_threads=self._settings["decode_threads"],
        )
        self.opened += 1
        self._remote = self._remote or found.prefetches
        return found

    @property
    def stats(self) -> ReadStats:
        """What this process has read, over every file."""
        total = dataclasses.replace(self._closed, per_field=dict(self._closed.per_field))
        for core in self._open.values():
            _add(total, core.stats)
        return total

    def close(self) -> None:
        self._held = None
        for core in self._open.values():
            _add(self._closed, core.stats)
            core.close()
        self._open.clear()

    def _split(self, indices: Any) -> tuple[npt.NDArray[np.int64], list[tuple[int, Any]]]:
        """The indices, and per file they fall in (ascending) the positions of its samples
        in them (ascending)."""
        idx = normalize_indices(indices, self.layout.num_samples)
        return idx, self._groups(self._part_of(idx), np.arange(len(idx)))

    def _part_of(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        found: npt.NDArray[np.int64] = np.searchsorted(self._starts, idx, side="right") - 1
        return found

    @staticmethod
    def _groups(part_of: npt.NDArray[np.int64], rows: Any) -> list[tuple[int, Any]]:
        """``rows`` of a batch grouped by file (``part_of`` each row's): one sort, not a pass
        over the batch per file (a batch of a mixing order touches tens of files)."""
        if not len(rows):
            return []
        order = rows[np.argsort(part_of[rows], kind="stable")]
        parts = part_of[order]
        cuts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), len(order)]
        firsts = parts[cuts[:-1]].tolist()
        return [(p, order[a:b]) for p, a, b in zip(firsts, cuts[:-1], cuts[1:], strict=True)]

    def read(
        self,
        fields: Sequence[str],
        indices: Any,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        once: bool = False,
        transform: FieldTransform | None = None,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """As :meth:`chunkio.read.ReadCore.read`, over the files."""
        idx = normalize_indices(indices, self.layout.num_samples)
        part_of = self._part_of(idx)
        result: dict[str, Any] = {name: (out or {}).get(name) for name in fields}
        rest = np.arange(len(idx))
        if once and not transform and len(idx):  # a loader's pass: held files, one gather
            rest = self._read_held(fields, idx, part_of, epoch, result)
        sparse: dict[str, list[tuple[Any, CSRBatch]]] = {}  # CSR rows, per field and file
        for part, rows in self._groups(part_of, rest):
            start = int(self._starts[part])
            got = self.core(part).read(
                fields, idx[rows] - start, once=once, transform=transform, epoch=epoch, first=start
            )
            for name, value in got.items():
                value = self.files.remap(part, name, value)
                if isinstance(value, CSRBatch):
                    sparse.setdefault(name, []).append((rows, value))
                elif isinstance(value, list):
                    if result[name] is None:
                        result[name] = [None] * len(idx)
                    for j, row in zip(rows.tolist(), value, strict=True):
                        result[name][j] = row
                else:
                    self._place(result, name, rows, value, len(idx))
        for name, pieces in sparse.items():
            result[name] = join_rows(pieces, len(idx))
        for name in fields:
            if result[name] is None:  # an empty batch
                result[name] = self.core(0).read([name], [])[name]
        return result

    def _place(
        self, result: dict[str, Any], name: str, rows: Any, value: npt.NDArray[Any], n: int
    ) -> None:
        """``value`` into rows ``rows`` of field ``name``'s batch of ``n`` (made on first
        use)."""
        if result[name] is None:
            dtype = self.layout.field(name).dtype
            result[name] = np.empty((n, *value.shape[1:]), dtype)
        result[name][rows] = value

    def _read_held(
        self,
        fields: Sequence[str],
        idx: npt.NDArray[np.int64],
        part_of: npt.NDArray[np.int64],
        epoch: int,
        result: dict[str, Any],
    ) -> npt.NDArray[np.int64]:
        """Serve the batch's rows of one-chunk files from the files read whole (each read on
        its pass's first read of it: :mod:`.held`); the positions of the other rows."""
        held = self._held
        if held is None or held.fields != tuple(fields):
            dtypes = {name: self.layout.field(name).dtype for name in fields}
            held = self._held = HeldRows(
                fields, dtypes, num_files=len(self.files.parts), budget=WHOLE_FILES_BYTES
            )
        parts, counts = np.unique(part_of, return_counts=True)
        found = held.holds(parts, epoch)
        for part in parts[~found & self._one_chunk[parts]].tolist():
            self._read_whole(held, part, fields, epoch)
        found = held.holds(parts, epoch)
        if not found.any():
            return np.arange(len(idx))
        mine = found[np.searchsorted(parts, part_of)]
        rows = np.flatnonzero(mine)
        where = held.positions(part_of[rows], idx[rows] - self._starts[part_of[rows]])
        for name in fields:
            self._place(result, name, rows, held.take(name, where), len(idx))
        held.served(parts[found], counts[found])
        return np.flatnonzero(~mine)

    def _read_whole(self, held: HeldRows, part: int, fields: Sequence[str], epoch: int) -> None:
        """Read one-chunk file ``part`` whole into ``held`` (reading it whole costs what
        decoding its chunk costs); a file too large, or with ragged or CSR rows, is read by
        planned reads from then on."""
        layout = self.files.parts[part].layout
        n = layout.num_samples
        if n * sum(f.sample_nbytes for f in layout.fields) > WHOLE_FILES_BYTES // 16:
            self._one_chunk[part] = False
            return
        start = int(self._starts[part])
        got = self.core(part).read(fields, np.arange(n), once=True, epoch=epoch, first=start)
        if not all(isinstance(v, np.ndarray) for v in got.values()):
            self._one_chunk[part] = False  # ragged or CSR rows: the planned read
            return
        held.add(part, {name: self.files.remap(part, name, v) for name, v in got.items()}, epoch)

    def encoded(self, name: str, indices: Any) -> tuple[list[Any], npt.NDArray[np.int64]]:
        """As :meth:`chunkio.read.ReadCore.encoded`, over the files."""
        idx, groups = self._split(indices)
        data: list[Any] = [None] * len(idx)
        shapes: npt.NDArray[np.int64] | None = None
        for part, rows in groups:
            got, got_shapes = self.core(part).encoded(name, idx[rows] - self._starts[part])
            for j, blob in zip(rows.tolist(), got, strict=True):
                data[j] = blob
            if shapes is None:
                shapes = np.empty((len(idx), *got_shapes.shape[1:]), np.int64)
            shapes[rows] = got_shapes
        return data, shapes if shapes is not None else np.empty((0, 3), np.int64)

    @property
    def prefetches(self) -> bool:
        """As :attr:`chunkio.read.ReadCore.prefetches`: once a file opened here fetches
        ahead (a remote one; :meth:`prefetch` asks only open files). Local files fetch
        nothing ahead, and ring workers would split every queued batch by file for nothing."""
        return self._remote

    def prefetch(self, fields: Sequence[str], indices: Any) -> None:
        idx, groups = self._split(indices)
        for part, rows in groups:
            if part in self._open:  # ahead of a read, but never opening a file for it
                self._open[part].prefetch(fields, idx[rows] - self._starts[part])


#: the counters of :class:`ReadStats` summed over files (its numbers; not its clock)
_COUNTS = tuple(
    f.name
    for f in dataclasses.fields(ReadStats)
    if isinstance(f.default, int | float) and not isinstance(f.default, bool)
)


def _add(total: ReadStats, more: ReadStats) -> None:
    for name in _COUNTS:  # once per file closed: a dataset of many files closes many
        setattr(total, name, getattr(total, name) + getattr(more, name))
    for key, count in more.per_field.items():
        total.per_field[key] = total.per_field.get(key, 0) + count
