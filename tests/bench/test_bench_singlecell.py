"""The single-cell benchmark (benchmarks/bench_singlecell.py) on a tiny file: every peer's row
is measured, the table and checks are built (no timing assertions).

The default suite runs chunkio's rows (in place and converted, 0 workers) and the table
and checks on synthetic rows; every peer's row (a dozen fresh processes importing anndata and
torch, about two minutes) and the epochs benchmark run under ``make soak`` (``-m slow``)."""

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


@pytest.fixture(scope="module")
def chunkio_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench_singlecell_chunkio")
    return bench.run(root=root, quick=True, n_cells=CELLS, budget_s=0.2, workers=0,
                     annbatch=False, only_chunkio=True)  # fmt: skip


def test_synthetic_file_is_sorted_csr(tmp_path: Path) -> None:
    path = bench.synthetic_h5ad(tmp_path, n_cells=300, n_genes=50)
    with h5py.File(path, "r") as f:
        assert f["X"].attrs["encoding-type"] == "csr_matrix"
        assert list(f["X"].attrs["shape"]) == [300, 50]
        codes = f["obs/cell_type/codes"][:]
        assert np.all(np.diff(codes) >= 0) and len(np.unique(codes)) == bench.N_TYPES
        density = len(f["X/data"]) / (300 * 50)
        assert 0.02 < density < 0.06 and f["X/data"].compression == "gzip"


def _rows(results: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [r for r in results["rows"] if r["loader"].startswith(prefix)]


@pytest.mark.slow
@pytest.mark.timeout(600)  # the module's fixture runs every loader in its own process
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
def test_chunkio_rows(chunkio_results: dict[str, Any]) -> None:
    results = chunkio_results
    assert results["settings"]["cells"] == CELLS
    assert not [r for r in results["rows"] if not r["loader"].startswith("chunkio")]
    for name in (bench.IN_PLACE, bench.CONVERTED):
        rows = _rows(results, name)
        assert {r["workers"] for r in rows} == {0}, name  # with workers: make soak
        for r in rows:
            assert "error" not in r, r
            assert r["cells_per_s"] > 0 and r["distinct_per_batch"] >= 1
    assert results["checks"], "the targets are checked once chunkio's row is measured"
    assert results["conversion"]["seconds"] > 0 and "convert_arrays of the h5ad" in bench.table(
        results
    )


@pytest.fixture(scope="module")
def epoch_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from benchmarks import bench_singlecell_epochs as epochs

    root = tmp_path_factory.mktemp("bench_singlecell_epochs")
    return epochs.run(root=root, n_cells=CELLS, n_epochs=2, rounds=1, workers=1, annbatch=False)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_epochs_first_and_later_apart(epoch_results: dict[str, Any], tmp_path: Path) -> None:
    from benchmarks import bench_singlecell_epochs as epochs

    ours = [r for r in epoch_results["rows"] if r["loader"].startswith("chunkio")]
    assert {(r["loader"], r["settings"], r["workers"]) for r in ours} == {
        (name, s, w) for name in (bench.IN_PLACE, bench.CONVERTED)
        for s, w in ((epochs.DEFAULT, 1), (epochs.HOLD_OFF, 1), (epochs.HOLD_OFF, 0))
    }  # fmt: skip
    for r in ours:
        assert "error" not in r, r
        for part in ("first", "later"):  # 2 epochs: each part one epoch, every cell once
            assert r[part]["cells"] == CELLS, (r, part)
            assert r[part]["cells_per_s"] > 0 and 0 < r[part]["distinct_ratio"] <= 1.5
    skipped = [r for r in epoch_results["rows"] if r["loader"].startswith("annbatch")]
    assert len(skipped) == 1 and "skipped" in skipped[0]["error"]
    text = epochs.write(epoch_results, tmp_path)
    assert epochs.SECTION in text and "not available: skipped" in text
    (tmp_path / "singlecell.md").write_text("# kept\n\nthe full table\n\n" + text + "\n")
    epochs.write(epoch_results, tmp_path)  # the section is replaced, the rest kept
    md = (tmp_path / "singlecell.md").read_text()
    assert md.count(epochs.SECTION) == 1 and md.startswith("# kept\n\nthe full table")


def test_epochs_check_takes_the_worst_round() -> None:
    from benchmarks import bench_singlecell_epochs as epochs

    def row(loader: str, k: int, per_cpu: float, settings: str = epochs.HOLD_OFF) -> Any:
        part = {"cells_per_s": 1.0, "cells_per_cpu_s": per_cpu, "distinct_ratio": 1.0}
        return {"loader": loader, "settings": settings, "round": k, "first": part, "workers": 2}

    rows = [row("annbatch Loader (README set-up)", 0, 100.0), row(bench.IN_PLACE, 0, 200.0),
            row("annbatch Loader (README set-up)", 1, 100.0), row(bench.IN_PLACE, 1, 120.0),
            row(bench.IN_PLACE, 1, 900.0, settings="default")]  # fmt: skip
    (found,) = epochs.checks(rows)
    assert found["measured"] == pytest.approx(1.2) and not found["passed"]
    assert "in place, 2 workers" in found["target"] and "first" in found["target"]


def test_epochs_baseline_rows_are_compared_but_not_checked() -> None:
    from benchmarks import bench_singlecell_epochs as epochs

    other = f"{epochs.HOLD_OFF}; baseline /elsewhere at abc1234"

    def row(loader: str, per_cpu: float, settings: str = epochs.HOLD_OFF) -> Any:
        part = {"cells_per_s": 1.0, "cells_per_cpu_s": per_cpu, "distinct_ratio": 1.0}
        return {"loader": loader, "settings": settings, "round": 0, "first": part, "workers": 2}

    rows = [row("annbatch Loader (README set-up)", 100.0, settings="zarrs pipeline"),
            row(bench.IN_PLACE, 160.0), row(bench.IN_PLACE, 50.0, settings=other)]  # fmt: skip
    (found,) = epochs.checks(rows)  # the baseline's 0.5 is not this checkout's figure
    assert found["measured"] == pytest.approx(1.6) and found["passed"]
    lines = epochs.ratio_lines(rows)
    cells = [ln.split(" | ")[3:5] for ln in lines[2:]]  # first epoch: per round, median
    assert cells == [["1.60", "1.60 (1.60-1.60)"], ["0.50", "0.50 (0.50-0.50)"]]
    assert other in lines[3]


def test_epochs_baseline_child_imports_the_other_checkout(tmp_path: Path) -> None:
    import json
    import subprocess

    from benchmarks import bench_singlecell_epochs as epochs

    # a stand-in checkout whose bench prints where it was imported from
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "bench_singlecell_epochs.py").write_text(
        "import json, sys\ndef main():\n    print(json.dumps([__file__, sys.argv[1:]]))\n"
    )
    cmd = epochs._child({"kind": "chunkio"}, tmp_path)
    here = Path(epochs.__file__).resolve().parents[1]  # run_child's working directory
    done = subprocess.run(cmd, cwd=here, capture_output=True, text=True, timeout=60, check=True)
    where, argv = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(where).resolve().parent.parent == tmp_path.resolve()
    assert argv == ["--child", json.dumps({"kind": "chunkio"})]
    assert epochs._child({}, None)[1:3] == ["-m", "benchmarks.bench_singlecell_epochs"]


def test_epochs_cpu_split_sums_each_role_and_counts_new_processes_whole() -> None:
    from benchmarks import bench_singlecell_epochs as epochs

    before = {1: ("main", 2.0), 7: ("helpers", 0.5)}
    after = {1: ("main", 2.5), 7: ("helpers", 0.75), 8: ("workers", 0.25), 9: ("workers", 1.0)}
    split = epochs._split(before, after)
    assert split == {"main": 0.5, "workers": 1.25, "helpers": 0.25}
    part = {"cells_per_s": 1.0, "cells_per_cpu_s": 1.0, "distinct_ratio": 1.0, "cpu_s": 2.0,
            "cpu_split": split}  # fmt: skip
    rows = [{"loader": bench.IN_PLACE, "settings": epochs.HOLD_OFF, "round": 0, "first": part,
             "workers": 2},
            {"loader": "annbatch", "settings": "", "round": 0, "workers": 0,
             "first": {k: v for k, v in part.items() if k != "cpu_split"}}]  # fmt: skip
    lines = epochs.split_lines(rows)
    assert lines[2].endswith("| 2.00 | 0.50 | 1.25 | 0.25 |")
    assert lines[3].endswith("| 2.00 |  |  |  |")
