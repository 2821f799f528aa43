"""The remote-read benchmark (benchmarks/bench_remote.py) on a tiny set against moto: its rows,
request accounting and checks (no timing assertions)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

from benchmarks import bench_remote
from chunkio.testing.servers import require, unavailable

require("moto", "moto[server] is not installed (pip install -e .[dev])")
require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")

N, BATCH = 96, 16


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench_remote")
    return bench_remote.run(
        quick=True,
        workers=1,
        batch_size=BATCH,
        root=root,
        n_images=N,
        size=48,
        skip_batches=1,
        epochs=1,
        generic_samples=BATCH,
        deep_prefetch=4,
    )


@pytest.mark.slow  # a moto server, every remote loader in its own processes: make soak
@pytest.mark.timeout(240)
def test_rows_counts_and_checks(results: dict[str, Any]) -> None:
    if "skipped" in results:
        unavailable(results["skipped"])  # fails under CI
    assert results["errors"] == {}
    rows = {r["name"]: r for r in results["rows"]}
    chunkio_rows = [bench_remote.LOCAL, bench_remote.S3_0, bench_remote.S3_20]
    assert list(rows) == [*chunkio_rows, f"{bench_remote.S3_20} prefetch=4", bench_remote.GENERIC]
    for name in chunkio_rows:
        r = rows[name]
        assert r["route"] == "ring" and r["first_batch_s"] > 0
        assert r["cold"]["samples"] == N - BATCH  # the first batch is not timed
        assert r["warm"]["samples"] == N
        for phase in ("cold", "warm"):
            assert r[phase]["samples_per_s"] > 0 and r[phase]["x_local"] > 0
    assert "requests" not in rows[bench_remote.LOCAL]["cold"]
    for name in (bench_remote.S3_0, bench_remote.S3_20):
        cold = rows[name]["cold"]
        log = cold["request_log"]
        # the whole cold epoch is counted: opening (metadata) and every chunk's bytes
        assert cold["counted_samples"] == N and cold["requests"] == log["requests"] > 0
        chunk_bytes = log["data"] + log["index"] + log["whole"]  # a set this small: few ranges
        assert log["metadata"] > 0 and chunk_bytes > 0
        assert cold["req_per_sample"] == pytest.approx(log["requests"] / N)
        assert cold["data_req_per_sample"] == pytest.approx(log["data"] / N)
        assert cold["wire_per_stored"] > 0.5  # every sample's bytes came over the wire
        kinds = ("list", "head", "metadata", "whole", "index", "data")
        assert sum(log[k] for k in kinds) == log["requests"]
    generic = rows[bench_remote.GENERIC]["cold"]
    assert generic["samples"] >= BATCH and generic["requests"] > 0
    glog = generic["request_log"]
    assert glog["data"] + glog["index"] + glog["whole"] > 0  # zarr read chunks per sample
    assert [c["target"].split(":")[0] for c in results["checks"]] == ["S3 20 ms"] * 3
    for c in results["checks"]:  # each verdict is its figure against its target
        at_most = c.get("at_most", False)
        assert c["passed"] is (
            c["measured"] <= c["required"] if at_most else c["measured"] >= c["required"]
        ), c
    table = bench_remote.format_table(results)
    assert "chunkio S3 20 ms" in table and "req/sample" in table and "generic zarr" in table


def test_log_summary_kinds() -> None:
    log = [
        ("GET", "/b/ds.zarr/zarr.json", None),
        ("HEAD", "/b/ds.zarr/label/zarr.json", None),
        ("GET", "/b?list-type=2&prefix=ds.zarr%2F&delimiter=%2F", None),
        ("GET", "/b/ds.zarr/label/c/0", "bytes=-100"),  # a shard index (suffix range)
        ("GET", "/b/ds.zarr/image/c/0", "bytes=900-999"),  # ends at the object's end: index
        ("GET", "/b/ds.zarr/image/c/0", "bytes=0-99"),
        ("GET", "/b/ds.zarr/image/c/0", "bytes=0-99"),
        ("GET", "/b/ds.zarr/spans/c/0/0", None),
    ]
    out = bench_remote._log_summary(log, {"image/c/0": 1000})
    assert (out["list"], out["head"], out["metadata"]) == (1, 1, 1)
    assert (out["index"], out["data"], out["whole"]) == (2, 2, 1)
    assert out["mean_data_range_bytes"] == 100
    assert out["ranges_fetched_again"] == out["data_ranges_fetched_again"] == 1
