"""The README's quickstart runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.timeout(180)
def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("## Quickstart") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    result = subprocess.run(
        [sys.executable, "-c", code.group(1)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train.zarr" / "zarr.json").exists()
