"""One array as ``chunkio info`` describes it, and a dataset's size on disk: shared by the
reports of chunkio datasets (:mod:`.dataset_report`) and of foreign stores
(:mod:`.foreign_report`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..backends import ArrayInfo, Reader
from ..backends.base import read_all
from ..format.layout import DatasetLayout, FieldInfo

__all__ = ["decoded_nbytes", "describe_array", "size_on_disk"]


def _stored(reader: Reader, name: str) -> int | None:
    """Stored bytes of an array whose info left them out (a remote store: a listing)."""
    stored = getattr(reader, "stored_nbytes", None)
    return int(stored(name)) if callable(stored) else None


def _compression(info: ArrayInfo) -> dict[str, Any] | None:
    """The array's codec, level and checksum as chunkio names them (``"lz4"``, ``"zstd"``,
    ``"blosc-lz4"``, ``"gzip"``, ``"none"``; ``"crc32c"``, ``"fletcher32"``)."""
    c = info.compression
    if c is None:
        return None
    return {"codec": c.codec, "level": c.level, "checksum": c.checksum, "name": str(c)}


def _codec_names(info: ArrayInfo) -> list[str]:
    """The stored codecs, as the backend names them: Zarr codecs (JSON), HDF5 filters."""
    names = []
    for codec in info.codecs:
        try:
            spec = json.loads(codec)
        except ValueError:
            names.append(codec)
            continue
        names.append(_codec_label(spec))
    return names


def _codec_label(spec: Mapping[str, Any]) -> str:
    """``zstd(5)``; a sharded array's inner codecs in brackets:
    ``sharding_indexed[bytes+zstd(0)]``."""
    conf = spec.get("configuration") or {}
    if spec["name"] == "sharding_indexed":
        inner = "+".join(_codec_label(c) for c in conf.get("codecs") or [])
        return f"sharding_indexed[{inner}]"
    level = conf.get("level", conf.get("clevel"))
    return str(spec["name"]) + ("" if level is None else f"({level})")


def size_on_disk(path: Any) -> int | None:
    """Bytes of every file at a local ``path`` (metadata included); ``None`` for a URL."""
    if not isinstance(path, (str, os.PathLike)) or "://" in os.fspath(path):
        return None
    text = os.fspath(path)
    if os.path.isfile(text):
        return os.path.getsize(text)
    total = 0
    for folder, _, files in os.walk(text):
        total += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
    return total


def decoded_nbytes(
    reader: Reader, layout: DatasetLayout, arrays: Mapping[str, Mapping[str, Any]]
) -> int:
    """Bytes the dataset holds decoded: every array's (``arrays``: :func:`describe_array` of
    each), except that an encoded image field counts its pixels (C x H x W per image), not
    the byte region its encoded images are stored in nor their spans and shapes."""
    total, counted = 0, set[str]()
    for f in layout.fields:
        if f.roles.has("bytes"):  # encoded images
            counted.update(f.array_names())
            total += _pixel_nbytes(reader, f, layout.num_samples)
    return total + sum(int(a["nbytes"]) for n, a in arrays.items() if n not in counted)


def _pixel_nbytes(reader: Reader, field: FieldInfo, num_samples: int) -> int:
    """Decoded bytes of encoded image field ``field``: from its one sample shape, or from
    each image's stored shape (images of several sizes)."""
    itemsize = np.dtype(field.dtype).itemsize
    if field.sample_shape is not None:
        return num_samples * int(np.prod(field.sample_shape, dtype=np.int64)) * itemsize
    shapes = read_all(reader, field.roles.shapes).astype(np.int64)
    return int(np.prod(shapes, axis=1).sum()) * itemsize


def describe_array(reader: Reader, name: str) -> dict[str, Any]:
    """Array ``name`` as :func:`info` lists it: shape, dtype, chunks, ``compression``,
    ``codecs``, ``checksum``, ``nbytes`` (decoded) and ``stored_nbytes``."""
    a = reader.array_info(name)
    codecs = _codec_names(a)
    compression = _compression(a)
    return {
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "chunks": list(a.chunks),
        "compression": compression,
        "codecs": codecs,
        "checksum": any(c.startswith(("crc32c", "fletcher32")) for c in codecs)
        or bool(compression and compression["checksum"]),
        "nbytes": a.nbytes,
        "stored_nbytes": a.stored_nbytes if a.stored_nbytes is not None else _stored(reader, name),
    }
