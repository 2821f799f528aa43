"""The README is what a user reads first: short, its code runs as written, its links resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.timeout(300)
def test_readme_code_runs_as_written(tmp_path: Path) -> None:
    """Every Python block, in order, in one interpreter (later blocks use earlier names, as a
    reader going down the page does); the quickstart comes first."""
    text = README.read_text()
    blocks = _python_blocks(text)
    assert blocks and blocks[0] in text[text.index("## Quickstart") :]
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train.zarr" / "zarr.json").exists()
    assert (tmp_path / "user.zarr" / "zarr.json").exists()


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"README.md has {lines} lines (at most {MAX_LINES}): move detail to docs/ and link it"
    )


def test_readme_links_resolve() -> None:
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
