"""CSR groups found and checked (chunkio.format.sparse): the attributes that tag one, indptr's
checks with the row they name, the order's chunks counted from the rows' first values, and
each bad group refused at construction with what was expected and what came.

The groups are written with h5py as anndata and h5sparse lay them out; the expected order
chunks are counted row by row (which ``data`` chunk group each row's first value is in)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkio
from chunkio.errors import FormatError
from chunkio.format.layout import FieldInfo
from chunkio.format.sparse import (
    ORDER_ROWS,
    SparseInfo,
    check_indptr,
    describe_sparse,
    order_group,
    sparse_chunk_sizes,
    sparse_format,
    with_sparse_batches,
)
from chunkio.read.sparse import SparseReads

INDPTR = np.array([0, 2, 2, 5, 9, 12])


def _group(path: Path, attrs: dict[str, Any], **parts: Any) -> str:
    arrays = {"data": np.arange(1, 13, dtype=np.float32), "indices": np.arange(12) % 4,
              "indptr": INDPTR} | parts  # fmt: skip
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update(attrs)
        for name, values in arrays.items():
            if values is not None:
                chunks = (3, *values.shape[1:]) if len(values) >= 3 else None
                g.create_dataset(name, data=values, chunks=chunks)
    return str(path)


CSR = {"encoding-type": "csr_matrix", "shape": [5, 4]}


def test_sparse_format_reads_anndata_and_h5sparse_tags() -> None:
    assert sparse_format({"encoding-type": "csr_matrix"}) == "csr"
    assert sparse_format({"encoding-type": "csc_matrix"}) == "csc"
    assert sparse_format({"h5sparse_format": "csr"}) == "csr"
    assert sparse_format({"h5sparse_format": "csc"}) == "csc"
    for attrs in ({"encoding-type": "dataframe"}, {"h5sparse_format": "coo"}, {}):
        assert sparse_format(attrs) is None


@pytest.mark.parametrize(
    "attrs", [CSR, {"h5sparse_format": "csr", "h5sparse_shape": np.array([5, 4])}]
)
def test_a_tagged_group_reads_as_its_rows(tmp_path: Path, attrs: dict[str, Any]) -> None:
    ds = chunkio.ChunkDataset(_group(tmp_path / "g.h5", attrs), fields={"m": "m"})
    info = ds.layout.field("m")
    assert isinstance(info, SparseInfo)
    assert (info.kind, info.group, info.nnz, info.n_cols) == ("sparse", "m", 12, 4)
    assert info.array == "m"  # the group read (label checks and store sources name it)
    assert (info.data_chunk, info.indices_chunk, info.value_nbytes) == (3, 3, 4 + 8)
    assert info.array_names() == ("m/data", "m/indices", "m/indptr")
    # 4 data chunks of about a row each: grouped up to ORDER_ROWS rows, one order chunk
    assert info.chunk_sizes == (5,) and info.order_group == ORDER_ROWS
    assert info.sample_nbytes == -(-12 * 12 // 5)
    expected = np.zeros((5, 4), np.float32)
    for r in range(5):
        for k in range(INDPTR[r], INDPTR[r + 1]):
            expected[r, k % 4] += k + 1
    np.testing.assert_array_equal(ds.read_batch([4, 0, 1, 3, 2])["m"], expected[[4, 0, 1, 3, 2]])


@pytest.mark.parametrize(
    ("attrs", "parts", "message"),
    [
        (
            {"encoding-type": "csr_matrix"},
            {},
            r"'m' needs a 'shape' \(or 'h5sparse_shape'\) attribute of two ints \(rows, columns\); "
            r"got None",
        ),
        (
            {"encoding-type": "csr_matrix", "shape": [5, 4, 1]},
            {},
            r"of two ints.*got array\(\[5, 4, 1\]\)",
        ),
        ({"encoding-type": "csr_matrix", "shape": [5, 0]}, {}, r"'m' has shape \(5, 0\)$"),
        ({"encoding-type": "csr_matrix", "shape": [-1, 4]}, {}, r"'m' has shape \(-1, 4\)$"),
        (CSR, {"indptr": None}, r"sparse group 'm' needs 1-D arrays data, indices and indptr: "),
        (CSR, {"data": np.ones((12, 2), np.float32)}, r"m/data must be 1-D; got shape \(12, 2\)"),
        (CSR, {"indices": np.arange(12.0)}, r"m/indices must hold integers; got float64$"),
        (CSR, {"indptr": INDPTR.astype(np.float32)}, r"m/indptr must hold integers; got float32$"),
        (CSR, {"data": np.array([b"x"] * 12)}, r"m/data must be numeric; got \|S1$"),
        (
            CSR,
            {"indices": np.arange(11)},
            r"data and indices must have the same length; got 12 and 11$",
        ),
        (
            {"encoding-type": "csr_matrix", "shape": [6, 4]},
            {},
            r"m/indptr must hold rows \+ 1 = 7 offsets for shape \(6, 4\); got 6$",
        ),
        (
            {"h5sparse_format": "csc", "h5sparse_shape": [5, 4]},
            {},
            r"'m' is a CSC \(column-major\)",
        ),
    ],
)
def test_bad_groups_are_refused_saying_what_was_expected(
    tmp_path: Path, attrs: dict[str, Any], parts: dict[str, Any], message: str
) -> None:
    path = _group(tmp_path / "bad.h5", attrs, **parts)
    with pytest.raises(FormatError, match=message) as info:
        chunkio.ChunkDataset(path, fields={"m": "m"})
    assert "bad.h5" in str(info.value)


@pytest.mark.parametrize(
    ("shape", "attrs", "parts"),
    [
        ((5, 1), {"shape": [5, 1]}, {"indices": np.zeros(12, np.int32)}),  # one column
        (
            (0, 4),
            {"shape": [0, 4]},
            {
                "indptr": np.zeros(1, np.int64),
                "data": np.zeros(0),
                "indices": np.zeros(0, np.int32),
            },
        ),  # no rows
        ((5, 4), {"shape": np.array([[5, 4]])}, {}),  # the shape as a 1 x 2 array
    ],
)
def test_matrices_at_the_edges_of_their_shape(
    tmp_path: Path, shape: tuple[int, int], attrs: dict[str, Any], parts: dict[str, Any]
) -> None:
    path = _group(tmp_path / "e.h5", {"encoding-type": "csr_matrix", **attrs}, **parts)
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    assert (len(ds), ds.layout.field("m").n_cols) == shape


def test_chunks_of_one_value(tmp_path: Path) -> None:
    path = tmp_path / "one.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update(CSR)
        g.create_dataset("data", data=np.arange(1, 13, dtype=np.float32), chunks=(1,))
        g.create_dataset("indices", data=np.arange(12) % 4, chunks=(1,))
        g.create_dataset("indptr", data=INDPTR)
    info = chunkio.ChunkDataset(path, fields={"m": "m"}).layout.field("m")
    assert (info.data_chunk, info.indices_chunk) == (1, 1)
    assert info.chunk_sizes == (5,)  # 12 chunks of 1 value: grouped up to ORDER_ROWS rows


def test_describe_sparse_refuses_a_group_without_a_sparse_encoding(tmp_path: Path) -> None:
    reader = (
        chunkio.ChunkDataset(_group(tmp_path / "g.h5", CSR), fields={"m": "m"})._handle().reader
    )
    with pytest.raises(FormatError) as info:
        describe_sparse(reader, "m", "m", {"encoding-type": "dict", "b": 1})
    assert str(info.value) == (
        f"{reader.location}: 'm' is a group without a sparse encoding (attributes "
        "['b', 'encoding-type']); a sparse field names a CSR group ('encoding-type: "
        "csr_matrix' with 'shape', or 'h5sparse_format: csr')"
    )


def test_a_sparse_reader_needs_a_sparse_info(tmp_path: Path) -> None:
    ds = chunkio.ChunkDataset(_group(tmp_path / "g.h5", CSR), fields={"m": "m"})
    with pytest.raises(TypeError, match=r"^field 'x': a sparse field needs a SparseInfo$"):
        SparseReads(ds._handle().ctx, FieldInfo("x", np.dtype("f4"), (4,)))


# -- indptr --------------------------------------------------------------------------------------


def test_check_indptr_names_the_first_bad_row() -> None:
    check_indptr(np.array([0, 2, 2, 5]), 5, "x")
    check_indptr(np.zeros(0, np.int64), 0, "x")
    with pytest.raises(FormatError, match=r"^w: indptr\[0\] must be 0; got 1$"):
        check_indptr(np.array([1, 2]), 5, "w")
    with pytest.raises(FormatError) as info:
        check_indptr(np.array([0, 1, 4, 3, 2]), 5, "w")
    assert str(info.value) == (
        "w: indptr decreases at row 2 (indptr[2] = 4, indptr[3] = 3); a CSR matrix's rows "
        "start where the previous one ends"
    )
    with pytest.raises(FormatError) as info:
        check_indptr(np.array([0, 2, 4, 6, 7, 9]), 5, "w")
    assert str(info.value) == (
        "w: indptr points past the 5 stored values (row 2 ends at 6, indptr[-1] = 9)"
    )
    with pytest.raises(FormatError, match=r"row 1 ends at 6,"):
        check_indptr(np.array([0, 5, 6]), 5, "w")


# -- the order's chunks ----------------------------------------------------------------------------


def _runs(indptr: np.ndarray[Any, Any], chunk: int, group: int) -> list[int]:
    """Rows per run of consecutive rows whose first value lies in one group of data chunks."""
    keys = [int(indptr[r]) // (chunk * group) for r in range(len(indptr) - 1)]
    return [len(list(run)) for _, run in itertools.groupby(keys)]


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), max_size=40),
    chunk=st.integers(1, 12),
    group=st.integers(1, 4),
)
def test_order_chunks_are_runs_of_rows_starting_in_one_group(
    lengths: list[int], chunk: int, group: int
) -> None:
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    sizes = sparse_chunk_sizes(indptr, chunk, group)
    assert sizes.dtype == np.int64
    assert sizes.tolist() == _runs(indptr, chunk, group)
    if group == 1:
        assert sizes.tolist() == sparse_chunk_sizes(indptr, chunk).tolist()


@pytest.mark.parametrize(
    ("rows", "nnz", "chunk", "expected"),
    [
        (1000, 10_000, 1000, ORDER_ROWS // 100),  # 10 chunks of 100 rows: groups of 5
        (1000, 10_001, 1000, ORDER_ROWS // 90),  # 11 chunks (the last one short)
        (4000, 1000, 1000, 1),  # one chunk of 4,000 rows: more than ORDER_ROWS already
        (ORDER_ROWS, 1000, 1000, 1),
        (8, 16, 4, ORDER_ROWS // 2),  # 4 chunks of exactly 2 rows
        (7, 16, 4, ORDER_ROWS),  # 4 chunks of 1.75 rows: 1 a chunk
        (8, 17, 4, ORDER_ROWS),  # 5 chunks (the last holds the 17th value only)
        (1, 10, 4, ORDER_ROWS),  # one row over 3 chunks
        (3, 9, 1, ORDER_ROWS),  # chunks of less than a row: a row counts as one
        (5, 0, 10, 1),  # no values: no chunks
        (0, 0, 10, 1),  # no rows
    ],
)
def test_order_group_collects_data_chunks_up_to_order_rows(
    rows: int, nnz: int, chunk: int, expected: int
) -> None:
    indptr = np.linspace(0, nnz, rows + 1).astype(np.int64)
    assert order_group(indptr, chunk) == expected


def test_with_sparse_batches_changes_only_sparse_fields(tmp_path: Path) -> None:
    path = _group(tmp_path / "g.h5", CSR)
    with h5py.File(path, "a") as f:
        f.create_dataset("label", data=np.arange(5))
    layout = chunkio.ChunkDataset(path, fields={"m": "m", "label": "label"}).layout
    csr = with_sparse_batches(layout, "csr")
    assert [getattr(f, "batches", None) for f in csr.fields] == ["csr", None]
    assert csr.fields[1] == layout.fields[1]
    assert with_sparse_batches(csr, "dense").fields == layout.fields
    with pytest.raises(ValueError) as info:
        with_sparse_batches(layout, "coo")
    assert str(info.value) == "sparse_batches must be one of ['dense', 'csr']; got 'coo'"


def test_sample_nbytes_of_a_matrix_without_rows() -> None:
    info = SparseInfo("m", np.dtype("f4"), (4,), kind="sparse", nnz=0, value_nbytes=8)
    assert info.sample_nbytes == 1 and info.n_cols == 4
    assert SparseInfo("m", np.dtype("f4"), (), kind="sparse").n_cols == 0
