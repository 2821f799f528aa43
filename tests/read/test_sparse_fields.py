"""Sparse CSR groups and dataframe columns read in place (AnnData files written by anndata,
and the older h5sparse / compound layout written with h5py): every row equals scipy's row,
densified; categorical columns read as codes; bad input is a typed error naming file, group
and row."""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkio
from chunkio.errors import FormatError

ad = pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")
pd = pytest.importorskip("pandas")

CELLS, GENES, TYPES = 1200, 60, 8


def _adata(seed: int = 0) -> object:
    """Cells sorted by type (as atlases are), ~6% non-zero, a cell id column."""
    rng = np.random.default_rng(seed)
    x = sp.random(CELLS, GENES, density=0.06, format="csr", dtype=np.float32, random_state=seed)
    x.data = np.round(x.data * 20).astype(np.float32) + 1
    types = np.sort(rng.integers(0, TYPES, CELLS))
    names = [f"type{t}" for t in range(TYPES)]
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical.from_codes(types, categories=names),
            "cell_id": np.arange(CELLS, dtype=np.int64),
            "barcode": [f"AC{i:06d}" for i in range(CELLS)],
        },
        index=[f"c{i}" for i in range(CELLS)],
    )
    a = ad.AnnData(X=x, obs=obs)
    a.obsm["X_pca"] = rng.normal(size=(CELLS, 4)).astype(np.float32)
    return a


@pytest.fixture(scope="module")
def adata() -> object:
    return _adata()


@pytest.fixture(scope="module", params=["h5ad", "h5ad-gzip", "zarr-v2", "zarr-v3"])
def stored(request: pytest.FixtureRequest, adata: object, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("anndata")
    kind = request.param
    if kind.startswith("h5ad"):
        path = str(root / "cells.h5ad")
        # chunked and compressed as large h5ad files are: data chunks hold ~600 values
        adata.write_h5ad(path, compression="gzip" if kind == "h5ad-gzip" else None)
        return path
    path = str(root / "cells.zarr")
    with ad.settings.override(zarr_write_format=int(kind[-1])), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anndata: "v2 will not be the default"
        adata.write_zarr(path, chunks=(700,) if kind == "zarr-v2" else None)
    return path


FIELDS = {"x": "X", "label": "obs/cell_type", "id": "obs/cell_id", "pca": "obsm/X_pca"}


def test_rows_equal_scipy_rows_densified(stored: str, adata: object) -> None:
    ds = chunkio.ChunkDataset(stored, fields=FIELDS)
    expected = adata.X.toarray()
    assert len(ds) == CELLS and ds.categories("label") == tuple(f"type{t}" for t in range(TYPES))
    assert ds.categories("x") is None
    rng = np.random.default_rng(1)
    for idx in ([40, 5, 16, 3, 3, CELLS - 1], rng.integers(0, CELLS, 300), [7]):
        batch = ds.read_batch(idx)
        assert batch["x"].dtype == np.float32
        np.testing.assert_array_equal(batch["x"], expected[idx])
        np.testing.assert_array_equal(batch["label"], adata.obs.cell_type.cat.codes.values[idx])
        np.testing.assert_array_equal(batch["id"], np.asarray(idx))
        np.testing.assert_array_equal(batch["pca"], adata.obsm["X_pca"][idx])
    assert int(ds.chunk_sizes().sum()) == CELLS
    np.testing.assert_array_equal(ds.labels(), adata.obs.cell_type.cat.codes.values)


def _epoch_ids(path: str, adata: object, context: str) -> list[int]:
    """One epoch of make_loader with 2 workers: each batch checked against scipy's rows;
    the cell ids seen."""
    loader = chunkio.make_loader(
        path,
        batch_size=64,
        fields={"x": "X", "id": "obs/cell_id"},
        num_workers=2,
        seed=3,
        workers=chunkio.Workers(context=context),
    )
    expected = adata.X.toarray()
    seen = []
    for x, ids in loader:
        assert isinstance(x, torch.Tensor) and x.shape[1] == GENES
        np.testing.assert_array_equal(x.numpy(), expected[ids.numpy()])
        seen.append(ids.numpy().copy())  # the loader reuses its batch buffers
    return sorted(np.concatenate(seen).tolist())


@pytest.mark.timeout(120)
def test_loader_epoch_over_workers_reads_every_cell_once(stored: str, adata: object) -> None:
    assert _epoch_ids(stored, adata, "fork") == list(range(CELLS))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "context",
    [pytest.param("spawn", marks=pytest.mark.slow), "forkserver"],  # spawn: make soak
)
def test_loader_under_spawn_and_forkserver(h5ad: str, adata: object, context: str) -> None:
    assert _epoch_ids(h5ad, adata, context) == list(range(CELLS))


def test_order_groups_rows_by_data_chunk_and_mixes_sorted_types(tmp_path: Path) -> None:
    """On a file sorted by cell type, the default loader's batches hold about as many types
    as a uniform shuffle's; the order's chunks follow the data chunks (rows per chunk vary);
    the mixing pool counts a row's stored bytes (its values and columns), not its dense
    size: 4 MiB hold every row here, against 2 chunks of dense rows."""
    rng = np.random.default_rng(5)
    n, types, genes = 8000, 40, 5000
    lengths = rng.integers(0, 40, n)  # rows of very different lengths
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    nnz = int(indptr[-1])
    labels = np.sort(rng.integers(0, types, n))
    path = str(tmp_path / "sorted.h5ad")
    with h5py.File(path, "w") as f:
        g = f.create_group("X")
        g.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        g.attrs["shape"] = np.array([n, genes])
        g.create_dataset("data", data=rng.random(nnz, dtype=np.float32), chunks=(2000,))
        g.create_dataset(
            "indices", data=rng.integers(0, genes, nnz).astype(np.int32), chunks=(2000,)
        )
        g.create_dataset("indptr", data=indptr)
        f.create_dataset("label", data=labels)
    ds = chunkio.ChunkDataset(path, fields={"x": "X", "label": "label"})
    sizes = ds.chunk_sizes()
    group = ds.layout.field("x").order_group
    assert group == 512 // (n // -(-nnz // 2000))  # data chunks of ~100 rows, in fives
    first = indptr[:-1] // (2000 * group)
    assert sizes.sum() == n and len(sizes) == len(np.unique(first))
    np.testing.assert_array_equal(sizes, np.bincount(first)[np.bincount(first) > 0])
    assert ds.layout.field("x").sample_nbytes == -(-nnz * 8 // n)  # float32 + int32 per value
    pool = chunkio.Ordering(pool_bytes=4 << 20)
    loader = chunkio.make_loader(ds, batch_size=256, num_workers=0, seed=0, ordering=pool)
    distinct = [len(np.unique(label.numpy())) for _, label in loader][:-1]
    uniform = chunkio.sampling.label_metrics.uniform_distinct_labels(np.bincount(labels), 256)
    assert np.mean(distinct) >= 0.9 * uniform


def _legacy(path: str, adata: object) -> None:
    """The layout of anndata < 0.7 and scanpy's bundled files: X an ``h5sparse_format: csr``
    group, obs one compound dataset, categories in ``uns/<column>_categories``."""
    x = adata.X
    codes = adata.obs.cell_type.cat.codes.values.astype(np.int8)
    obs = np.zeros(CELLS, dtype=[("index", "S8"), ("cell_type", "i1"), ("cell_id", "i8")])
    obs["index"] = [f"c{i}".encode() for i in range(CELLS)]
    obs["cell_type"], obs["cell_id"] = codes, np.arange(CELLS)
    with h5py.File(path, "w") as f:
        g = f.create_group("X")
        g.attrs["h5sparse_format"] = "csr"
        g.attrs["h5sparse_shape"] = np.array(x.shape)
        for part in ("data", "indices", "indptr"):
            g.create_dataset(part, data=getattr(x, part))
        f.create_dataset("obs", data=obs)
        names = np.array([c.encode() for c in adata.obs.cell_type.cat.categories])
        f.create_dataset("uns/cell_type_categories", data=names)


def test_legacy_h5sparse_and_compound_obs(tmp_path: Path, adata: object) -> None:
    path = str(tmp_path / "legacy.h5ad")
    _legacy(path, adata)
    ds = chunkio.ChunkDataset(
        path, fields={"x": "X", "label": "obs/cell_type", "id": "obs/cell_id"}
    )
    idx = [9, 1, 1100, 500]
    batch = ds.read_batch(idx)
    np.testing.assert_array_equal(batch["x"], adata.X.toarray()[idx])
    np.testing.assert_array_equal(batch["label"], adata.obs.cell_type.cat.codes.values[idx])
    np.testing.assert_array_equal(batch["id"], idx)
    assert ds.categories("label") == tuple(adata.obs.cell_type.cat.categories)
    np.testing.assert_array_equal(ds.labels(), adata.obs.cell_type.cat.codes.values)
    with pytest.raises(FormatError, match=r"'index'.*readable columns.*obs/cell_type"):
        chunkio.ChunkDataset(path, fields={"x": "X", "name": "obs/index"})


def _tree(root: str) -> dict[str, tuple[str, int]]:
    """Every file under ``root`` (or the file): its hash and modification time."""
    files = (
        [root]
        if os.path.isfile(root)
        else [os.path.join(d, n) for d, _, names in os.walk(root) for n in names]
    )
    return {
        f: (hashlib.sha256(Path(f).read_bytes()).hexdigest(), os.stat(f).st_mtime_ns) for f in files
    }


def test_sources_are_left_as_they_were(stored: str) -> None:
    before = _tree(stored)
    loader = chunkio.make_loader(stored, batch_size=100, fields={"x": "X"}, num_workers=0)
    assert sum(len(x) for (x,) in loader) == CELLS
    assert _tree(stored) == before


# -- bad input ---------------------------------------------------------------------------


def _copy(src: str, tmp_path: Path) -> str:
    dst = str(tmp_path / os.path.basename(src))
    shutil.copy(src, dst)
    return dst


@pytest.fixture()
def h5ad(adata: object, tmp_path: Path) -> str:
    path = str(tmp_path / "cells.h5ad")
    adata.write_h5ad(path)
    return path


def test_csc_is_refused_naming_the_conversion(adata: object, tmp_path: Path) -> None:
    csc = ad.AnnData(X=adata.X.tocsc(), obs=adata.obs)
    path = str(tmp_path / "csc.h5ad")
    csc.write_h5ad(path)
    with pytest.raises(FormatError, match=r"csc.h5ad: 'X' is a CSC .*tocsr\(\)"):
        chunkio.ChunkDataset(path, fields={"x": "X"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: _replace(g, "indptr", lambda p: p[::-1].copy()), r"indptr\[0\] must be 0"),
        (lambda g: _decrease(g, 4), r"sparse group 'X': indptr decreases at row 4"),
        (
            lambda g: _replace(g, "indptr", lambda p: p + np.r_[0, [5] * (len(p) - 1)]),
            r"indptr points past the \d+ stored values",
        ),
        (lambda g: _replace(g, "indices", lambda i: i[:-1]), r"data and indices must have"),
        (
            lambda g: [g.attrs.__delitem__(k) for k in ("encoding-type", "shape")],
            r"'X' is a group \(attributes \['encoding-version'\]\), not an array, a CSR",
        ),
        (
            lambda g: g.attrs.__setitem__("shape", np.array([CELLS + 1, GENES])),
            r"indptr must hold rows \+ 1 = 1202",
        ),
    ],
    ids=[
        "indptr-start",
        "indptr-decreasing",
        "indptr-past-data",
        "lengths",
        "no-encoding",
        "shape",
    ],
)
def test_bad_csr_metadata_is_refused_at_construction(h5ad: str, change, message: str) -> None:
    with h5py.File(h5ad, "r+") as f:
        change(f["X"])
    with pytest.raises(FormatError, match=message):
        chunkio.ChunkDataset(h5ad, fields={"x": "X"})


def _replace(g: h5py.Group, name: str, fn) -> None:
    values = fn(g[name][()])
    del g[name]
    g.create_dataset(name, data=values)


def _decrease(g: h5py.Group, row: int) -> None:
    values = g["indptr"][()]
    values[row] = values[row + 1] + 1  # row `row` starts after it ends
    _replace(g, "indptr", lambda _: values)


def test_a_column_index_outside_the_matrix_names_the_row(h5ad: str, adata: object) -> None:
    x = adata.X
    bad_row = 700
    at = int(x.indptr[bad_row])
    assert x.indptr[bad_row + 1] > at
    with h5py.File(h5ad, "r+") as f:
        f["X/indices"][at] = GENES + 3
    ds = chunkio.ChunkDataset(h5ad, fields={"x": "X"})
    np.testing.assert_array_equal(ds.read_batch([1, 2])["x"], x.toarray()[[1, 2]])
    with pytest.raises(FormatError, match=rf"cells.h5ad: sparse group 'X', row {bad_row}: column"):
        ds.read_batch([3, bad_row])


def test_categorical_codes_outside_the_categories(h5ad: str) -> None:
    with h5py.File(h5ad, "r+") as f:
        f["obs/cell_type/codes"][17] = TYPES
    with pytest.raises(FormatError, match=rf"codes: code {TYPES} at row 17 is outside"):
        chunkio.ChunkDataset(h5ad, fields={"x": "X", "label": "obs/cell_type"})


def test_string_columns_and_dataframes_are_refused_listing_readable_columns(
    stored: str,
) -> None:
    readable = r"\['obs/cell_type', 'obs/cell_id'\]"
    with pytest.raises(FormatError, match=rf"'obs/barcode' holds .*readable columns.*{readable}"):
        chunkio.ChunkDataset(stored, fields={"x": "X", "b": "obs/barcode"})
    with pytest.raises(FormatError, match=rf"'obs' is a dataframe.*{readable}"):
        chunkio.ChunkDataset(stored, fields={"x": "X", "o": "obs"})


def test_duplicate_columns_in_a_row_add_up_as_scipy_does(tmp_path: Path) -> None:
    data = np.array([1, 2, 3, 4], np.float32)
    indices = np.array([2, 2, 0, 1], np.int32)  # row 0 holds column 2 twice
    indptr = np.array([0, 2, 4])
    path = str(tmp_path / "dup.h5")
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": [2, 3]})
        for name, v in (("data", data), ("indices", indices), ("indptr", indptr)):
            g.create_dataset(name, data=v)
    expected = sp.csr_matrix((data, indices, indptr), shape=(2, 3)).toarray()
    got = chunkio.ChunkDataset(path, fields={"m": "m"}).read_batch([1, 0])["m"]
    np.testing.assert_array_equal(got, expected[[1, 0]])


@pytest.fixture(scope="module")
def tiny_chunks(tmp_path_factory) -> tuple[str, sp.csr_matrix]:
    """A CSR matrix in chunks of 7 values: rows cross chunk boundaries, some span 3 chunks."""
    rng = np.random.default_rng(11)
    m = sp.random(90, 30, density=0.25, format="csr", dtype=np.float64, random_state=rng)
    m.data = rng.integers(1, 100, m.nnz).astype(np.float64)
    path = str(tmp_path_factory.mktemp("tiny") / "tiny.h5")
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": list(m.shape)})
        g.create_dataset("data", data=m.data, chunks=(7,), compression="gzip")
        g.create_dataset("indices", data=m.indices, chunks=(5,))
        g.create_dataset("indptr", data=m.indptr)
    return path, m


@settings(max_examples=60, deadline=None)
@given(idx=st.lists(st.integers(0, 89), min_size=0, max_size=40), cache=st.booleans())
def test_any_index_list_reads_scipy_rows(tiny_chunks, idx: list[int], cache: bool) -> None:
    """Unsorted, repeated and chunk-crossing rows, with and without the decoded-chunk cache,
    against scipy's rows densified (one dataset per cache setting, reused across examples)."""
    path, m = tiny_chunks
    if cache not in _TINY:
        _TINY[cache] = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=10**6 * cache)
    ds = _TINY[cache]
    np.testing.assert_array_equal(ds.read_batch(idx)["m"], m[idx].toarray())


_TINY: dict[bool, chunkio.ChunkDataset] = {}


@pytest.mark.timeout(120)
# torch's own notice when it rebuilds a sparse tensor a worker sent (outside chunkio's reach)
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_csr_batches_as_torch_sparse_tensors(stored: str, adata: object) -> None:
    ds = chunkio.ChunkDataset(stored, fields=["X", "obs/cell_id"], sparse_batches="csr")
    expected = adata.X.toarray()
    batch = ds.read_batch([9, 2, 2, 1000])
    np.testing.assert_array_equal(batch["X"].toarray(), expected[[9, 2, 2, 1000]])
    assert ds.output_shape("X") is None  # not a fixed-size batch: no ring slot
    loader = chunkio.make_loader(ds, batch_size=100, num_workers=2, seed=1)
    seen = 0
    for x, ids in loader:
        assert x.layout == torch.sparse_csr and x.shape == (len(ids), GENES)
        np.testing.assert_array_equal(x.to_dense().numpy(), expected[ids.numpy()])
        seen += len(ids)
    assert seen == CELLS
    with pytest.raises(ValueError, match=r"sparse_batches must be one of \['dense', 'csr'\]"):
        chunkio.ChunkDataset(stored, fields={"x": "X"}, sparse_batches="coo")
