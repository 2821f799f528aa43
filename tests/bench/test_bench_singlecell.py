"""The single-cell benchmark (benchmarks/bench_singlecell.py) on a tiny file: every peer's row
is measured, the table and checks are built (no timing assertions)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

pytest.importorskip("anndata", reason="anndata is not installed (pip install -e .[dev])")
pytest.importorskip("scdataset", reason="scdataset is not installed (pip install -e .[bench])")

from benchmarks import bench_singlecell as bench

CELLS = 2000
PEERS = ("per-cell backed read", "anndata AnnLoader", "scDataset")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench_singlecell")
    return bench.run(root=root, quick=True, n_cells=CELLS, budget_s=0.2, workers=1,
                     annbatch=False)  # fmt: skip


@pytest.mark.timeout(600)  # the module's fixture runs every loader in its own process
def test_synthetic_file_is_sorted_csr(results: dict[str, Any], tmp_path: Path) -> None:
    path = bench.synthetic_h5ad(tmp_path, n_cells=300, n_genes=50)
    with h5py.File(path, "r") as f:
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
        assert list(f["X"].attrs["shape"]) == [300, 50]
        codes = f["obs/cell_type/codes"][:]
        assert np.all(np.diff(codes) >= 0) and len(np.unique(codes)) == bench.N_TYPES
        density = len(f["X/data"]) / (300 * 50)
        assert 0.02 < density < 0.06 and f["X/data"].compression == "gzip"
    assert results["settings"]["cells"] == CELLS


def _rows(results: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [r for r in results["rows"] if r["loader"].startswith(prefix)]


@pytest.mark.timeout(600)
def test_every_peer_measured(results: dict[str, Any]) -> None:
    for prefix in PEERS:
        rows = _rows(results, prefix)
        assert {r["workers"] for r in rows} == {0, 1}, prefix
        for r in rows:
            assert "error" not in r, r
            assert r["cells_per_s"] > 0 and r["peak_rss_mib"] > 0 and r["peak_pss_mib"] > 0
            assert 1 <= r["distinct_per_batch"] <= bench.N_TYPES
    assert any("fastest" in r.get("best", "") for r in _rows(results, "scDataset"))
    assert 1 < results["uniform_distinct_per_batch"] <= bench.N_TYPES
    text = bench.table(results)
    assert "scDataset BlockShuffling" in text and "(fastest" in text


@pytest.mark.timeout(600)
def test_chunkio_rows(results: dict[str, Any]) -> None:
    for name in (bench.IN_PLACE, bench.CONVERTED):
        rows = _rows(results, name)
        assert {r["workers"] for r in rows} == {0, 1}, name
        for r in rows:
            assert "error" not in r, r
            assert r["cells_per_s"] > 0 and r["distinct_per_batch"] >= 1
    assert results["checks"], "the targets are checked once chunkio's row is measured"
    assert results["conversion"]["seconds"] > 0 and "convert_arrays of the h5ad" in bench.table(
        results
    )
