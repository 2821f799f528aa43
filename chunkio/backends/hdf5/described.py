"""A local HDF5 file as one process described it, for the other processes that read it.

Opening an array costs a reader its first look: the path walked link by link, the checks of
:mod:`.checks`, the chunk index read (:class:`~.raw.RawChunks`, :class:`~.grid.RawGrid`),
the never-written chunks listed. A dataset of many files pays that per file, per process,
each time a file is opened again: tens of milliseconds, more than reading a small file's
cells. The process that makes the dataset has done all of it already, so it hands the
result to the others (:meth:`.backend.HDF5Reader.description`, pickled with the dataset as
``ReaderOptions.documents``): per array, what the reader learnt (:class:`DescribedArray`),
and the file's state when it learnt it (device, inode, size, modification and change time).

A reader given a description (``HDF5Reader(documents=...)``) opens the file with one
``os.open`` and reads the described arrays' chunks by ``pread``; h5py is opened only for what
raw reads do not cover (a chunk HDF5 must decode itself, attributes). The description holds
only while the file keeps the state it was described in: any write through the file system
changes the change time (``utime`` cannot set it back), so a file replaced, rewritten or
appended to since is read as if no description were given, through h5py, every check run
again; but each array's shape, chunk shape and dtype are what the dataset's layout was made
with (its reads are planned chunk by chunk on them), so an array found with others there is a
:class:`~chunkio.errors.FormatError` (:func:`check_made`), never rows read from the wrong
place. Those three travel in every description (:func:`made_of`, a few bytes per array).

A description grows with the file's chunks (its chunk index: about 14 bytes each pickled,
about 160 in a process's memory); past :data:`MAX_DESCRIBED_CHUNKS` its arrays are left out,
and each process opens the file through h5py as without one (:func:`make_description`).
Nothing here opens h5py; modules may import what :mod:`chunkio.backends.hdf5` may.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ...errors import FormatError
from .._checksum import Fletcher32
from ..base import ArrayInfo
from .grid import RawGrid
from .raw import RawChunks

__all__ = [
    "MAX_DESCRIBED_CHUNKS",
    "DescribedArray",
    "Made",
    "as_description",
    "check_made",
    "file_state",
    "make_description",
    "made_of",
    "open_described",
]

#: (device, inode, size, modification ns, change ns): a file as it was when described
FileState = tuple[int, int, int, int, int]
#: (shape, chunk shape, dtype string) of an array as the dataset was made with it
Made = tuple[tuple[int, ...], tuple[int, ...], str]

#: stored chunks (every described array's, together) past which a file's description leaves
#: its arrays out. A description costs about 14 bytes a chunk pickled (sent to every worker)
#: and 160 in the parent, which holds it for the dataset's life; it saves each process h5py's
#: first look, about 2.5 us a chunk. 100,000 chunks: 1.4 MB, 16 MB, 0.25 s a process. A
#: 100k-cell h5ad chunked by 8 values (a million chunks) pickled 13.7 MB and grew the parent
#: by 160 MB; past the bound it pickles 3.6 kB, and each worker's first read takes ~2.5 s
MAX_DESCRIBED_CHUNKS = 100_000

_Reader = TypeVar("_Reader", RawChunks, RawGrid)


@dataclass(frozen=True)
class DescribedArray:
    """One array of a described file: what a reader learns on its first look at it.

    ``path``: its path inside the file, soft links resolved (arrays reached through an
    external link are not described: h5py follows those). ``raw``/``grid``: its raw chunk
    readers by rows and by boxes (None: h5py reads it; a 1-D array read by rows carries no
    ``grid``, which would double what is pickled per file). ``missing``: chunk grid
    coordinates never written."""

    info: ArrayInfo
    path: str
    raw: RawChunks | None
    grid: RawGrid | None
    fill_value: Any
    missing: frozenset[tuple[int, ...]]

    def fresh(self) -> DescribedArray:
        """A copy whose chunk readers have their own scratch memory and checked-checksum
        records (several readers of one file in a process each get one)."""
        # shallow copies, not dataclasses.replace: a reader opening one file after another
        # makes these per array per file, and replace runs every field through __init__
        copied = copy.copy(self)
        object.__setattr__(copied, "raw", _fresh(self.raw))
        object.__setattr__(copied, "grid", _fresh(self.grid))
        return copied


def made_of(info: ArrayInfo) -> Made:
    """What of array ``info`` a dataset's reads are planned on (:func:`check_made`)."""
    return (
        tuple(int(n) for n in info.shape),
        tuple(int(n) for n in info.chunks),
        np.dtype(info.dtype).str,
    )


def check_made(location: str, name: str, made: Made, now: Made) -> None:
    """Raise :class:`~chunkio.errors.FormatError` if array ``name`` of file ``location`` is
    ``now`` not what the dataset was ``made`` with: its reads, planned chunk by chunk on the
    old shape, chunks and dtype, would return rows from the wrong place."""
    if made == now:
        return
    what = ("shape", "chunk shape", "dtype")
    pairs = zip(what, made, now, strict=True)
    changed = [f"{k} {b!r}, made with {a!r}" for k, a, b in pairs if a != b]
    raise FormatError(
        f"{location}: array {name!r} changed since the dataset was made (it has "
        f"{'; '.join(changed)}): make the dataset again"
    )


def make_description(
    state: FileState,
    arrays: Mapping[str, DescribedArray],
    made: Mapping[str, Made],
    *,
    max_chunks: int | None = None,
) -> dict[str, Any]:
    """What :meth:`.backend.HDF5Reader.description` hands the other processes: the file's
    ``state``, its ``arrays`` unless they hold more than ``max_chunks`` stored chunks
    together (default :data:`MAX_DESCRIBED_CHUNKS`; then each process opens h5py), and what
    each array was ``made`` with (always: a few bytes each)."""
    limit = MAX_DESCRIBED_CHUNKS if max_chunks is None else max_chunks
    chunks = sum(len(reader.index) for a in arrays.values() for reader in (a.raw, a.grid) if reader)
    kept = dict(arrays) if chunks <= limit else {}
    return {"state": state, "arrays": kept, "made": dict(made)}


def _fresh(reader: _Reader | None) -> _Reader | None:
    if reader is None:
        return None
    copied = copy.copy(reader)
    copied._buffer = np.empty(0, np.uint8)
    copied._fletcher = Fletcher32()
    copied._verified = {}
    copied._file_state = ()
    return copied


def file_state(st: os.stat_result) -> FileState:
    """What must be unchanged for a description to hold."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def as_description(
    documents: Mapping[str, Any] | None,
) -> tuple[FileState | None, dict[str, DescribedArray], dict[str, Made]]:
    """``(state, arrays, made)`` of ``documents`` (what
    :meth:`.backend.HDF5Reader.description` returned in another process), each array fresh;
    ``(None, {}, {})`` when they describe no local HDF5 file."""
    if not documents or "state" not in documents:
        return None, {}, {}
    arrays = documents.get("arrays") or {}
    found = {
        str(name): array.fresh()
        for name, array in arrays.items()
        if isinstance(array, DescribedArray)
    }
    made = {str(name): m for name, m in (documents.get("made") or {}).items()}
    state = tuple(int(x) for x in documents["state"])
    if len(state) != 5:
        return None, {}, {}
    return (state[0], state[1], state[2], state[3], state[4]), found, made


def open_described(path: str, state: FileState) -> int | None:
    """A read-only descriptor of ``path`` if it is still the file described in ``state``,
    else None (missing, replaced or changed: the caller opens it through h5py)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    if file_state(os.fstat(fd)) != state:
        os.close(fd)
        return None
    return fd
