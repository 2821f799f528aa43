"""A tiny run of the benchmark suite, so its code cannot rot (no timing assertions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not installed

from benchmarks import run as bench_run
from benchmarks.report import write_report


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench")
    return bench_run.run(
        root=root,
        quick=True,
        n_images=128,
        workers=1,
        batch_size=32,
        budget_s=0.2,
        epochs=2,
        codecs=False,
        optional=False,
        min_s=0.0,
    )


@pytest.mark.timeout(240)
def test_suite_measures_every_loader(results: dict[str, Any]) -> None:
    names = {(r["name"], r["workers"]) for r in results["rows"]}
    for workers in (0, 1):
        assert ("chunkio make_loader zarr (default)", workers) in names
        assert ("chunkio make_loader hdf5 (transport='dataloader')", workers) in names
        assert ("naive per-sample h5py Dataset", workers) in names
        assert ("Pillow ImageFolder Dataset (JPEG)", workers) in names
    assert ("limit: in-memory batched reader via DataLoader", 1) in names
    assert all(r["samples_per_s"] > 0 for r in results["rows"])
    amp = results["amplification"]
    # the in-process reader decodes each needed row at least once
    assert amp["in_process_zarr"] >= 1.0 and amp["in_process_hdf5"] >= 1.0
    assert {w["window"] for w in amp["windows"]} >= {1, 2, 4}
    mem = results["memory"]
    assert len(mem["workers"]) == 1 and len(mem["workers"][0]["uss_series"]) == 2
    assert results["machine"]["cores"] >= 1 and results["machine"]["cpu"]


@pytest.mark.timeout(240)
def test_report_files(results: dict[str, Any], tmp_path: Path) -> None:
    text = write_report({**results, "transport": {"skipped": "not here"}}, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"latest.md", "latest.json", "latest.png"}
    assert "## Targets" in text and "Skipped: not here" in text
    assert (tmp_path / "latest.png").stat().st_size > 1000
    loaded = json.loads((tmp_path / "latest.json").read_text())
    assert len(loaded["checks"]) == len(results["checks"]) == 8


def _synthetic(ours: float, naive: float, amp: float, growth: int) -> dict[str, Any]:
    def row(name: str, workers: int, rate: float) -> dict[str, Any]:
        return {"name": name, "workers": workers, "samples_per_s": rate}

    rows = [
        row("limit: in-process NumPy gather", 0, 1000.0),
        row("limit: in-memory batched reader via DataLoader", 2, 400.0),
        row("naive per-sample h5py Dataset", 2, naive),
    ]
    for fmt in ("zarr", "hdf5"):
        rows += [
            row(f"chunkio make_loader {fmt} (default)", 2, ours),
            row(f"limit: {fmt} decode rate x 2 cores", 2, 2000.0),
        ]
    memory = {
        "epochs": 20,
        "tolerance_bytes": 2**20,
        "flat": growth <= 2**20,
        "workers": [{"uss_growth": growth}],
    }
    return {
        "rows": rows,
        "settings": {"workers": 2},
        "machine": {"cores": 2},
        "amplification": {"modelled_streams": amp, "in_process_zarr": 1.0, "in_process_hdf5": 1.0},
        "memory": memory,
    }


def test_checks_apply_the_targets() -> None:
    passing = bench_run.checks(_synthetic(ours=800.0, naive=10.0, amp=1.05, growth=0))
    assert [c["passed"] for c in passing] == [True] * 8
    # 690 < 0.7 * min(1000, 2000), 690 < 2 * 400, 690 < 30 * 25
    failing = bench_run.checks(_synthetic(ours=690.0, naive=25.0, amp=1.2, growth=2**21))
    assert [c["passed"] for c in failing] == [False] * 8
    assert failing[0]["measured"] == pytest.approx(0.69)


def test_missing_optional_module_is_reported() -> None:
    out = bench_run._optional("bench_does_not_exist", True)
    assert "bench_does_not_exist" in out["skipped"]
