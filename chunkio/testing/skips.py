"""A pytest plugin that ends every run with how many tests skipped, and why.

``-ra`` lists each skip by location; this groups them by reason, so a run where a whole suite
skipped (a server that did not start, an optional package missing) says so in one line even
when nothing failed. Its last lines say whether chunkio's compiled parts are built, and for
each one that is not, how many tests skipped for it (:func:`chunkio.testing.compiled.summary`).
Enabled by ``pytest_plugins`` in ``tests/conftest.py`` (or ``-p chunkio.testing.skips``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from .compiled import problems, summary

__all__ = ["pytest_terminal_summary", "skip_reasons"]


def skip_reasons(reports: list[Any]) -> Counter[str]:
    """Skip reports (tests, or modules skipped at collection) counted by reason."""
    reasons: Counter[str] = Counter()
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    return reasons


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    reports = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    reasons = skip_reasons(reports)
    terminalreporter.section("skips by reason")
    terminalreporter.write_line(f"{len(reports)} skipped" + (":" if reports else ""))
    for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.write_line(f"  {count:5d}  {reason}")
    missing = problems()
    for line in summary(list(reasons.elements()), missing):
        terminalreporter.write_line(line, yellow=bool(missing))
