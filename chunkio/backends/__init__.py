"""Storage backends behind one small protocol (:mod:`chunkio.backends.base`).

``open_reader`` / ``open_writer`` pick the backend from the location: ``memory://NAME`` is the
in-memory reference; paths ending in ``.h5``/``.hdf5``/``.hdf`` (or files starting with the
HDF5 signature) are HDF5; everything else - a local path, a URL, or a zarr store object - is
Zarr v3.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import DatasetNotFoundError
from .base import ArrayInfo, Compression, Reader, Writer

__all__ = [
    "ArrayInfo",
    "Compression",
    "Format",
    "Reader",
    "Writer",
    "detect_format",
    "open_reader",
    "open_writer",
]

Format = Literal["zarr", "hdf5", "memory"]

_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def detect_format(location: Any) -> Format:
    """Which backend serves ``location``.

    >>> detect_format("data/train.h5"), detect_format("data/train.zarr")
    ('hdf5', 'zarr')
    """
    if not isinstance(location, (str, os.PathLike)):
        return "zarr"  # a zarr Store object
    text = os.fspath(location)
    if text.startswith("memory://"):
        return "memory"
    if text.lower().endswith(_HDF5_SUFFIXES):
        return "hdf5"
    if os.path.isfile(text):
        with open(text, "rb") as fh:
            if fh.read(8) == _HDF5_SIGNATURE:
                return "hdf5"
    return "zarr"


def open_reader(
    location: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> Reader:
    """Open ``location`` read-only with the backend :func:`detect_format` picks."""
    fmt = detect_format(location)
    if fmt == "memory":
        from ._memory import MemoryReader

        return MemoryReader(os.fspath(location), trust_codecs=trust_codecs)
    if fmt == "hdf5":
        from ._hdf5 import HDF5Reader

        return HDF5Reader(os.fspath(location), trust_codecs=trust_codecs)
    from ._zarr import ZarrReader

    if isinstance(location, (str, os.PathLike)) and "://" not in os.fspath(location):
        if not os.path.exists(location):
            raise DatasetNotFoundError(f"no dataset at {os.fspath(location)}")
        location = os.fspath(location)
    return ZarrReader(location, storage_options=storage_options, trust_codecs=trust_codecs)


def open_writer(
    location: Any, *, format: Format | None = None, storage_options: Mapping[str, Any] | None = None
) -> Writer:
    """Open (creating if needed) ``location`` for writing."""
    fmt = format or detect_format(location)
    if fmt == "memory":
        from ._memory import MemoryWriter

        return MemoryWriter(os.fspath(location))
    if fmt == "hdf5":
        from ._hdf5 import HDF5Writer

        return HDF5Writer(os.fspath(location))
    from ._zarr import ZarrWriter

    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    return ZarrWriter(location, storage_options=storage_options)
