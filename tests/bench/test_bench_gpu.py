"""The GPU benchmark's CPU dry run, so the script a lent GPU runs cannot rot in between."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks import bench_gpu
from benchmarks.bench_gpu import _overlap, format_table, run

BATCH = 8


class _OneCore:
    """``os`` as the benchmark sees it, on a machine of one core (its loaders' workers, torch's
    and chunkio's own, still see the real machine)."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def sched_getaffinity(pid: int) -> set[int]:
        return {0}


def test_dry_run_measures_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one core: the JPEGs are made and converted in this process, not on process pools (a
    # spawned pool imports afresh); 48 images in batches of 8, one epoch for every row's steps
    monkeypatch.setattr(bench_gpu, "os", _OneCore())
    results = run(dry_run=True, root=tmp_path, images=48, batch_size=BATCH)
    rows = {r["name"][0]: r for r in results["rows"]}
    assert sorted(rows) == list("abcdef")
    assert not [r for r in rows.values() if "error" in r]
    assert rows["a"]["route"] == "ring" and rows["b"]["route"] == "torch DataLoader"
    assert {rows[k]["route"] for k in "def"} == {"gpu-decode"}
    for k in "adef":  # the kept batch is still what it was when it arrived
        assert rows[k]["kept_batch_intact"] is True
    for r in rows.values():
        assert r["steps"] == 3
        assert 0.0 <= r["data_wait"] <= 1.0
        per_step = BATCH / (r["mean_step_ms"] / 1000)
        assert abs(r["images_per_s"] - per_step) / per_step < 0.01
    table = format_table(results)
    for r in results["rows"]:
        assert r["name"] in table
    assert (tmp_path / "train.zarr").is_dir()


def _trace(path: Path, events: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_overlap_counts_copy_time_under_kernels_of_other_streams(tmp_path: Path) -> None:
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)"}
    kernel = {"ph": "X", "cat": "kernel", "name": "conv"}
    events = [
        {**copy, "ts": 0, "dur": 10, "args": {"stream": 1}},
        {**kernel, "ts": 5, "dur": 20, "args": {"stream": 2}},  # covers 5 of the 10 us
        {**kernel, "ts": 6, "dur": 2, "args": {"stream": 2}},  # inside the first: no double count
        {**kernel, "ts": 0, "dur": 10, "args": {"stream": 1}},  # same stream: not overlap
    ]
    found = _overlap(_trace(tmp_path / "t.json", events))
    assert found["h2d_copies"] == 1 and found["overlapped"] == 0.5
    assert (
        _overlap(_trace(tmp_path / "none.json", [kernel | {"ts": 0, "dur": 1}]))["overlapped"]
        is None
    )
