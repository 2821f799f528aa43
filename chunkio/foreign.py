"""Stores chunkio did not write, read in place: a layout from the arrays themselves.

A user's own HDF5 file or Zarr store (v2 or v3, sharded or not) has no ``chunkio`` attribute;
``fields`` names its arrays instead, as a mapping ``{"image": "train/images", ...}`` (field
name -> array path) or a list of array paths (each field named by the path's last part).
Axis 0 of every named array is the sample axis and all must have the same length. Each field
keeps its own chunking; the dataset's chunk-aware order follows the chunks of the field that
costs most to read (the largest chunks in bytes), so every batch still decodes each chunk it
needs once. Nothing is written to the store.

Values are returned as stored, as h5py and zarr-python return them: attributes are not
applied. A variable xarray wrote with a CF encoding (``scale_factor``, ``add_offset``,
``_FillValue`` attributes; time as int64 counts of ``units``) comes back as its stored
integers, e.g. ``t2m`` as int16: decode a batch with those attributes where the model needs
physical values (``x * scale_factor + add_offset``, the fill value masked). Chunks a Zarr store
never wrote (xarray and zarr skip chunks equal to the fill value) read as the fill value.

HDF5: soft links inside the file are followed; external links, external raw storage and
virtual datasets with sources in other files are refused unless ``trust_codecs=True``; a
filter or Zarr codec this installation cannot decode is an ``OptionalDependencyError`` naming
the package to install. All of it is checked when the dataset is made, before any worker
starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .backends import ArrayInfo, Reader
from .errors import FormatError, MissingFieldError
from .layout import DatasetLayout, FieldInfo
from .names import validate_field_name

__all__ = [
    "FieldSelection",
    "field_arrays",
    "fields_from_words",
    "foreign_layout",
    "list_arrays",
]

#: what ``fields`` may be for a store chunkio did not write
FieldSelection = Mapping[str, str] | Sequence[str]


def field_arrays(fields: FieldSelection, where: str) -> dict[str, str]:
    """Field name -> array path, from a mapping or a list of array paths.

    >>> field_arrays(["train/images", "train/labels"], "x")
    {'images': 'train/images', 'labels': 'train/labels'}
    """
    if isinstance(fields, Mapping):
        pairs = [(str(k), str(v)) for k, v in fields.items()]
    else:
        pairs = [(str(p).rstrip("/").rsplit("/", 1)[-1], str(p)) for p in fields]
    out: dict[str, str] = {}
    for name, path in pairs:
        validate_field_name(name, where=where)
        if name in out:
            raise FormatError(
                f"{where}: two arrays would be field {name!r} ({out[name]!r}, {path!r}); "
                "name them with a mapping, e.g. fields={'image': 'a/x', 'label': 'b/x'}"
            )
        out[name] = path.strip("/")
    if not out:
        raise FormatError(f"{where}: fields names no array")
    return out


def fields_from_words(words: Sequence[str]) -> FieldSelection:
    """``fields`` from command-line words: ``NAME=PATH`` pairs (a mapping, in that order) or
    bare array paths (a list); one or the other, not both.

    >>> fields_from_words(["image=train/images", "label=train/labels"])
    {'image': 'train/images', 'label': 'train/labels'}
    >>> fields_from_words(["train/images", "train/labels"])
    ['train/images', 'train/labels']
    """
    named = ["=" in w for w in words]
    if any(named) and not all(named):
        raise FormatError(
            "--fields: give every field as NAME=PATH or every one as a bare PATH; "
            f"got {list(words)}"
        )
    if not all(named):
        return list(words)
    pairs = [w.split("=", 1) for w in words]
    if any(not name or not path for name, path in pairs):
        raise FormatError(f"--fields: NAME=PATH needs both parts; got {list(words)}")
    return {name: path for name, path in pairs}


def list_arrays(reader: Reader) -> str:
    """The store's arrays with their shapes, dtypes and chunks, for error messages."""
    rows = []
    for name in reader.array_names():
        try:
            info = reader.array_info(name)
        except Exception as err:  # a group, a link or an array chunkio refuses: say so
            rows.append(f"{name} ({type(err).__name__})")
            continue
        rows.append(f"{name} {info.shape} {info.dtype} chunks {info.chunks}")
    return "; ".join(rows) or "none"


def foreign_layout(reader: Reader, fields: FieldSelection | None) -> DatasetLayout:
    """The layout of the arrays ``fields`` names in a store chunkio did not write."""
    where = reader.location
    if fields is None or isinstance(fields, str):
        raise FormatError(
            f"{where}: not a chunkio dataset, so fields must name its arrays, e.g. "
            "fields={'image': 'train/images', 'label': 'train/labels'}; arrays found: "
            f"{list_arrays(reader)}"
        )
    arrays = field_arrays(fields, where)
    infos = {name: _array_info(reader, path) for name, path in arrays.items()}
    lengths = {arrays[n]: (i.shape[0] if i.shape else None) for n, i in infos.items()}
    if len(set(lengths.values())) != 1 or None in lengths.values():
        raise FormatError(
            f"{where}: the arrays must have the same length along axis 0 (the sample axis); "
            f"got {lengths}"
        )
    fields_info = tuple(_field(n, arrays[n], i, where) for n, i in infos.items())
    costly = max(infos.values(), key=_read_cost)
    num_samples = int(costly.shape[0])
    return DatasetLayout(
        num_samples=num_samples,
        samples_per_chunk=max(1, min(int(costly.chunks[0]), num_samples)),
        fields=fields_info,
        foreign=True,
    )


def _array_info(reader: Reader, path: str) -> ArrayInfo:
    try:
        return reader.array_info(path)
    except (FormatError, KeyError) as err:
        if isinstance(err, FormatError) and "missing" not in str(err):
            raise
        raise MissingFieldError(
            f"{reader.location}: no array {path!r}; arrays found: {list_arrays(reader)}"
        ) from err


def _field(name: str, path: str, info: ArrayInfo, where: str) -> FieldInfo:
    dtype = np.dtype(info.dtype)
    if dtype.hasobject or dtype.fields is not None or dtype.kind in "OSUV":
        raise FormatError(
            f"{where}: array {path!r} has dtype {dtype}; chunkio reads numeric and boolean "
            "arrays (object, string, variable-length and compound dtypes cannot be batched)"
        )
    return FieldInfo(
        name,
        dtype,
        tuple(int(n) for n in info.shape[1:]),
        array=path,
        rows_per_chunk=max(1, int(info.chunks[0])),
    )


def _read_cost(info: ArrayInfo) -> tuple[bool, int]:
    """What makes a field's chunks the ones to order reads by: compressed first (a chunk is
    decoded whole, however few of its samples a batch wants; uncompressed rows are read as
    they are), then the bytes of one chunk."""
    compressed = info.compression is not None and info.compression.codec != "none"
    return compressed, int(np.prod(info.chunks, dtype=np.int64)) * np.dtype(info.dtype).itemsize


def is_chunkio_dataset(attrs: Mapping[str, Any]) -> bool:
    """Whether a store's root attributes declare a chunkio dataset."""
    from .layout import ATTR_KEY

    return ATTR_KEY in attrs
