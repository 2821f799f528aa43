"""A remote suite that cannot run skips on a developer's machine (saying why) and fails in CI;
every run ends with its skips counted by reason (:mod:`chunkio.testing.skips`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chunkio.testing.servers import in_ci

#: what makes moto unavailable in the child run, as a conftest.py
BREAKERS = {
    # the optional package is not installed: importing it fails
    "missing": 'import sys\nsys.modules["moto"] = None\nsys.modules["moto.server"] = None\n',
    # installed but the server does not start: its child process exits at once
    "unstartable": (
        "import chunkio.testing.servers as servers\n"
        'servers._MOTO_CHILD = "import sys; sys.exit(3)"\n'
    ),
}

TESTS = """
from chunkio.testing.servers import s3_server_fixture  # noqa: F401

def test_needs_s3(s3_server):
    assert s3_server.endpoint_url

def test_needs_nothing():
    pass
"""


def _run(tmp_path: Path, breaker: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(BREAKERS[breaker])
    (tmp_path / "test_s3.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's options
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # only the plugin under test: the installed ones (hypothesis, zarr's, xdist) cost the
    # child seconds of imports and play no part in a skip or its summary
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "chunkio.testing.skips", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(150)
@pytest.mark.parametrize("breaker", sorted(BREAKERS))
def test_a_server_that_cannot_start_fails_the_run_in_ci(tmp_path: Path, breaker: str) -> None:
    run = _run(tmp_path, breaker, ci="true")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "CI is set: this must run, not skip" in out
    assert "1 passed, 1 error" in out
    assert "0 skipped" in out  # the summary: nothing was skipped


@pytest.mark.timeout(150)
@pytest.mark.parametrize("breaker", sorted(BREAKERS))
def test_without_ci_it_skips_and_the_summary_says_why(tmp_path: Path, breaker: str) -> None:
    run = _run(tmp_path, breaker, ci=None)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "1 passed, 1 skipped" in out
    why = "moto.server" if breaker == "missing" else "did not start"
    summary = out.split("skips by reason", 1)[1]
    assert re.search(rf"^1 skipped:\n +1  moto.*{re.escape(why)}", summary, re.M), summary


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("", False), ("0", False), ("false", False)],
)
def test_in_ci_reads_the_ci_variable(monkeypatch: pytest.MonkeyPatch, value, expected) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected
    monkeypatch.delenv("CI")
    assert in_ci() is False
