"""Where an HDF5 array's data lies, as the reader needs it before any read: the file h5py
opened (a raw descriptor of the same file), the chunks never written, the chunks it is read
by, and which chunk of some rows fails to read (error messages)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import h5py
import numpy as np

from ...errors import DatasetNotFoundError, FormatError, MissingChunkError
from ...util.numeric import ceil_div
from ..base import ArrayInfo
from ..codec_names import hdf5_codec_info
from ..codec_table import HDF5_SAFE
from .raw import RawChunks, run_rows

__all__ = [
    "array_info_of",
    "chunk_stored",
    "chunk_runs",
    "chunks_of",
    "failed_chunks",
    "first_bad_chunk",
    "missing_chunks",
    "open_file",
    "open_same_file",
    "require_aligned",
    "row_runs",
    "require_stored",
]


def open_file(path: str) -> tuple[h5py.File, os.stat_result]:
    """``path`` opened read-only by h5py, and its ``stat`` taken right before (see
    :func:`open_same_file`); a file missing, held by a writer or not HDF5 raises, typed."""
    try:
        before = os.stat(path)
        # a shared lock where the file system has locks: a writer holding the file is still
        # refused below; a read-only mount without locks (NFS, Lustre) is read, whatever the
        # HDF5 build's default
        return h5py.File(path, "r", locking="best-effort"), before
    except FileNotFoundError as err:
        raise DatasetNotFoundError(f"no HDF5 dataset at {path}") from err
    except OSError as err:
        if "unable to lock file" in str(err):  # HDF5 file locking: errno 11
            raise FormatError(
                f"{path}: another process has the file open for writing (HDF5 file locking); "
                f"chunkio reads files nobody is writing: close the writer and open it again "
                f"({err})"
            ) from err
        raise FormatError(f"{path}: cannot open as HDF5: {err}") from err


def open_same_file(path: str, before: os.stat_result) -> int | None:
    """A raw descriptor of ``path`` if it is still the file h5py just opened (same inode and
    modification time as ``before``, taken right before), else None: raw reads then stay off,
    rather than reading one file with another file's chunk index."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    now = os.fstat(fd)
    same = (now.st_dev, now.st_ino, now.st_mtime_ns, now.st_size) == (
        before.st_dev,
        before.st_ino,
        before.st_mtime_ns,
        before.st_size,
    )
    if not same:
        os.close(fd)
        return None
    return fd


def first_bad_chunk(d: h5py.Dataset, start: int, stop: int, step: int) -> int | None:
    """The first chunk of rows ``[start, stop)`` that fails to read (error path only)."""
    for chunk in range(start // step, ceil_div(stop, step)):
        a, b = max(start, chunk * step), min(stop, (chunk + 1) * step)
        try:
            d[a:b]
        except OSError:
            return chunk
    return None


def failed_chunks(d: h5py.Dataset, start: int, stop: int) -> str:
    """The chunk of rows ``[start, stop)`` that fails to read, as messages name it (error
    path only)."""
    step = (d.chunks or d.shape)[0]
    bad = first_bad_chunk(d, start, stop, step)
    return f"chunk {bad}" if bad is not None else f"chunks {start // step}..{(stop - 1) // step}"


def missing_chunks(d: Any) -> frozenset[tuple[int, ...]]:
    """Chunk grid coordinates of ``d`` that hold no stored chunk (one cheap call if none)."""
    if not isinstance(d, h5py.Dataset) or d.chunks is None or d.is_virtual:
        return frozenset()
    grid = [ceil_div(s, c) for s, c in zip(d.shape, d.chunks, strict=True)]
    stored = d.id.get_num_chunks()
    if stored >= int(np.prod(grid, dtype=np.int64)):
        return frozenset()
    have = {
        tuple(o // c for o, c in zip(d.id.get_chunk_info(i).chunk_offset, d.chunks, strict=True))
        for i in range(stored)
    }
    return frozenset(itertools.product(*map(range, grid))) - have


def require_stored(
    missing: frozenset[tuple[int, ...]] | None,
    box: tuple[slice, ...],
    grid: tuple[tuple[int, ...], tuple[int, ...]],
    where: str,
    fill: Callable[[], Any],
) -> None:
    """Raise if a chunk box ``box`` touches is among the ``missing`` ones (never stored: HDF5
    would read it back as the fill value, which ``fill`` gives, asked only to say so);
    ``grid``: the array's shape and chunks; ``where`` names the file and array."""
    if not missing:
        return
    shape, chunks = grid
    # a box with fewer slices than axes (whole rows) leaves the other axes unconstrained
    spans = [(s.start // c, ceil_div(s.stop, c)) for s, c in zip(box, chunks, strict=False)]
    for coords in sorted(missing):
        if all(a <= x < b for x, (a, b) in zip(coords, spans, strict=False)):
            # chunks of whole rows are named by their row chunk, as raw reads name them
            rows = tuple(chunks[1:]) == tuple(shape[1:])
            raise MissingChunkError(
                f"{where}: chunk {coords[0] if rows else coords} is missing from the file "
                f"(HDF5 would read it back as {_as_filled(fill())})"
            )


def _as_filled(fill: Any) -> str:
    """What a never-written chunk reads back as, for a message.

    >>> _as_filled(np.int16(0)), _as_filled(np.float32(7.5))
    ('zeros', 'the fill value (7.5)')
    """
    try:
        zero = not np.any(fill)
    except (TypeError, ValueError):  # a compound value
        return f"the fill value ({fill!r})"
    return "zeros" if zero else f"the fill value ({fill})"


def chunks_of(d: h5py.Dataset) -> tuple[int, ...]:
    """An array's chunks; contiguous and compact data by runs of rows, as raw reads do."""
    if d.chunks is not None:
        return tuple(d.chunks)
    if not d.shape:
        return ()
    return (run_rows(d.shape, d.dtype), *d.shape[1:])


def array_info_of(d: h5py.Dataset, name: str, raw: RawChunks | None) -> ArrayInfo:
    """Array ``name`` (dataset ``d``, read by ``raw`` chunks where not None) as readers
    describe it; contiguous data is read in runs, and those are its chunks."""
    plist = d.id.get_create_plist()
    ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    return ArrayInfo(
        name=name,
        shape=tuple(d.shape),
        dtype=np.dtype(d.dtype),
        chunks=raw.chunks if raw is not None else chunks_of(d),
        codecs=tuple(HDF5_SAFE.get(f, str(f)) for f in ids),
        stored_nbytes=int(d.id.get_storage_size()),
        compression=hdf5_codec_info(
            [plist.get_filter(i)[:3:2] for i in range(plist.get_nfilters())]
        ),
    )


def require_aligned(start: int, stop: int, step: int, where: str) -> None:
    """Raise unless rows ``[start, stop)`` start on a chunk of ``step`` rows, as reads by
    whole stored chunks need (else one would be read from its first row on, shifted);
    ``where`` names the file and array. Reads are planned on the chunks the dataset was made
    with: a file rechunked since is refused here, not read from the wrong rows."""
    if start % step and stop > start:
        raise FormatError(
            f"{where} is stored in chunks of {step} rows, but rows {start}..{stop - 1} were "
            "asked for from inside one: they were planned on chunks the file no longer has "
            "(it changed since the dataset was made); make the dataset again"
        )


def row_runs(
    ranges: Sequence[tuple[int, int]], step: int, where: str
) -> list[tuple[int, int, int]]:
    """``(start, stop, offset in out)`` of ``ranges`` of rows, each checked to start on a
    chunk of ``step`` rows (:func:`require_aligned`; ``where`` names the file and array),
    those that touch at a chunk's edge merged: one read per run.

    >>> row_runs([(0, 4), (4, 8), (8, 10), (12, 16), (16, 16)], 4, "a.h5: array 'x'")
    [(0, 10, 0), (12, 16, 10)]
    """
    runs: list[tuple[int, int, int]] = []
    offset = 0
    for start, stop in ranges:
        if start % step and stop > start:
            require_aligned(start, stop, step, where)
        if runs and runs[-1][1] == start:  # (start is on a chunk's edge: checked above)
            runs[-1] = (runs[-1][0], stop, runs[-1][2])
        elif stop > start:
            runs.append((start, stop, offset))
        offset += stop - start
    return runs


def chunk_runs(
    first: int, end: int, apart: Callable[[int], bool] | None
) -> list[tuple[int, int, bool]]:
    """Chunks ``first .. end - 1`` as ``(first, end, alone)`` runs: each chunk ``apart``
    names alone (``alone`` true), those between as one run (``apart`` None: one run).

    >>> chunk_runs(0, 6, lambda c: c in (2, 3))
    [(0, 2, False), (2, 3, True), (3, 4, True), (4, 6, False)]
    >>> chunk_runs(3, 5, None)
    [(3, 5, False)]
    """
    if apart is None:
        return [(first, end, False)] if end > first else []
    runs: list[tuple[int, int, bool]] = []
    for chunk in range(first, end):
        alone = apart(chunk)
        if not alone and runs and not runs[-1][2]:
            runs[-1] = (runs[-1][0], chunk + 1, False)
        else:
            runs.append((chunk, chunk + 1, alone))
    return runs


def chunk_stored(
    d: h5py.Dataset, chunk: int | tuple[int, ...], missing: frozenset[tuple[int, ...]]
) -> bool:
    """Whether chunk ``chunk`` (along axis 0, or grid coordinates) of ``d`` is stored;
    ``missing``: its grid coordinates never written, listed when the array opened."""
    if d.chunks is None:  # contiguous or compact: written once, whole
        return d.id.get_offset() is not None or d.id.get_storage_size() > 0
    if not isinstance(chunk, int):
        return tuple(chunk) not in missing
    step = d.chunks[0]
    info = d.id.get_chunk_info_by_coord((chunk * step,) + (0,) * (d.ndim - 1))
    return info.byte_offset is not None
