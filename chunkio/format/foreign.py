"""Stores chunkio did not write, read in place: a layout from the arrays themselves.

A user's own HDF5 file or Zarr store (v2 or v3, sharded or not) has no ``chunkio`` attribute;
``fields`` names its arrays instead, as a mapping ``{"image": "train/images", ...}`` (field
name -> array path) or a list of array paths (each field named by the path's last part).
Axis 0 of every named array is the sample axis and all must have the same length. Each field
keeps its own chunking; the dataset's chunk-aware order follows the chunks of the field that
costs most to read (compressed, and the most bytes, of those not preloaded whole), so every
batch still decodes each chunk it needs once. Nothing is written to the store.

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

from ..backends import ArrayInfo, Reader
from ..errors import FormatError, MissingFieldError
from ..util.messages import listing
from .columns import describe_node
from .layout import DatasetLayout, FieldInfo
from .names import validate_field_name
from .sparse import SparseInfo
from .volume_layout import VolumeSet

__all__ = [
    "FieldSelection",
    "batchable",
    "field_arrays",
    "fields_from_words",
    "foreign_fields",
    "foreign_volumes",
    "layout_of",
    "list_arrays",
    "order_field",
    "volume_field",
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
            f"got {listing(words)}"
        )
    if not all(named):
        return list(words)
    pairs = [w.split("=", 1) for w in words]
    if any(not name or not path for name, path in pairs):
        raise FormatError(f"--fields: NAME=PATH needs both parts; got {listing(words)}")
    return {name: path for name, path in pairs}


#: arrays described by :func:`list_arrays` (the rest are counted)
_ARRAYS_SHOWN = 8


def list_arrays(reader: Reader) -> str:
    """The store's first arrays with their shapes, dtypes and chunks, for error messages
    (the rest counted: a file of 300 arrays gives one line a person reads)."""
    rows = []
    names = list(reader.array_names())
    for name in names[:_ARRAYS_SHOWN]:
        try:
            info = reader.array_info(name)
        except Exception as err:  # a group, a link or an array chunkio refuses: say so
            rows.append(f"{name} ({type(err).__name__})")
            continue
        dtype = np.dtype(info.dtype)
        kind = f"compound of {len(dtype.names)} columns" if dtype.names else str(dtype)
        rows.append(f"{name} {info.shape} {kind} chunks {info.chunks}")
    return listing(rows, show=str, sep="; ", brackets=False, total=len(names)) or "none"


def layout_of(
    infos: Mapping[str, ArrayInfo],
    where: str,
    *,
    preload_bytes: int = 0,
    tables: Mapping[str, FieldInfo] | None = None,
    order: Sequence[str] = (),
) -> DatasetLayout:
    """The layout of the fields :func:`foreign_fields` looked up in a store chunkio did not
    write (what :func:`chunkio.format.store_layout.open_layout` returns for it).

    ``preload_bytes``: arrays this small are read whole once per process (the dataset's
    ``preload_bytes``), so their chunks do not order reads, however large: labels stored as
    one chunk of every sample must not make the whole dataset one chunk to the sampler.
    ``tables``: the fields naming groups or columns (:mod:`chunkio.format.columns`), by name;
    a sparse matrix among them orders reads (its rows grouped by its data chunks).
    ``order``: the fields' order (the user's; default: ``infos``, then ``tables``).
    """
    tables = dict(tables or {})
    fields_info = tuple(
        tables[n] if n in tables else _field(n, infos[n].name, infos[n], where)
        for n in dict.fromkeys([*order, *infos, *tables])
    )
    sparse = [f for f in fields_info if isinstance(f, SparseInfo)]
    if sparse:
        sizes = max(sparse, key=lambda f: f.nnz * f.dtype.itemsize).chunk_sizes
        num_samples = int(sum(sizes))
        return DatasetLayout(
            num_samples=num_samples,
            samples_per_chunk=max(1, round(num_samples / len(sizes))) if sizes else 1,
            fields=fields_info,
            foreign=True,
            order_sizes=tuple(sizes),
        )
    # compound columns are read whole: their table's chunks order nothing
    plain = {n: i for n, i in infos.items() if n not in tables or not tables[n].kind_def.read_whole}
    costly = (plain or infos)[order_field(plain or infos, preload_bytes=preload_bytes)]
    num_samples = int(costly.shape[0])
    whole = not plain
    return DatasetLayout(
        num_samples=num_samples,
        samples_per_chunk=max(1, num_samples if whole else min(int(costly.chunks[0]), num_samples)),
        fields=fields_info,
        foreign=True,
    )


def foreign_fields(
    reader: Reader, fields: FieldSelection | None
) -> tuple[dict[str, ArrayInfo], dict[str, FieldInfo]]:
    """What ``fields`` names in a store chunkio did not write, checked to have one length
    along axis 0 (the sample axis): the arrays read (field name -> :class:`ArrayInfo`; the
    path is ``info.name``), and the fields that name a group or a dataframe column (a sparse
    matrix, a categorical, a compound member: field name -> its :class:`FieldInfo`,
    :mod:`chunkio.format.columns`; a sparse one has no array entry)."""
    where = reader.location
    fields = _given(reader, fields, "arrays", "'train/images', 'label': 'train/labels'")
    arrays = field_arrays(fields, where)
    infos: dict[str, ArrayInfo] = {}
    tables: dict[str, FieldInfo] = {}
    lengths: dict[str, int | None] = {}
    for name, path in arrays.items():
        found = describe_node(reader, name, path)
        if found is not None:
            tables[name], indptr = found
            if indptr is not None:  # a sparse matrix: rows are indptr's length - 1
                lengths[path] = len(indptr) - 1
                continue
            path_read = tables[name].roles.values  # the codes; a compound column's table
        else:
            path_read = path
        info = infos[name] = _array_info(reader, path_read)
        lengths[path] = info.shape[0] if info.shape else None
    if len(set(lengths.values())) != 1 or None in lengths.values():
        raise FormatError(
            f"{where}: the arrays must have the same length along axis 0 (the sample axis); "
            f"got {lengths}"
        )
    return infos, tables


def order_field(infos: Mapping[str, ArrayInfo], *, preload_bytes: int = 0) -> str:
    """The field whose chunks the chunk-aware order follows: of the arrays read per batch
    (larger than ``preload_bytes``), the one that costs most to read (see :func:`_read_cost`);
    when every array is preloaded, the largest (the first to be read per batch as data grows).
    The first of equals."""
    per_batch = [name for name, info in infos.items() if _nbytes(info) > preload_bytes]
    if per_batch:
        return max(per_batch, key=lambda name: _read_cost(infos[name]))
    return max(infos, key=lambda name: _nbytes(infos[name]))


def foreign_volumes(
    reader: Reader, fields: FieldSelection | None, spatial: int
) -> tuple[DatasetLayout, VolumeSet]:
    """The volumes of a store chunkio did not write, for :class:`chunkio.patches.PatchDataset`.

    ``fields`` names the arrays: ``{"image": PATH, "label": PATH}`` (label optional) or a
    list of one or two paths, image first. ``spatial`` is the number of spatial axes (the
    patch size's). An image array is one volume ``(*spatial)``, volumes ``(N, *spatial)``
    along axis 0, or volumes with channels ``(N, C, *spatial)``; a label array has the
    image's volumes and spatial shape, without channels.
    """
    where = reader.location
    fields = _given(reader, fields, "volume arrays", "'volumes/image', 'label': 'volumes/label'")
    if isinstance(fields, Mapping):
        arrays = {str(k): str(v).strip("/") for k, v in fields.items()}
    else:
        arrays = {k: str(v).strip("/") for k, v in zip(("image", "label"), fields, strict=False)}
    if "image" not in arrays or not set(arrays) <= {"image", "label"} or len(fields) > 2:
        raise FormatError(
            f"{where}: fields of volumes name an 'image' array and optionally a 'label' array "
            f"(a mapping, or a list: image first); got {fields!r}"
        )
    infos = {kind: _array_info(reader, path) for kind, path in arrays.items()}
    image = infos["image"]
    extra = len(image.shape) - spatial  # 0: one volume; 1: a volume axis; 2: and channels
    if extra not in (0, 1, 2):
        raise FormatError(
            f"{where}: array {arrays['image']!r} of shape {image.shape} holds no "
            f"{spatial}-D volumes: expected (*spatial), (volumes, *spatial) or "
            f"(volumes, channels, *spatial) for a patch size of {spatial} sizes"
        )
    count = int(image.shape[0]) if extra else 1
    shape = tuple(int(n) for n in image.shape[-spatial:])
    label = infos.get("label")
    if label is not None and tuple(label.shape) != ((count,) if extra else ()) + shape:
        raise FormatError(
            f"{where}: label array {arrays['label']!r} has shape {label.shape}; the image "
            f"array {arrays['image']!r} {image.shape} needs labels of shape "
            f"{((count,) if extra else ()) + shape}"
        )
    volumes = VolumeSet(
        shapes=(shape,) * count,
        chunks=tuple(int(c) for c in image.chunks[-spatial:]),
        stacked=True,
        channels=int(image.shape[1]) if extra == 2 else None,
        label=None if label is None else "label",
        volume_axis=extra > 0,
    )
    fields_info = tuple(
        _field(kind, arrays[kind], info, where, volume_axis=extra > 0)
        for kind, info in infos.items()
    )
    layout = DatasetLayout(num_samples=count, samples_per_chunk=1, fields=fields_info, foreign=True)
    return layout, volumes


def _given(
    reader: Reader, fields: FieldSelection | None, what: str, example: str
) -> FieldSelection:
    """``fields``, which a store chunkio did not write needs: else an error listing its
    arrays."""
    if fields is None or isinstance(fields, str):
        raise FormatError(
            f"{reader.location}: not a chunkio dataset, so fields must name its {what}, e.g. "
            f"fields={{'image': {example}}}; arrays found: {list_arrays(reader)}"
        )
    return fields


def _array_info(reader: Reader, path: str) -> ArrayInfo:
    """The reader's description of array ``path``; a reader's :class:`MissingFieldError` (no
    object by that path: told by type, never by its message) again, listing the arrays."""
    try:
        return reader.array_info(path)
    except MissingFieldError as err:
        raise MissingFieldError(
            f"{reader.location}: no array {path!r}; arrays found: {list_arrays(reader)}"
        ) from err


def _field(
    name: str, path: str, info: ArrayInfo, where: str, *, volume_axis: bool = True
) -> FieldInfo:
    """``volume_axis=False``: a single volume stored without axis 0, described as the one
    sample of a volume axis."""
    dtype = np.dtype(info.dtype)
    if not batchable(dtype):
        raise FormatError(
            f"{where}: array {path!r} has dtype {dtype}; chunkio reads numeric and boolean "
            "arrays (object, string, variable-length and compound dtypes cannot be batched)"
        )
    shape, chunks = tuple(int(n) for n in info.shape), tuple(int(n) for n in info.chunks)
    if not volume_axis:
        shape, chunks = (1, *shape), (1, *chunks)
    return FieldInfo(name, dtype, shape[1:], array=path, rows_per_chunk=max(1, chunks[0]))


def volume_field(
    name: str, path: str, info: ArrayInfo, where: str, *, volume_axis: bool = True
) -> FieldInfo:
    """The field of volume array ``path`` (as :func:`foreign_volumes` describes one; used by
    :mod:`chunkio.patches.ome_zarr` too): axis 0 the volume axis, or, with
    ``volume_axis=False``, a single volume described as the one sample of a volume axis."""
    return _field(name, path, info, where, volume_axis=volume_axis)


def _nbytes(info: ArrayInfo) -> int:
    return int(np.prod(info.shape, dtype=np.int64)) * np.dtype(info.dtype).itemsize


def batchable(dtype: Any) -> bool:
    """Whether arrays of ``dtype`` can be read into batches: numeric and boolean ones (not
    object, string, variable-length or compound dtypes).

    >>> batchable("f4"), batchable("U3"), batchable([("a", "i4")])
    (True, False, False)
    """
    d = np.dtype(dtype)
    return not (d.hasobject or d.fields is not None or d.kind in "OSUV")


def _read_cost(info: ArrayInfo) -> tuple[bool, int]:
    """What makes a field's chunks the ones to order reads by: compressed first (a chunk is
    decoded whole, however few of its samples a batch wants; uncompressed rows are read as
    they are), then the array's bytes. The bulk of the data (images) orders reads, whatever
    its chunks: ordered by coarser chunks of a small array (labels in chunks of 100,000), a
    batch would touch a different image chunk for nearly every sample; ordered by the images'
    chunks, it touches a few label chunks, which the decoded-chunk cache keeps."""
    compressed = info.compression is not None and info.compression.codec != "none"
    return compressed, _nbytes(info)
