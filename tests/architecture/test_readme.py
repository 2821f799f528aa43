"""The README is what a user reads first: short, quickstart first, its links resolve (its code
runs as written: tests/architecture/test_doc_recipes.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_quickstart_is_its_first_code() -> None:
    """The first Python block is the quickstart (test_doc_recipes runs every block, in order,
    the quickstart twice: a rerun must work as written)."""
    text = README.read_text()
    blocks = _python_blocks(text)
    assert blocks and blocks[0] in text[text.index("## Quickstart") :]


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
