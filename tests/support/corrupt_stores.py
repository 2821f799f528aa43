"""Stores rewritten the way a hostile or damaged file would have them, checksums kept valid.

:func:`corrupt` copies a chunkio store and rewrites one of its arrays through zarr-python
(which recomputes the crc32c of every chunk it writes) or h5py (Fletcher-32 likewise), after
a change made in place on its values: :func:`set_to`, :func:`add_to`, :func:`swap`. So the
reader meets numbers that are wrong, not bytes that fail a checksum.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin  # noqa: F401 (the LZ4 filter chunkio's HDF5 files are written with)
import numpy as np
import zarr

#: a change made in place on an array's values
Change = Callable[[np.ndarray[Any, Any]], None]


def corrupt(src: Path, dst_dir: Path, array: str, change: Change) -> Path:
    """A copy of the store ``src`` in ``dst_dir`` whose ``array`` is rewritten after
    ``change``."""
    dst = dst_dir / src.name
    if src.is_dir():
        shutil.copytree(src, dst)
        a = zarr.open_array(dst / array, mode="r+")
        values = a[...]
        change(values)
        a[...] = values
    else:
        shutil.copy(src, dst)
        with h5py.File(dst, "r+") as f:
            values = f[array][...]
            change(values)
            f[array][...] = values
    return dst


def set_to(index: Any, value: Any) -> Change:
    """``values[index] = value``."""

    def change(v: np.ndarray[Any, Any]) -> None:
        v[index] = value

    return change


def add_to(index: Any, delta: int) -> Change:
    """``values[index] += delta``."""

    def change(v: np.ndarray[Any, Any]) -> None:
        v[index] += delta

    return change


def swap(i: int, j: int) -> Change:
    """Rows ``i`` and ``j`` exchanged."""

    def change(v: np.ndarray[Any, Any]) -> None:
        v[[i, j]] = v[[j, i]]

    return change


def read_every_row(ds: Any, batch: int = 5) -> list[Any]:
    """Every sample of the dataset ``ds``, in order, ``batch`` at a time."""
    return [
        ds.__getitems__(list(range(a, min(a + batch, len(ds))))) for a in range(0, len(ds), batch)
    ]
