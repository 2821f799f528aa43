"""The compiled scatter of sparse rows (``chunkio.read._sparse_rows``) against the NumPy path
it stands in for and against scipy.

Seeded random CSR matrices, written by h5py with ``data`` and ``indices`` chunked apart in
short chunks (rows cross chunks and cache slots), hold empty rows, -0.0 and NaN, and in half
of them unsorted and repeated columns. Each dtype AnnData can write (and the ones the kernel
leaves to NumPy: bool, float16) is read in batches of random rows (repeated, unsorted) with
the kernel and without it: the bytes are equal, and the values equal scipy's ``toarray()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

import chunkio
import chunkio.read.sparse as sparse
from chunkio.errors import FormatError

if sparse._dense_rows is None:  # pragma: no cover - a build without a C compiler
    pytest.skip(
        "chunkio.read._sparse_rows is not built (sparse-rows extension)", allow_module_level=True
    )

DTYPES = ["float32", "float64", "int32", "int64", "int16", "uint8", "uint64", "float16"]


def _matrix(rng: np.random.Generator, dtype: str, canonical: bool) -> sp.csr_matrix:
    """30 rows of 0-9 values over 11 columns; some values -0.0 and NaN where floats."""
    rows, cols = 30, 11
    lengths = rng.integers(0, 10, rows)
    lengths[[0, 7, 8, 29]] = 0  # empty rows, the first and last among them
    if canonical:
        indices = [np.sort(rng.choice(cols, min(n, cols), replace=False)) for n in lengths]
    else:  # unsorted, repeated columns: scipy adds repeats up
        indices = [rng.integers(0, cols, n) for n in lengths]
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in indices])])
    data = rng.integers(-40, 40, int(indptr[-1])).astype(dtype)
    if data.dtype.kind == "f":
        data[rng.random(len(data)) < 0.15] = -0.0
        data[rng.random(len(data)) < 0.05] = np.nan
    flat = np.concatenate(indices).astype(np.int64)
    return sp.csr_matrix((data, flat, indptr), shape=(rows, cols))


def _write(path: Path, m: sp.csr_matrix, index_dtype: str) -> str:
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": list(m.shape)})
        g.create_dataset("data", data=m.data, chunks=(5,), maxshape=(None,))
        g.create_dataset(
            "indices", data=m.indices.astype(index_dtype), chunks=(7,), maxshape=(None,)
        )
        g.create_dataset("indptr", data=m.indptr.astype(np.int64))
    return str(path)


def _reads(path: str, batches: list[list[int]], monkeypatch: pytest.MonkeyPatch, compiled: bool,
           cache: int) -> tuple[list[np.ndarray], int]:  # fmt: skip
    """Each batch's dense rows, with or without the kernel, and how often the kernel ran."""
    kernel = sparse._dense_rows
    calls = []

    def counted(*args: Any) -> Any:
        calls.append(1)
        return kernel(*args)  # type: ignore[misc]

    with monkeypatch.context() as patch:
        patch.setattr(sparse, "_dense_rows", counted if compiled else None)
        ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=cache)
        return [ds.read_batch(b)["m"] for b in batches], len(calls)


@pytest.mark.parametrize("canonical", [True, False], ids=["canonical", "repeats"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_kernel_returns_the_numpy_paths_bytes_and_scipys_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, index_dtype: str, canonical: bool
) -> None:
    rng = np.random.default_rng([DTYPES.index(dtype), len(index_dtype), canonical])
    m = _matrix(rng, dtype, canonical)
    path = _write(tmp_path / "m.h5", m, index_dtype)
    batches = [rng.integers(0, 30, n).tolist() for n in (1, 5, 17, 30)] + [[], [0, 7], [29, 0]]
    batches.append(list(range(30)))
    for cache in (0, 1 << 20):  # slots taken over batch after batch, and every chunk held
        got, calls = _reads(path, batches, monkeypatch, True, cache)
        want, _ = _reads(path, batches, monkeypatch, False, cache)
        assert calls == len(batches)
        for idx, a, b in zip(batches, got, want, strict=True):
            assert a.dtype == b.dtype == np.dtype(dtype) and a.shape == b.shape == (len(idx), 11)
            assert a.tobytes() == b.tobytes(), idx  # -0.0 and NaN bits too
            # scipy has no float16: its values (small integers) are exact in float32
            ref = m.astype(np.float32) if dtype == "float16" else m
            expected = ref[idx].toarray() if idx else np.zeros((0, 11), dtype)
            np.testing.assert_array_equal(a, expected)  # NaN == NaN, -0.0 == 0.0 here


def test_a_stored_negative_zero_stays_negative_unless_a_row_repeats_a_column(
    tmp_path: Path,
) -> None:
    """As the NumPy path: one assignment when columns rise (-0.0 kept), else added (+0.0)."""
    data = np.float32([-0.0, 2, -0.0, 5, 1])
    m = sp.csr_matrix((data, np.int32([1, 3, 0, 2, 2]), np.int64([0, 2, 5])), shape=(2, 4))
    ds = chunkio.ChunkDataset(_write(tmp_path / "z.h5", m, "int32"), fields={"m": "m"})
    first = ds.read_batch([0])["m"]
    assert np.signbit(first[0, 1]) and first.tolist() == [[0, -0.0, 0, 2]]
    both = ds.read_batch([0, 1])["m"]  # row 1 repeats column 2: 5 + 1, and the batch is added
    assert both.tolist() == [[0, 0, 0, 2], [0, 0, 6, 0]] and not np.signbit(both).any()


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("bad", [-1, 11, 2**40])
def test_a_column_outside_the_matrix_is_the_same_format_error_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool, bad: int
) -> None:
    rng = np.random.default_rng(5)
    m = _matrix(rng, "float32", True)
    indices = m.indices.astype(np.int64)
    indices[m.indptr[12] + 1] = bad  # row 12's second value (row 12 holds values: seed 5)
    assert m.indptr[13] - m.indptr[12] >= 2
    indices[m.indptr[20]] = 99  # a later row's: the first bad one in batch order is named
    m = sp.csr_matrix((m.data, indices, m.indptr), shape=m.shape)
    path = _write(tmp_path / "bad.h5", m, "int64")
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(sparse, "_dense_rows", None)
        ds = chunkio.ChunkDataset(path, fields={"m": "m"})
        np.testing.assert_array_equal(ds.read_batch([3, 11])["m"], m[[3, 11]].toarray())
        with pytest.raises(FormatError) as info:
            ds.read_batch([0, 12, 20, 5])
    assert str(info.value) == (
        f"{path}: sparse group 'm', row 12: column index {bad} is outside the matrix's 11 "
        "columns (a corrupt indices array)"
    )


def test_the_kernel_refuses_a_value_outside_its_caches() -> None:
    """Slots that do not hold a row's chunk are a ValueError, never a read past a buffer."""
    kernel = sparse._dense_rows
    assert kernel is not None
    out = np.zeros((1, 4), np.float32)
    data, cols = np.float32([5, 6, 7, 8]), np.int32([1, 3, 0, 2])
    one = np.int64([0])

    def run(slots: Any, start: int, count: int) -> Any:
        return kernel(out, 1, 4, 4, 1, data, slots, 0, 2, cols, 4, slots, 0, 2, one,
                      np.int64([start]), np.int64([count]))  # fmt: skip

    assert run(np.int64([1, 0]), 0, 2) is None  # chunk 0 in slot 1: buffer[2:4]
    assert out.tolist() == [[7, 0, 8, 0]]
    assert run(np.int64([1, 0]), 1, 3) is None  # from slot 1 on into slot 0 (a broken run)
    assert out.tolist() == [[0, 5, 8, 6]]
    for slots, start, count in ((np.int64([0, -1]), 0, 4), (np.int64([0, 2]), 0, 4),
                                (np.int64([0]), 0, 3), (np.int64([0, 1]), 2, 3)):  # fmt: skip
        with pytest.raises(ValueError, match="not in its cache's slots"):
            run(slots, start, count)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("dtype", ["float16", "bool"])
@pytest.mark.parametrize("bad", [-1, 4])
def test_a_column_outside_the_matrix_after_a_repeated_one_is_a_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool, dtype: str, bad: int
) -> None:
    """Values NumPy adds (bool, float16): the kernel hands a batch whose row repeats a column
    back to NumPy before it has looked at later rows; their columns are still checked
    (found in review: row 1's column -1 or 4 was written into a neighbouring row)."""
    m = sp.csr_matrix(
        (np.ones(4, dtype), np.int64([1, 1, bad, 0]), np.int64([0, 2, 3, 4])), shape=(3, 4)
    )
    path = _write(tmp_path / "bad.h5", m, "int32")
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(sparse, "_dense_rows", None)
        ds = chunkio.ChunkDataset(path, fields={"m": "m"})
        with pytest.raises(FormatError, match=rf"row 1: column index {bad} is outside"):
            ds.read_batch([0, 1, 2])


def test_the_kernel_refuses_sizes_whose_product_overflows() -> None:
    """``n_rows * n_cols * itemsize`` past the address space is refused before it is
    computed (a wrapped product could match a small output's length)."""
    kernel = sparse._dense_rows
    assert kernel is not None
    out, none = np.zeros(0, np.float32), np.zeros(0, np.int64)
    with pytest.raises(ValueError, match="bad sizes"):
        kernel(out, 2**62, 2**62, 4, 1, np.float32([0]), none, 0, 1, np.int32([0]), 4, none,
               0, 1, none, none, none)  # fmt: skip
