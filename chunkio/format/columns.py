"""Dataframe columns and AnnData groups as fields: what a field naming a group reads.

An AnnData file or store (``.h5ad``, AnnData Zarr) keeps its per-cell table ``obs`` as a group
of columns (``encoding-type: dataframe``): a numeric column is an array (read as any array);
a **categorical** column is a group of ``codes`` (integers) and ``categories`` (their names), read
as its codes, with the names kept on the field (``ChunkDataset.categories(name)``; code ``-1``
is pandas' missing value). Older files (anndata < 0.7, and scanpy's bundled datasets) store
``obs`` as one compound HDF5 dataset: ``obs/louvain`` then names its member ``louvain``,
read whole once per process, with categories from ``uns/louvain_categories`` when present.
A group holding a sparse matrix is a sparse field (:mod:`chunkio.format.sparse`). String
columns cannot be batched: they are refused with the list of the columns that can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader
from ..backends.base import read_all
from ..errors import ChunkioError, FormatError, MissingFieldError, UnsafeInputError
from ..util.messages import listing
from .layout import FieldInfo
from .sparse import describe_sparse, sparse_format

__all__ = ["ColumnInfo", "column_values", "describe_node", "readable_columns"]

#: categorical codes read whole at construction (to check them) up to this many bytes
CHECK_CODES_BYTES = 256 * 2**20


@dataclass(frozen=True)
class ColumnInfo(FieldInfo):
    """A dataframe column: the codes of a categorical (``categories``: their names), or
    (kind ``"column"``) member ``member`` of the compound dataset ``array``, read whole."""

    member: str | None = None


def describe_node(
    reader: Reader, name: str, path: str
) -> tuple[FieldInfo, npt.NDArray[np.int64] | None] | None:
    """Field ``name`` of the group or compound member at ``path``, with a sparse field's
    ``indptr``; ``None`` when ``path`` is a plain array (described as arrays are)."""
    where = reader.location
    try:
        attrs = reader.group_attrs(path)
    except MissingFieldError:  # a compound member, or nothing (then refused, as arrays are)
        member = _compound_member(reader, name, path)
        return None if member is None else (member, None)
    if attrs is None:
        _refuse_text_column(reader, path)
        return None
    if sparse_format(attrs) is not None:
        return describe_sparse(reader, name, path, attrs)
    kind = attrs.get("encoding-type")
    if kind == "categorical":
        return _categorical(reader, name, path), None
    if kind == "dataframe":
        raise FormatError(
            f"{where}: {path!r} is a dataframe; a field names one of its columns, e.g. "
            f"{path}/COLUMN; readable columns: {listing(readable_columns(reader, path))}"
        )
    raise FormatError(
        f"{where}: {path!r} is a group (attributes {listing(sorted(attrs))}), not an array, a CSR "
        "matrix ('encoding-type: csr_matrix' with 'shape', or 'h5sparse_format: csr') or a "
        f"categorical column; name one of its arrays: {listing(_members(reader, path))}"
    )


def _members(reader: Reader, group: str) -> list[str]:
    return [n for n in reader.array_names() if n.startswith(f"{group}/")]


def _categorical(reader: Reader, name: str, path: str) -> ColumnInfo:
    where = reader.location
    try:
        codes = reader.array_info(f"{path}/codes")
    except FormatError as err:
        raise FormatError(f"{where}: categorical {path!r} has no codes array: {err}") from err
    if np.dtype(codes.dtype).kind not in "iu" or len(codes.shape) != 1:
        raise FormatError(
            f"{where}: {path}/codes must be a 1-D integer array; got {codes.shape} {codes.dtype}"
        )
    categories = _names(reader, f"{path}/categories")
    if codes.nbytes <= CHECK_CODES_BYTES:
        _check_codes(reader, f"{path}/codes", len(categories))
    return ColumnInfo(
        name,
        np.dtype(codes.dtype),
        (),
        array=f"{path}/codes",
        rows_per_chunk=max(1, int(codes.chunks[0])) if codes.chunks else None,
        categories=categories,
    )


def _names(reader: Reader, path: str) -> tuple[str, ...]:
    """Category names: strings, or numbers (pandas allows numeric categories) as text."""
    try:
        return tuple(reader.read_text(path))
    except FormatError:
        values = read_all(reader, path)  # numeric categories, or a missing array: raised here
        return tuple(str(v) for v in values.reshape(-1).tolist())


def _check_codes(reader: Reader, path: str, count: int) -> None:
    codes = read_all(reader, path)
    bad = np.flatnonzero((codes < -1) | (codes >= count))
    if bad.size:
        row = int(bad[0])
        raise FormatError(
            f"{reader.location}: {path}: code {int(codes[row])} at row {row} is outside the "
            f"{count} categories (codes are -1 for missing, else 0..{count - 1})"
        )


def _compound_member(reader: Reader, name: str, path: str) -> ColumnInfo | None:
    """``path`` as ``TABLE/MEMBER`` of a compound dataset ``TABLE`` (legacy ``obs``)."""
    if "/" not in path:
        return None
    table, member = path.rsplit("/", 1)
    try:
        info = reader.array_info(table)
    except FormatError:
        return None
    fields = np.dtype(info.dtype).fields
    if fields is None or member not in fields:
        return None
    dtype: np.dtype[Any] = fields[member][0]
    base, shape = dtype.base, tuple(dtype.shape)
    if base.kind not in "biuf":
        raise FormatError(
            f"{reader.location}: column {member!r} of {table!r} holds {base} values, which "
            f"cannot be batched; readable columns: {readable_columns(reader, table)}"
        )
    categories = None
    with contextlib.suppress(FormatError):  # none stored: the column reads as its values
        categories = tuple(reader.read_text(f"uns/{member}_categories"))
    return ColumnInfo(
        name, base, shape, kind="column", array=table, member=member, categories=categories
    )


def _refuse_text_column(reader: Reader, path: str) -> None:
    """A column of a dataframe that cannot be batched (strings; in Zarr v2 a ``vlen-utf8``
    codec): refused, listing the columns that can be read. Numeric arrays return at once
    (their parent is not looked at: a remote group costs requests)."""
    try:
        dtype = np.dtype(reader.array_info(path).dtype)
        holds = f"{dtype} values"
    except UnsafeInputError as err:  # strings in Zarr v2: a vlen-utf8 codec
        dtype, holds = np.dtype(object), f"values chunkio does not decode ({err})"
    except ChunkioError:
        return  # refused as an array is, with its own error
    if dtype.kind in "biuf" or "/" not in path:
        return
    parent = path.rsplit("/", 1)[0]
    try:
        attrs = reader.group_attrs(parent)
    except ChunkioError:
        return
    if attrs is not None and attrs.get("encoding-type") == "dataframe":
        raise FormatError(
            f"{reader.location}: column {path!r} holds {holds}, which cannot be batched "
            f"(strings cannot); readable columns of {parent!r}: "
            f"{readable_columns(reader, parent)}"
        )


def readable_columns(reader: Reader, table: str) -> list[str]:
    """Paths of the columns of dataframe ``table`` (a group, or a legacy compound dataset)
    that read as fields: numeric arrays and categoricals."""
    out: list[str] = []
    attrs: Mapping[str, Any] | None
    try:
        attrs = reader.group_attrs(table)
    except FormatError:
        return out
    if attrs is None:  # a compound dataset
        fields: Mapping[str, Any] = np.dtype(reader.array_info(table).dtype).fields or {}
        return [f"{table}/{m}" for m, (d, *_) in fields.items() if d.base.kind in "biuf"]
    order = attrs.get("column-order")
    columns = [str(c) for c in np.asarray(order if order is not None else []).reshape(-1)]
    for column in columns:
        path = f"{table}/{column}"
        try:
            sub = reader.group_attrs(path)
            if sub is None:
                ok = np.dtype(reader.array_info(path).dtype).kind in "biuf"
            else:
                ok = sub.get("encoding-type") == "categorical"
        except ChunkioError:
            ok = False
        if ok:
            out.append(path)
    return out


def column_values(reader: Reader, info: FieldInfo) -> npt.NDArray[Any]:
    """Every value of a field read whole (labels): a compound member's column, or the array."""
    whole = read_all(reader, info.roles.values)
    member = getattr(info, "member", None)
    return whole[member] if member is not None else whole
