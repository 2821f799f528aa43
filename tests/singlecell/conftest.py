"""Single-cell files made by anndata (tests/support/anndata_files.py), once per session.

Each fixture is a :class:`anndata_files.SingleCell`: ``.path`` / ``.paths``, ``.x_field``, the
expected matrix ``.x`` (scipy CSR, or an ndarray for the dense one), the expected ``.obs`` and
``.labels`` (category name per cell). Tests must leave the files as they are (they are shared
by the session); copy one first to change it.
"""

from __future__ import annotations

import pytest

pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")

import anndata_files as af


@pytest.fixture(scope="session")
def sc_root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("singlecell")


@pytest.fixture(scope="session")
def pbmc_legacy(sc_root) -> af.SingleCell:
    """(a) scanpy's file as shipped: ``raw.X`` an ``h5sparse_format: csr`` group."""
    return af.legacy(sc_root)


@pytest.fixture(scope="session")
def pbmc_h5ad(sc_root) -> af.SingleCell:
    """(b) modern h5ad, X ``csr_matrix``."""
    return af.h5ad(sc_root)


@pytest.fixture(scope="session")
def pbmc_zarr_v2(sc_root) -> af.SingleCell:
    """(c) AnnData Zarr v2."""
    return af.zarr_store(sc_root, 2)


@pytest.fixture(scope="session")
def pbmc_zarr_v3(sc_root) -> af.SingleCell:
    """(d) AnnData Zarr v3."""
    return af.zarr_store(sc_root, 3)


@pytest.fixture(scope="session")
def pbmc_zarr_sharded(sc_root) -> af.SingleCell:
    """(e) AnnData Zarr v3 sharded as annbatch writes it."""
    return af.zarr_sharded(sc_root)


@pytest.fixture(scope="session")
def pbmc_csc(sc_root) -> af.SingleCell:
    """(f) X ``csc_matrix`` (to be refused)."""
    return af.csc(sc_root)


@pytest.fixture(scope="session")
def pbmc_split(sc_root) -> af.SingleCell:
    """(g) three h5ad files, categories differing in order and subset."""
    return af.split(sc_root)


@pytest.fixture(scope="session")
def pbmc_dense(sc_root) -> af.SingleCell:
    """(h) X a dense array."""
    return af.dense(sc_root)


@pytest.fixture(params=af.CSR_FIXTURES)
def pbmc_csr(request: pytest.FixtureRequest) -> af.SingleCell:
    """Each CSR layout in turn."""
    return request.getfixturevalue(request.param)
