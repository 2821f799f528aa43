"""The stage profile benchmark runs and accounts for its stages (no timing assertions)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

from benchmarks import bench_read_profile


@pytest.mark.timeout(120)
def test_profile_names_every_stage(make_dataset: Any, fmt: str) -> None:
    path, _ = make_dataset(fmt)
    prof = bench_read_profile.profile_format(path, batch_size=32, workers=1)
    local, ring = prof["in_process"], prof["ring"]
    stages = [local[f"{s}_s"] for s in ("read", "checksum", "decode", "gather")]
    assert min(stages) >= 0 and local["plan and bookkeeping_s"] >= 0
    # the stages account for the epoch: what the counters did not time is the bookkeeping
    assert sum(stages) + local["plan and bookkeeping_s"] == pytest.approx(local["wall_s"])
    assert local["samples"] == 200  # (a set this small stays decoded in the pool: no reads)
    # worker CPU is counted in 10 ms ticks: an epoch this small may show none
    assert ring["samples"] == 200 and ring["workers_cpu_s"] >= 0 and ring["wall_s"] > 0
    rows = bench_read_profile._rows(fmt, prof)
    stages = [r["stage"] for r in rows]
    assert stages[:4] == ["file read", "checksum", "decompress", "gather"]
    assert {"slot hand-off", "consumer", "worker overhead"} <= set(stages)
    text = bench_read_profile.format_profile(
        {"workers": 1, "batch_size": 32, "epoch": rows, "rates": {}}
    )
    assert "file read" in text and "slot hand-off" in text
