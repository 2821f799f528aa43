"""Sparse matrices read in place: CSR groups as AnnData and h5sparse write them.

A single-cell matrix (cells x genes) is a group of three 1-D arrays, ``data`` (the non-zero
values), ``indices`` (their columns) and ``indptr`` (row ``i``'s values are
``data[indptr[i]:indptr[i + 1]]``), tagged by attributes: anndata's ``encoding-type:
csr_matrix`` with ``shape`` (``.h5ad`` files and AnnData Zarr stores, v2 or v3, sharded or
not), or the older ``h5sparse_format: csr`` with ``h5sparse_shape``. A field naming such a
group is a ``"sparse"`` field: a sample is one row, read as a dense vector of ``n_cols``
values of ``data``'s dtype (:mod:`chunkio.read.sparse`).

A CSC group (column-major: reading one row scans every column) is refused, naming the
conversion. ``indptr`` is read whole when the dataset is made: it is checked (it starts at 0,
never decreases, ends within ``data``) and it groups rows by the ``data`` chunk their values
start in, which the chunk-aware order follows (:func:`sparse_chunk_sizes`): rows per chunk vary
with the number of values per row.

A sparse field of a chunkio dataset (``write_arrays`` of a scipy CSR matrix, ``convert_arrays``
of an AnnData file; stored as :mod:`chunkio.format.layout` describes) is the same
:class:`SparseInfo` with no ``group`` (:func:`native_sparse`): each row's values start at its
offset and number its stored count, each sample chunk's values start a chunk of their own, so
the chunk-aware order follows the dataset's sample chunks, as for dense fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import ArrayInfo, Reader
from ..backends.base import read_all
from ..errors import FormatError
from ..util.messages import listing
from ..util.numeric import IntArray
from .layout import DatasetLayout, FieldInfo

__all__ = [
    "MAX_DENSE_ROW_BYTES",
    "SPARSE_BATCHES",
    "SparseInfo",
    "check_indptr",
    "describe_sparse",
    "native_sparse",
    "ORDER_ROWS",
    "order_group",
    "sparse_chunk_sizes",
    "sparse_format",
    "with_sparse_batches",
]

#: what to do with a CSC matrix, for the error that refuses one
CSC_HINT = (
    "rewrite it row-major first, e.g. with anndata: a = anndata.read_h5ad(PATH); "
    "a.X = a.X.tocsr(); a.write_h5ad(NEW_PATH)"
)


@dataclass(frozen=True)
class SparseInfo(FieldInfo):
    """A ``"sparse"`` field: the CSR group ``group`` (its ``data``, ``indices`` and ``indptr``
    arrays), or, with no ``group``, the arrays of a chunkio dataset's own sparse field (values,
    indices, offsets, shapes: :func:`~chunkio.format.layout.sparse_array_names`); samples are
    rows of ``sample_shape == (n_cols,)`` values of ``dtype``.

    ``nnz``: stored values; ``data_chunk`` / ``indices_chunk``: values per chunk of each.
    """

    group: str = ""
    nnz: int = 0
    data_chunk: int = 1
    indices_chunk: int = 1
    #: the order's samples per chunk: rows grouped by the data chunk they start in
    chunk_sizes: tuple[int, ...] = ()
    #: data chunks per chunk of the order (:func:`order_group`)
    order_group: int = 1
    #: batches as ``"dense"`` arrays ``(B, n_cols)``, or ``"csr"`` (torch sparse CSR tensors)
    batches: str = "dense"
    #: bytes of one stored value: its ``data`` element and its ``indices`` element
    value_nbytes: int = 0

    @property
    def where(self) -> str:
        """What error messages call it: the CSR group, or the chunkio dataset's field."""
        return f"sparse group {self.group!r}" if self.group else f"sparse field {self.name!r}"

    @property
    def n_cols(self) -> int:
        return int((self.sample_shape or (0,))[0])

    @property
    def sample_nbytes(self) -> int:
        """Decoded bytes of an average row as read (its values and their columns), what a
        reader's cache holds: a mixing pool of ``pool_bytes`` holds that many rows (about
        ``n_cols / values per row`` times more than dense rows of the same bytes)."""
        rows = sum(self.chunk_sizes)
        return max(1, -(-self.nnz * self.value_nbytes // rows)) if rows else 1


def sparse_format(attrs: Mapping[str, Any]) -> str | None:
    """``"csr"`` or ``"csc"`` for a group holding a sparse matrix, else ``None``.

    >>> sparse_format({"encoding-type": "csr_matrix", "shape": [3, 4]})
    'csr'
    >>> sparse_format({"h5sparse_format": "csc"}), sparse_format({"encoding-type": "dict"})
    ('csc', None)
    """
    kind = attrs.get("encoding-type")
    if kind in ("csr_matrix", "csc_matrix"):
        return str(kind)[:3]
    legacy = attrs.get("h5sparse_format")
    if legacy in ("csr", "csc"):
        return str(legacy)
    return None


def _shape(attrs: Mapping[str, Any], group: str, where: str) -> tuple[int, int]:
    shape = attrs.get("shape", attrs.get("h5sparse_shape"))
    try:
        rows, cols = (int(n) for n in np.asarray(shape).reshape(-1).tolist())
    except (TypeError, ValueError) as err:
        raise FormatError(
            f"{where}: sparse group {group!r} needs a 'shape' (or 'h5sparse_shape') attribute "
            f"of two ints (rows, columns); got {shape!r}"
        ) from err
    if rows < 0 or cols < 1:
        raise FormatError(f"{where}: sparse group {group!r} has shape {(rows, cols)}")
    return rows, cols


def describe_sparse(
    reader: Reader, name: str, group: str, attrs: Mapping[str, Any]
) -> tuple[SparseInfo, IntArray]:
    """The field ``name`` reading CSR group ``group`` (``attrs``: its attributes), checked,
    and its ``indptr`` (int64, read whole)."""
    where = reader.location
    kind = sparse_format(attrs)
    if kind == "csc":
        raise FormatError(
            f"{where}: {group!r} is a CSC (column-major) sparse matrix: reading one row would "
            f"scan the whole matrix, so chunkio reads CSR matrices only; {CSC_HINT}"
        )
    if kind != "csr":
        raise FormatError(
            f"{where}: {group!r} is a group without a sparse encoding (attributes "
            f"{listing(sorted(attrs))}); a sparse field names a CSR group ('encoding-type: "
            "csr_matrix' with 'shape', or 'h5sparse_format: csr')"
        )
    rows, cols = _shape(attrs, group, where)
    arrays: dict[str, ArrayInfo] = {}
    for part in ("data", "indices", "indptr"):
        try:
            arrays[part] = reader.array_info(f"{group}/{part}")
        except FormatError as err:
            raise FormatError(
                f"{where}: sparse group {group!r} needs 1-D arrays data, indices and indptr: {err}"
            ) from err
        if len(arrays[part].shape) != 1:
            raise FormatError(
                f"{where}: {group}/{part} must be 1-D; got shape {arrays[part].shape}"
            )
    data, indices, indptr_info = arrays["data"], arrays["indices"], arrays["indptr"]
    if data.shape != indices.shape:
        raise FormatError(
            f"{where}: sparse group {group!r}: data and indices must have the same length; "
            f"got {data.shape[0]} and {indices.shape[0]}"
        )
    for part in ("indices", "indptr"):
        if np.dtype(arrays[part].dtype).kind not in "iu":
            raise FormatError(
                f"{where}: {group}/{part} must hold integers; got {arrays[part].dtype}"
            )
    if np.dtype(data.dtype).kind not in "biuf":
        raise FormatError(f"{where}: {group}/data must be numeric; got {data.dtype}")
    if indptr_info.shape[0] != rows + 1:
        raise FormatError(
            f"{where}: {group}/indptr must hold rows + 1 = {rows + 1} offsets for shape "
            f"{(rows, cols)}; got {indptr_info.shape[0]}"
        )
    offsets = read_all(reader, f"{group}/indptr").astype(np.int64)
    nnz = int(data.shape[0])
    check_indptr(offsets, nnz, f"{where}: sparse group {group!r}")
    data_chunk = max(1, int(data.chunks[0]) if data.chunks else nnz)
    grouped = order_group(offsets, data_chunk)
    info = SparseInfo(
        name,
        np.dtype(data.dtype),
        (cols,),
        kind="sparse",
        array=group,
        group=group,
        nnz=nnz,
        data_chunk=data_chunk,
        indices_chunk=max(1, int(indices.chunks[0]) if indices.chunks else nnz),
        chunk_sizes=tuple(sparse_chunk_sizes(offsets, data_chunk, grouped).tolist()),
        order_group=grouped,
        value_nbytes=np.dtype(data.dtype).itemsize + np.dtype(indices.dtype).itemsize,
    )
    return info, offsets


def native_sparse(reader: Reader, field: FieldInfo, layout: DatasetLayout) -> SparseInfo:
    """The :class:`SparseInfo` of a chunkio dataset's own sparse ``field`` (as the layout
    declares it: its arrays checked by :func:`~chunkio.format.layout.check_arrays`). Its order
    chunks are the dataset's sample chunks: each starts a values chunk of its own."""
    if isinstance(field, SparseInfo):
        return field
    values, indices = field.roles.values, field.roles.indices
    data, cols = reader.array_info(values), reader.array_info(indices)
    stored = int(data.shape[0])
    spc, n = layout.samples_per_chunk, layout.num_samples
    sizes = [min(spc, n - a) for a in range(0, n, spc)]
    return SparseInfo(
        field.name,
        field.dtype,
        field.sample_shape,
        kind="sparse",
        categories=field.categories,
        nnz=stored,
        data_chunk=max(1, int(data.chunks[0]) if data.chunks else stored),
        indices_chunk=max(1, int(cols.chunks[0]) if cols.chunks else stored),
        chunk_sizes=tuple(sizes),
        value_nbytes=np.dtype(data.dtype).itemsize + np.dtype(cols.dtype).itemsize,
    )


def check_indptr(indptr: IntArray, nnz: int, where: str) -> None:
    """Raise a :class:`FormatError` naming the first bad row unless ``indptr`` starts at 0,
    never decreases and ends within ``nnz`` values.

    >>> check_indptr(np.array([0, 2, 2, 5]), 5, "x")
    >>> check_indptr(np.array([0, 3, 2]), 5, "x")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: x: indptr decreases at row 1 (indptr[1] = 3, indptr[2] = 2); \
a CSR matrix's rows start where the previous one ends
    """
    if not len(indptr):
        return
    if indptr[0] != 0:
        raise FormatError(f"{where}: indptr[0] must be 0; got {int(indptr[0])}")
    down = np.flatnonzero(np.diff(indptr) < 0)
    if down.size:
        r = int(down[0])
        raise FormatError(
            f"{where}: indptr decreases at row {r} (indptr[{r}] = {int(indptr[r])}, "
            f"indptr[{r + 1}] = {int(indptr[r + 1])}); a CSR matrix's rows start where the "
            "previous one ends"
        )
    if indptr[-1] > nnz:
        r = int(np.searchsorted(indptr, nnz, side="right")) - 1
        raise FormatError(
            f"{where}: indptr points past the {nnz} stored values (row {r} ends at "
            f"{int(indptr[r + 1])}, indptr[-1] = {int(indptr[-1])})"
        )


#: rows an order chunk of a sparse field should hold at least: its data chunks are grouped
#: up to this (see :func:`order_group`)
ORDER_ROWS = 512


def order_group(indptr: IntArray, data_chunk: int) -> int:
    """Data chunks per chunk of the chunk-aware order: enough for :data:`ORDER_ROWS` rows.

    The last row of a group runs into the next data chunk, which a reader decodes too; two
    worker processes reading neighbouring groups both decode that chunk. Grouped, that is one
    extra chunk per ``group`` instead of per chunk (2 workers: about ``1 + 0.5 / group``
    decodes per chunk per epoch; measured 1.25 on the single-cell benchmark, against 1.5
    ungrouped), while chunks of many rows stay one each: larger chunks would mix batches less
    (the pool holds fewer of them; 0.97 of uniform there, 0.94 at 1,024 rows).

    >>> order_group(np.arange(0, 100_001, 80), 15_625)  # 80 values a row: 195 rows a chunk
    2
    """
    rows = len(indptr) - 1
    chunks = -(-int(indptr[-1]) // int(data_chunk)) if rows > 0 else 0
    if not chunks:
        return 1
    return max(1, ORDER_ROWS // max(1, rows // chunks))


def sparse_chunk_sizes(indptr: IntArray, data_chunk: int, group: int = 1) -> IntArray:
    """Rows per chunk of the chunk-aware order: each row belongs to the group of ``group``
    ``data`` chunks its values start in (empty rows to their neighbours'), so a chunk of the
    order decodes about ``group`` data chunks; groups no row starts in are skipped.

    >>> sparse_chunk_sizes(np.array([0, 3, 5, 9, 9, 12]), 4).tolist()
    [2, 1, 2]
    >>> sparse_chunk_sizes(np.array([0, 3, 5, 9, 9, 12]), 4, group=2).tolist()
    [3, 2]
    """
    rows = len(indptr) - 1
    if rows <= 0:
        return np.zeros(0, np.int64)
    first = indptr[:-1] // (int(data_chunk) * int(group))
    breaks = np.flatnonzero(np.diff(first)) + 1
    return np.diff(np.concatenate([[0], breaks, [rows]])).astype(np.int64)


#: what ``ChunkDataset(sparse_batches=...)`` may be
SPARSE_BATCHES = ("dense", "csr")


#: the most bytes a sparse row may take densified (``"dense"`` batches): 2**28 float32
#: columns; a stored ``shape`` of 10**12 columns would otherwise size every batch
MAX_DENSE_ROW_BYTES = 2**30


def with_sparse_batches(layout: DatasetLayout, batches: str, *, where: str = "") -> DatasetLayout:
    """``layout`` with its sparse fields read as ``batches`` (see :data:`SPARSE_BATCHES`);
    dense rows larger than :data:`MAX_DENSE_ROW_BYTES` are refused (``where``: the file, for
    the message)."""
    if batches not in SPARSE_BATCHES:
        raise ValueError(f"sparse_batches must be one of {list(SPARSE_BATCHES)}; got {batches!r}")
    for f in layout.fields:
        if batches != "dense" or not isinstance(f, SparseInfo):
            continue
        row = f.n_cols * f.dtype.itemsize
        if row > MAX_DENSE_ROW_BYTES:
            raise FormatError(
                f"{where}: {f.where} has {f.n_cols} columns: a dense row would take {row} "
                f"bytes (more than {MAX_DENSE_ROW_BYTES}); check the stored shape, or read rows "
                "as CSR batches (sparse_batches='csr')"
            )
    fields = tuple(
        dataclasses.replace(f, batches=batches) if isinstance(f, SparseInfo) else f
        for f in layout.fields
    )
    return dataclasses.replace(layout, fields=fields)
