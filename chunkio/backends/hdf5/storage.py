"""Where an HDF5 array's data lies, as the reader needs it before any read: the file h5py
opened (a raw descriptor of the same file), the chunks never written, the chunks it is read
by, and which chunk of some rows fails to read (error messages)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import h5py
import numpy as np

from ...errors import MissingChunkError
from ...util.numeric import ceil_div
from .raw import run_rows

__all__ = [
    "chunks_of",
    "failed_chunks",
    "first_bad_chunk",
    "missing_chunks",
    "open_same_file",
    "require_stored",
]


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
    chunks: tuple[int, ...],
    where: str,
) -> None:
    """Raise if a chunk box ``box`` touches is among the ``missing`` ones (never stored: HDF5
    would read it back as zeros); ``where`` names the file and array."""
    if not missing:
        return
    # a box with fewer slices than axes (whole rows) leaves the other axes unconstrained
    spans = [(s.start // c, ceil_div(s.stop, c)) for s, c in zip(box, chunks, strict=False)]
    for coords in sorted(missing):
        if all(a <= x < b for x, (a, b) in zip(coords, spans, strict=False)):
            chunk = coords[0] if not any(coords[1:]) else coords
            raise MissingChunkError(
                f"{where}: chunk {chunk} is missing from the file (HDF5 would read it back as "
                "zeros)"
            )


def chunks_of(d: h5py.Dataset) -> tuple[int, ...]:
    """An array's chunks; contiguous and compact data by runs of rows, as raw reads do."""
    if d.chunks is not None:
        return tuple(d.chunks)
    if not d.shape:
        return ()
    return (run_rows(d.shape, d.dtype), *d.shape[1:])
