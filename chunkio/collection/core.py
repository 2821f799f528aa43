"""The per-process reads of a dataset of many files: one read core per file, opened on that
file's first read in this process, as many open at once as the chunks the loader's order holds
(at least :data:`MAX_OPEN_FILES`, at most :data:`MAX_OPEN_CEILING`; the least recently used
closed first), so hundreds of files cost neither hundreds of handles nor memory per worker,
and the file-aware order (:mod:`chunkio.sampling.file_order`) opens each about once per pass.
A batch is split by file, each file's samples read by its core (a one-chunk file read whole
on a pass's first read of it), and the parts scattered into the batch (categorical codes
remapped to the dataset's categories)."""

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

__all__ = ["MAX_OPEN_FILES", "FileSetCore"]

#: files each process keeps open at once, at least
MAX_OPEN_FILES = 32
#: ... and at most, whatever the chunks it holds (a file handle is a descriptor, and HDF5's
#: metadata cache per open file is ~1 MB)
MAX_OPEN_CEILING = 512
#: decoded bytes of one-chunk files a process keeps read whole (_whole_rows), at most; a file
#: over 1/16 of it is read as a chunked one
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
        #: files of one chunk (or none) along the order: read whole by a loader (_whole_rows)
        self._one_chunk = [p.layout_chunks <= 1 for p in files.parts]
        self._whole: dict[tuple[int, tuple[str, ...]], _Whole] = {}
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
            for key in [k for k in self._whole if k[0] == gone]:
                del self._whole[key]  # what is held of a file goes with its handle
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
        return found

    @property
    def stats(self) -> ReadStats:
        """What this process has read, over every file."""
        total = dataclasses.replace(self._closed, per_field=dict(self._closed.per_field))
        for core in self._open.values():
            _add(total, core.stats)
        return total

    def close(self) -> None:
        self._whole.clear()
        for core in self._open.values():
            _add(self._closed, core.stats)
            core.close()
        self._open.clear()

    def _split(self, indices: Any) -> tuple[npt.NDArray[np.int64], list[tuple[int, Any]]]:
        idx = normalize_indices(indices, self.layout.num_samples)
        part_of = np.searchsorted(self._starts, idx, side="right") - 1
        return idx, [(int(p), np.flatnonzero(part_of == p)) for p in np.unique(part_of)]

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
        idx, groups = self._split(indices)
        result: dict[str, Any] = {name: (out or {}).get(name) for name in fields}
        sparse: dict[str, list[tuple[Any, CSRBatch]]] = {}  # CSR rows, per field and file
        for part, rows in groups:
            start = int(self._starts[part])
            local = idx[rows] - start
            got = self._whole_rows(part, fields, local, epoch) if once and not transform else None
            if got is None:
                got = self.core(part).read(
                    fields, local, once=once, transform=transform, epoch=epoch, first=start
                )
                got = {name: self.files.remap(part, name, v) for name, v in got.items()}
            for name, value in got.items():
                if isinstance(value, CSRBatch):
                    sparse.setdefault(name, []).append((rows, value))
                    continue
                if isinstance(value, list):
                    if result[name] is None:
                        result[name] = [None] * len(idx)
                    for j, row in zip(rows.tolist(), value, strict=True):
                        result[name][j] = row
                    continue
                if result[name] is None:
                    dtype = self.layout.field(name).dtype
                    result[name] = np.empty((len(idx), *value.shape[1:]), dtype)
                result[name][rows] = value
        for name, pieces in sparse.items():
            result[name] = join_rows(pieces, len(idx))
        for name in fields:
            if result[name] is None:  # an empty batch
                result[name] = self.core(0).read([name], [])[name]
        return result

    def _whole_rows(
        self, part: int, fields: Sequence[str], local: npt.NDArray[np.int64], epoch: int
    ) -> dict[str, Any] | None:
        """Rows ``local`` of a file of one chunk, read whole on its first read of a pass and
        kept until every row was served (``None``: read it as a chunked file).

        Reading a one-chunk file whole costs what decoding its chunk costs; the file-aware
        order (:mod:`chunkio.sampling.file_order`) then takes a few rows of it from every
        batch for a while, and each is a NumPy gather here instead of a planned read (the
        per-call cost that made a batch over many small files slow)."""
        key = (part, tuple(fields))
        held = self._whole.get(key)
        if held is not None and held.epoch != epoch:  # a pass left unfinished: read again
            held = None
        if held is None:
            layout = self.files.parts[part].layout
            n = layout.num_samples
            nbytes = n * sum(f.sample_nbytes for f in layout.fields)
            if not self._one_chunk[part] or nbytes > WHOLE_FILES_BYTES // 16:
                return None
            start = int(self._starts[part])
            got = self.core(part).read(fields, np.arange(n), once=True, epoch=epoch, first=start)
            if not all(isinstance(v, np.ndarray) for v in got.values()):
                self._one_chunk[part] = False  # ragged or CSR rows: the planned read
                return None
            values = {name: self.files.remap(part, name, v) for name, v in got.items()}
            held_bytes = sum(w.nbytes for w in self._whole.values())
            while self._whole and (
                len(self._whole) >= self.max_open or held_bytes + nbytes > WHOLE_FILES_BYTES
            ):  # the oldest first: a lane has moved past it
                held_bytes -= self._whole.pop(next(iter(self._whole))).nbytes
            held = self._whole[key] = _Whole(values, n, epoch, nbytes)
        held.left -= local.size
        if held.left <= 0:  # every row served once: a loader's pass asks for none again
            del self._whole[key]
        return {name: v[local] for name, v in held.values.items()}

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

    def prefetch(self, fields: Sequence[str], indices: Any) -> None:
        idx, groups = self._split(indices)
        for part, rows in groups:
            if part in self._open:  # ahead of a read, but never opening a file for it
                self._open[part].prefetch(fields, idx[rows] - self._starts[part])


@dataclasses.dataclass
class _Whole:
    """A one-chunk file's rows, read whole, and how many are still to be served."""

    values: dict[str, npt.NDArray[Any]]
    left: int
    epoch: int
    nbytes: int


def _add(total: ReadStats, more: ReadStats) -> None:
    for f in dataclasses.fields(ReadStats):
        value = getattr(more, f.name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            setattr(total, f.name, getattr(total, f.name) + value)
    for key, count in more.per_field.items():
        total.per_field[key] = total.per_field.get(key, 0) + count
