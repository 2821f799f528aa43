"""The single-cell fixtures are what they claim: checked with h5py and zarr-python directly, not
with the reader under test (and not with anndata, which wrote them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anndata_files as af
import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import zarr


def _open(path: Path) -> Any:
    return h5py.File(path, "r") if path.suffix == ".h5ad" else zarr.open_group(path, mode="r")


def _attrs(node: Any) -> dict[str, Any]:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in node.attrs.items()}


def _compressed(group: Any, kind: type = sp.csr_matrix) -> Any:
    shape = tuple(int(n) for n in group.attrs.get("shape", group.attrs.get("h5sparse_shape")))
    return kind((group["data"][:], group["indices"][:], group["indptr"][:]), shape=shape)


def _labels(group: Any, column: str) -> np.ndarray[Any, Any]:
    node = group["obs"][column]
    raw = node["categories"][:]  # bytes (h5py), StringDType or object (zarr)
    cats = np.array([c.decode() if isinstance(c, bytes) else str(c) for c in raw])
    return cats[np.asarray(node["codes"][:])]


def _equal(a: Any, b: Any) -> bool:
    return (a != b).nnz == 0 if sp.issparse(a) else np.array_equal(a, b)


def test_legacy_layout_as_documented(pbmc_legacy: af.SingleCell) -> None:
    with h5py.File(pbmc_legacy.path, "r") as f:
        raw = f["raw.X"]
        assert _attrs(raw)["h5sparse_format"] == "csr" and "encoding-type" not in raw.attrs
        assert list(raw.attrs["h5sparse_shape"]) == [700, 765]
        assert _equal(_compressed(raw), pbmc_legacy.x)
        assert isinstance(f["X"], h5py.Dataset) and f["X"].shape == (700, 765)  # dense, scaled
        obs = f["obs"]
        assert obs.dtype.names is not None and "louvain" in obs.dtype.names  # compound
        cats = f["uns/louvain_categories"][:].astype(str)
        assert np.array_equal(cats[obs["louvain"]], pbmc_legacy.labels["louvain"])
    assert pbmc_legacy.path.read_bytes() == af.PBMC.read_bytes()


@pytest.mark.parametrize("name", af.CSR_FIXTURES[1:])
def test_csr_groups_carry_anndata_encoding(name: str, request: pytest.FixtureRequest) -> None:
    fixture: af.SingleCell = request.getfixturevalue(name)
    root = _open(fixture.path)
    x = root["X"]
    assert _attrs(x)["encoding-type"] == "csr_matrix" and list(x.attrs["shape"]) == [700, 765]
    assert _equal(_compressed(x), fixture.x)
    for column in af.CATEGORICAL:
        assert _attrs(root["obs"][column])["encoding-type"] == "categorical"
        assert np.array_equal(_labels(root, column), fixture.labels[column])
    assert np.array_equal(root["obs"]["n_genes"][:], fixture.obs["n_genes"].to_numpy())
    assert root["obsm"]["X_pca"].shape == (700, 50)


def _sharded(store: Path, array: str) -> bool:
    meta = json.loads((store / array / "zarr.json").read_text())
    return any(c["name"] == "sharding_indexed" for c in meta["codecs"])


def test_zarr_formats(pbmc_zarr_v2: af.SingleCell, pbmc_zarr_v3: af.SingleCell) -> None:
    v2 = pbmc_zarr_v2.path
    assert (v2 / ".zgroup").exists() and (v2 / "X" / ".zattrs").exists()
    assert not (v2 / "zarr.json").exists()
    meta = json.loads((pbmc_zarr_v3.path / "zarr.json").read_text())
    assert meta["zarr_format"] == 3
    assert not _sharded(pbmc_zarr_v3.path, "X/data")


def test_sharded_as_annbatch_writes_it(pbmc_zarr_sharded: af.SingleCell) -> None:
    root = zarr.open_group(pbmc_zarr_sharded.path, mode="r")
    for name in ("X/data", "X/indices", "obsm/X_pca"):
        assert _sharded(pbmc_zarr_sharded.path, name), name
        array = root[name]
        assert array.shards is not None and array.shape[0] > array.shards[0] > array.chunks[0]
    assert root["X/indices"].dtype == np.uint16  # the smallest index dtype, as annbatch asks
    assert (pbmc_zarr_sharded.path / "zarr.json").read_text().count("consolidated_metadata")


def test_csc_is_column_major(pbmc_csc: af.SingleCell) -> None:
    with h5py.File(pbmc_csc.path, "r") as f:
        assert _attrs(f["X"])["encoding-type"] == "csc_matrix"
        assert len(f["X/indptr"]) == 765 + 1
        assert _equal(sp.csr_matrix(_compressed(f["X"], sp.csc_matrix)), pbmc_csc.x)


def test_split_files_differ_in_categories(pbmc_split: af.SingleCell) -> None:
    assert len(pbmc_split.paths) == 3
    labels, rows, categories = [], 0, []
    for path in pbmc_split.paths:
        with h5py.File(path, "r") as f:
            rows += f["X"].attrs["shape"][0]
            labels.append(_labels(f, "louvain"))
            categories.append([c.decode() for c in f["obs/louvain/categories"][:]])
    assert rows == 700
    assert np.array_equal(np.concatenate(labels), pbmc_split.labels["louvain"])
    assert categories[0] == sorted(categories[0], key=int) and len(categories[0]) < 11
    assert categories[1] == sorted(categories[1], key=int, reverse=True)
    assert sorted(categories[2], key=int) == [str(i) for i in range(11)] != categories[2]
    assert pbmc_split.x.shape == (700, 765) and pbmc_split.x.nnz == 174400


def test_dense_x(pbmc_dense: af.SingleCell) -> None:
    with h5py.File(pbmc_dense.path, "r") as f:
        assert isinstance(f["X"], h5py.Dataset) and _attrs(f["X"])["encoding-type"] == "array"
        assert f["X"].dtype == np.float32 and np.array_equal(f["X"][:], pbmc_dense.x)
