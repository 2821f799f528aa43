"""AnnData files whose stored sizes a hostile file could set (RELIABILITY rows 29 and 34): a
``shape`` attribute of 10**12 columns, categorical codes past their categories in a column
too large to be checked when the dataset is made, an ``indptr`` that changes after it was
made, chunks longer than their array. Each reads exactly or is a
:class:`~chunkio.errors.FormatError` naming the file, the group or field and the row, before
anything is sized by the bad number.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import chunkio
from chunkio.errors import FormatError
from chunkio.format import columns

ad = pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")
pd = pytest.importorskip("pandas")

CELLS, GENES = 40, 30


def _adata(seed: int = 0) -> Any:
    x = sp.random(CELLS, GENES, density=0.2, format="csr", dtype=np.float32, random_state=seed)
    codes = np.arange(CELLS) % 3
    obs = pd.DataFrame(
        {"t": pd.Categorical.from_codes(codes, categories=["a", "b", "c"])},
        index=[f"c{i}" for i in range(CELLS)],
    )
    return ad.AnnData(X=x, obs=obs)


def _write(adata: Any, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's notes on Zarr formats
        if path.suffix == ".zarr":
            adata.write_zarr(path)
        else:
            adata.write_h5ad(path)
    return path


def _set_attr(path: Path, node: str, key: str, value: Any) -> None:
    if path.suffix == ".zarr":
        zarr.open_group(path / node, mode="r+").attrs[key] = value
    else:
        with h5py.File(path, "r+") as f:
            f[node].attrs[key] = value


def _rewrite(path: Path, array: str, index: int, value: int) -> None:
    if path.suffix == ".zarr":
        a = zarr.open_array(path / array, mode="r+")
    else:
        f = h5py.File(path, "r+")
        a = f[array]
    values = a[...]
    values[index] = value
    a[...] = values
    if path.suffix != ".zarr":
        f.close()


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
@pytest.mark.parametrize("cols", [10**12, 2**31])
def test_a_shape_of_too_many_columns_is_refused_for_dense_rows_and_read_as_csr(
    tmp_path: Path, suffix: str, cols: int
) -> None:
    adata = _adata()
    path = _write(adata, tmp_path / f"a{suffix}")
    _set_attr(path, "X", "shape", [CELLS, cols])
    with pytest.raises(FormatError, match=rf"^{path}: sparse group 'X' has {cols} columns: a den"):
        chunkio.ChunkDataset(path, fields={"x": "X"})
    ds = chunkio.ChunkDataset(path, fields={"x": "X"}, sparse_batches="csr")
    got = ds.read_batch(list(range(CELLS)))["x"]
    assert got.shape == (CELLS, cols)
    np.testing.assert_array_equal(got.indptr, adata.X.indptr)
    np.testing.assert_array_equal(got.indices, adata.X.indices)
    np.testing.assert_array_equal(got.data, adata.X.data)


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
@pytest.mark.parametrize("code", [3, -2, 127])
def test_codes_past_the_categories_unchecked_at_construction_fail_on_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, code: int
) -> None:
    """A codes column larger than ``CHECK_CODES_BYTES`` is not read when the dataset is made:
    the read of the row names it (and the rows before it read as stored)."""
    monkeypatch.setattr(columns, "CHECK_CODES_BYTES", 0)
    path = _write(_adata(), tmp_path / f"a{suffix}")
    _rewrite(path, "obs/t/codes", 7, code)
    ds = chunkio.ChunkDataset(path, fields={"x": "X", "t": "obs/t"})
    assert ds.read_batch([0, 1, 2, 6])["t"].tolist() == [0, 1, 2, 0]
    with pytest.raises(
        FormatError, match=rf"^{path}: field 't' \('obs/t/codes'\), sample 7: code {code} is out"
    ):
        ds.read_batch([2, 7])


def test_codes_past_the_categories_of_one_file_of_many_name_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files whose categories differ are remapped to their union: a code past a file's own
    categories is refused, not remapped into another category (or out of the table)."""
    monkeypatch.setattr(columns, "CHECK_CODES_BYTES", 0)
    first = _adata()
    second = _adata(1)
    second.obs["t"] = second.obs["t"].cat.rename_categories(["c", "d", "a"])
    paths = [_write(first, tmp_path / "a.h5ad"), _write(second, tmp_path / "b.h5ad")]
    _rewrite(paths[1], "obs/t/codes", 4, 3)
    ds = chunkio.ChunkDataset(paths, fields={"x": "X", "t": "obs/t"})
    assert ds.categories("t") == ("a", "b", "c", "d")
    assert ds.read_batch([CELLS + 1])["t"].tolist() == [3]  # "d" in the second file
    with pytest.raises(FormatError, match=rf"^{paths[1]}: field 't' .*, sample 4: code 3"):
        ds.read_batch([0, CELLS + 4])


def test_an_indptr_changed_after_the_dataset_was_made_is_checked_again(tmp_path: Path) -> None:
    """Each process reads ``indptr`` again: it is checked there as when the dataset was made
    (a file replaced in between is refused, not read by the old description)."""
    path = _write(_adata(), tmp_path / "a.h5ad")
    ds = chunkio.ChunkDataset(path, fields={"x": "X"})
    with h5py.File(path, "r+") as f:
        values = f["X/indptr"][...]
        values[5] = values[6] + 1
        f["X/indptr"][...] = values
    with pytest.raises(FormatError, match=rf"^{path}: sparse group 'X': indptr decreases at row"):
        ds.read_batch([0])
    other = _write(_adata(), tmp_path / "b.h5ad")
    ds = chunkio.ChunkDataset(other, fields={"x": "X"})
    _write(ad.AnnData(X=sp.random(CELLS + 3, GENES, format="csr", dtype=np.float32)), other)
    # a replaced file of another row count: its arrays are not the ones the dataset was made
    # with (checked before the offsets are read)
    made = r"array 'X/indptr' changed since the dataset was made \(it has shape \(44,\), made with"
    with pytest.raises(FormatError, match=made):
        ds.read_batch([0])


def test_an_anndata_zarr_store_replaced_by_one_of_more_rows_is_refused(tmp_path: Path) -> None:
    """A Zarr store has no file identity to compare: its ``indptr`` read again in each
    process is checked against the rows the dataset was made with."""
    path = _write(_adata(), tmp_path / "a.zarr")
    ds = chunkio.ChunkDataset(path, fields={"x": "X"})
    shutil.rmtree(path)
    _write(ad.AnnData(X=sp.random(CELLS + 3, GENES, format="csr", dtype=np.float32)), path)
    with pytest.raises(FormatError, match=r"holds 44 offsets; the dataset was made with 40 rows"):
        ds.read_batch([0])
