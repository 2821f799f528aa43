"""HDF5 backend, writing side: :class:`HDF5Writer` and the canonical rewrite at publish.

HDF5 has one writer, the converting process; :func:`write_canonical` makes the published
file's bytes depend only on its content (see :mod:`chunkio.convert.durability.staging`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import h5py
import numpy.typing as npt

from ...errors import FormatError
from ..base import ArraySpec, Writer
from ..codec_table import hdf5_filters
from .backend import decode_attrs

__all__ = ["HDF5Writer", "write_canonical"]


class HDF5Writer(Writer):
    """Creates and fills a chunkio HDF5 file. HDF5 has one writer: the converting process."""

    def __init__(self, location: str) -> None:
        self.location = str(location)
        self._file = h5py.File(self.location, "a")

    def create(self, spec: ArraySpec) -> None:
        if spec.name in self._file:
            del self._file[spec.name]
        # HDF5 refuses chunks larger than a fixed-size dataset (e.g. an empty dataset, or
        # fewer samples than one chunk) unless the maximum shape leaves room for them.
        maxshape = tuple(max(s, c) for s, c in zip(spec.shape, spec.chunks, strict=True))
        self._file.create_dataset(
            spec.name,
            shape=spec.shape,
            dtype=spec.dtype,
            chunks=spec.chunks,
            fillvalue=0,
            maxshape=None if maxshape == spec.shape else maxshape,
            **hdf5_filters(spec.compression),
        )

    def flush(self) -> None:
        """Push HDF5's caches to the OS, so written chunks survive the process dying."""
        self._file.flush()

    def write_block(self, name: str, start: int, data: npt.NDArray[Any]) -> None:
        self._file[name][start : start + len(data)] = data

    def write_region(self, name: str, region: tuple[Any, ...], data: npt.NDArray[Any]) -> None:
        self._file[name][region] = data

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        for key, value in attrs.items():
            self._file.attrs[key] = json.dumps(value) if isinstance(value, (dict, list)) else value
        self._file.flush()

    def attrs(self) -> dict[str, Any]:
        return decode_attrs(self._file.attrs)

    def close(self) -> None:
        if self._file.id.valid:
            self._file.close()


def write_canonical(src: str, dst: str) -> None:
    """Copy the chunkio HDF5 file ``src`` to a new file ``dst`` whose bytes depend only on
    its content: attributes, arrays and chunks in sorted order, chunks copied as stored.

    Where a chunk lands in an HDF5 file depends on the order chunks were written and on the
    space a killed writer leaked, so a resumed or parallel conversion would otherwise differ
    byte for byte from an uninterrupted one. Nothing is decoded or re-encoded: each chunk's
    stored bytes move as they are (:meth:`h5py.h5d.DatasetID.read_direct_chunk`). With the
    same HDF5 library, equal content gives equal files.
    """
    with h5py.File(src, "r") as fin, h5py.File(dst, "w") as fout:
        _copy_attrs(fin.attrs, fout.attrs)
        for name in sorted(fin):
            link = fin.get(name, getlink=True)
            obj = fin[name]
            if not isinstance(link, h5py.HardLink) or not isinstance(obj, h5py.Dataset):
                raise FormatError(f"{src}: {name!r} is not an array; chunkio files hold arrays")
            _copy_dataset(obj, fout, name)


def _copy_attrs(src: Any, dst: Any) -> None:
    for key in sorted(src):
        dst.create(key, src[key], dtype=src.get_id(key).dtype)


def _copy_dataset(d: h5py.Dataset, fout: h5py.File, name: str) -> None:
    dcpl = d.id.get_create_plist()
    dcpl.set_obj_track_times(False)  # no creation or modification times in the file
    out = h5py.Dataset(
        h5py.h5d.create(fout.id, name.encode(), d.id.get_type(), d.id.get_space(), dcpl=dcpl)
    )
    _copy_attrs(d.attrs, out.attrs)
    if d.chunks is None:
        out[...] = d[...]
        return
    for offset in _stored_chunk_offsets(d):
        mask, data = d.id.read_direct_chunk(offset)
        out.id.write_direct_chunk(offset, data, mask)


def _stored_chunk_offsets(d: h5py.Dataset) -> list[tuple[int, ...]]:
    """Offsets of every stored chunk of ``d``, sorted."""
    found: list[tuple[int, ...]] = []
    if hasattr(d.id, "chunk_iter"):  # one pass (HDF5 >= 1.14); get_chunk_info(i) searches
        d.id.chunk_iter(lambda info: found.append(tuple(info.chunk_offset)))
    else:  # pragma: no cover - older HDF5
        found = [tuple(d.id.get_chunk_info(i).chunk_offset) for i in range(d.id.get_num_chunks())]
    return sorted(found)
