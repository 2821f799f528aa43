"""bench_windows' ``--rounds``: medians over the rounds that measured a row, targets by name."""

from __future__ import annotations

from benchmarks.bench_windows import _median_checks, _medians, _ranged
from benchmarks.report import check, check_lines


def _store(rates: dict[str, float]) -> dict[str, object]:
    return {"steps": 10, "samples_per_s": rates, "samples_per_cpu_s": dict(rates)}


def test_a_row_missing_from_some_rounds_is_the_median_of_the_others() -> None:
    rounds = [
        _store({"chunkio": 10.0, "insitubatch": 4.0}),
        _store({"chunkio": 30.0}),  # insitubatch failed in this round
        _store({"chunkio": 20.0, "insitubatch": 8.0}),
    ]
    found = _medians(rounds)
    assert found["samples_per_s"] == {"chunkio": 20.0, "insitubatch": 6.0}
    assert found["counts"]["samples_per_s"] == {"chunkio": 3, "insitubatch": 2}
    assert found["ranges"]["samples_per_s"]["insitubatch"] == [4.0, 8.0]
    # missing from the first round too: still reported
    assert _medians(rounds[1:])["samples_per_s"]["insitubatch"] == 8.0
    assert _ranged(found, "samples_per_s", "insitubatch", 3) == "6 [4-8] (2 of 3 rounds)"
    assert _ranged(found, "samples_per_s", "chunkio", 3) == "20 [10-30]"


def test_targets_are_matched_by_name_not_position() -> None:
    a, b = check("fast", 1.0, 2.0), check("amplification", 1.1, 1.2, at_most=True)
    again = check("amplification", 1.0, 1.2, at_most=True)
    rounds = [[a, b], [again], [check("fast", 3.0, 2.0), b]]
    merged = {c["target"]: c for c in _median_checks(rounds)}
    assert merged["fast"]["measured"] == 2.0 and merged["fast"]["passed"]
    assert merged["fast"]["rounds"] == [1.0, 3.0]
    assert merged["amplification"]["measured"] == 1.1
    assert len(merged["amplification"]["rounds"]) == 3
    lines = check_lines([check("one round", 1.0, 2.0), merged["fast"]])
    assert lines == [
        "FAIL one round: 1.00 (>= 2.0)",
        "PASS fast: 2.00 [1.00-3.00 over 2] (2 of 3 rounds) (>= 2.0)",
    ]
