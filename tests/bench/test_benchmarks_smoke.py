"""A tiny run of the benchmark suite, so its code cannot rot (no timing assertions).

The training-parity and label-mixing runs (a model trained for a few epochs per loader) run
under ``make soak`` (``-m slow``); the loaders' rows and the report run by default."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

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
    assert len(amp["pools"]) == len(bench_run.POOL_FACTORS)
    assert all(p["read_amplification"] >= 1.0 for p in amp["pools"])
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
        "amplification": {"modelled_readers": amp, "in_process_zarr": 1.0, "in_process_hdf5": 1.0},
        "memory": memory,
    }


def test_checks_apply_the_targets() -> None:
    passing = bench_run.checks(_synthetic(ours=800.0, naive=10.0, amp=1.05, growth=0))
    assert [c["passed"] for c in passing] == [True] * 8
    # 390 < 0.4 * min(1000, 2000), 390 < 2 * 400, 390 < 30 * 25
    failing = bench_run.checks(_synthetic(ours=390.0, naive=25.0, amp=1.2, growth=2**21))
    assert [c["passed"] for c in failing] == [False] * 8
    assert failing[0]["measured"] == pytest.approx(0.39)


def test_missing_optional_module_is_reported() -> None:
    out = bench_run._optional("bench_does_not_exist", True)
    assert "bench_does_not_exist" in out["skipped"]


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from benchmarks import bench_training

    return bench_training.run(quick=True, workers=1, root=tmp_path_factory.mktemp("training"))


@pytest.fixture(scope="module")
def mixing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from benchmarks import bench_mixing

    return bench_mixing.run(quick=True, workers=1, root=tmp_path_factory.mktemp("mixing"))


MIXING_KEYS = {
    "distinct_labels",
    "uniform_distinct_labels",
    "distinct_labels_ratio",
    "largest_label_share",
    "uniform_largest_label_share",
    "largest_label_share_ratio",
}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_training_parity_quick(training: dict[str, Any]) -> None:
    from benchmarks import bench_training

    rows = {r["loader"]: r for r in training["rows"]}
    assert set(rows) == {name for name, *_ in bench_training.LOADERS} | {bench_training.UNIFORM}
    uniform, default = rows[bench_training.UNIFORM], rows[bench_training.DEFAULT]
    # 10 classes: chance is 0.1, so a working benchmark's reference is far above it
    assert uniform["accuracy"] > 0.5
    for row in rows.values():
        if "skipped" in row:
            continue
        assert set(row) >= MIXING_KEYS and row["loader_samples_per_s"] > 0
        assert len(row["accuracy_by_epoch"]) == training["settings"]["epochs"]
        assert row["uniform_distinct_labels"] == pytest.approx(10.0, abs=0.2)
    assert 0.9 < uniform["distinct_labels_ratio"] < 1.1  # the reference mixes like itself
    # one seed in quick mode is noisy (a few points), so parity is checked loosely here; the
    # old order (whole chunks of a class-sorted store) must still fail to train
    whole = rows[bench_training.WHOLE_CHUNKS]
    print(
        f"\ntraining parity (quick): chunkio default {default['accuracy']:.4f}, "
        f"uniform shuffle {uniform['accuracy']:.4f}, whole chunks {whole['accuracy']:.4f}"
    )
    assert default["accuracy"] >= uniform["accuracy"] - 0.06
    assert whole["accuracy"] < default["accuracy"] - 0.3 and whole["label_warning"]
    [check] = training["checks"]
    assert set(check) == {"target", "measured", "required", "passed"}
    assert check["measured"] == pytest.approx(100 * (uniform["accuracy"] - default["accuracy"]))
    sorted_conversion = training["conversions"][bench_training.SORTED_CONVERSION]
    if "skipped" not in sorted_conversion:
        assert sorted_conversion["stored_distinct_labels_ratio"] < 0.5


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_label_mixing_quick(mixing: dict[str, Any]) -> None:
    from benchmarks import bench_mixing

    rows = mixing["rows"]
    default_pool = [r for r in rows if r.get("pool", "default") == "default"]
    assert {(r["conversion"], r["workers"], r["batch_size"]) for r in default_pool} == {
        (c, w, b)
        for c in (bench_mixing.DEFAULT, bench_mixing.SORTED)
        for w in (0, 1)
        for b in bench_mixing.BATCH_SIZES
    }
    small_pools = [r for r in rows if r.get("pool") == "pool_bytes"]
    assert small_pools and all(r["workers"] == 0 and r["pool_fraction"] < 1 for r in small_pools)
    measured = [r for r in rows if "skipped" not in r]
    assert measured and all(set(r) >= MIXING_KEYS and r["batches"] > 0 for r in measured)
    stored = mixing["conversions"]
    if "skipped" not in stored[bench_mixing.SORTED]:
        # the class folder, kept in storage order: chunks of 2-3 classes out of 20
        assert stored[bench_mixing.SORTED]["stored_distinct_labels_ratio"] < 0.5


@pytest.mark.slow
def test_training_and_mixing_tables(training: dict[str, Any], mixing: dict[str, Any]) -> None:
    from benchmarks.report import mixing_markdown, training_markdown

    text = "\n".join(training_markdown(training))
    assert "## Training parity (bench_training)" in text and "Check: training:" in text
    assert text.count("| chunkio make_loader") + text.count("| uniform shuffle") == 3
    text = "\n".join(mixing_markdown(mixing))
    default_rows = sum(r["conversion"] == "default" for r in mixing["rows"])
    assert text.count("| default |") == default_rows + 1  # and the stored order
    assert "Skipped: x" in "\n".join(training_markdown({"skipped": "x"}))
    # the training target joins the eight in the Targets table
    synthetic = _synthetic(ours=800.0, naive=10.0, amp=1.05, growth=0)
    assert len(bench_run.checks({**synthetic, "training": training})) == 9
    assert len(bench_run.checks({**synthetic, "training": {"skipped": "x"}})) == 8


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_report_renders_training_and_mixing(
    results: dict[str, Any], training: dict[str, Any], mixing: dict[str, Any], tmp_path: Path
) -> None:
    full = {**results, "training": training, "mixing": mixing}
    full["checks"] = bench_run.checks(full)
    text = write_report(full, tmp_path)
    assert "## Training parity (bench_training)" in text and "## Label mixing" in text
    skipped = {**results, "training": {"skipped": "x"}, "mixing": {"skipped": "y"}}
    assert "Skipped: x" in write_report(skipped, tmp_path)
