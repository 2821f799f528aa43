"""``benchmarks/bench_convert.py`` on a few files: every figure is there, and shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_convert
from benchmarks.report import _section

pytest.importorskip("sklearn")  # the photographs the JPEGs are cut from


@pytest.mark.timeout(300)
def test_bench_convert_reports_both_sets_and_its_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_convert, "ROOT", tmp_path)
    result = bench_convert.run(24, 2, n_realistic=12, repeats=1, write_mib=1)
    assert [s["set"] for s in result["sets"]] == ["realistic", "mixed"]
    for s in result["sets"]:
        for key in ("pillow", "floor", "convert", "convert_pooled"):
            assert s[f"{key}_images_per_s"] > 0, key
        assert s["convert_over_bare_decode"] > 0 and s["check_vs_decode"] > 0
    assert result["convert_over_bare_decode"] == result["sets"][0]["convert_over_bare_decode"]
    assert result["write_arrays_workers_over_one"] > 0
    real = result["sets"][0]
    measured = [
        (real["convert_over_bare_decode"], bench_convert.TARGET, False),
        (real["convert_jpeg_over_bare_decode"], bench_convert.TARGET, False),
        (result["write_arrays_workers_over_one"], 1.1, True),
    ]
    for check, (value, required, at_most) in zip(result["checks"], measured, strict=True):
        assert (check["measured"], check["required"]) == (value, required), check
        assert check["passed"] is (value <= required if at_most else value >= required), check
    assert not list(tmp_path.glob("*.zarr")), "converted datasets are removed"
    text = "\n".join(_section("Conversion (bench_convert)", result))
    assert "realistic" in text and "convert_over_bare_decode" in text


@pytest.mark.parametrize("margin", [-0.01, 0.0, 0.01])
def test_checks_pass_exactly_at_their_targets(margin: float) -> None:
    """The verdicts, on figures given by the test on both sides of each target."""
    t = bench_convert.TARGET
    result = {
        "sets": [
            {"set": "realistic", "convert_over_bare_decode": t + margin,
             "convert_jpeg_over_bare_decode": t - margin},
        ],
        "write_arrays_workers_over_one": 1.1 + margin,
    }  # fmt: skip
    passed = [c["passed"] for c in bench_convert.checks(result)]
    assert passed == [margin >= 0, margin <= 0, margin <= 0]
