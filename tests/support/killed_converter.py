"""A conversion script run in its own process and SIGKILLed at a chosen point: the resume
tests of conversions (RELIABILITY row 10)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def run_and_kill(
    script: str, args: list[str], dst: Path, tmp_path: Path, ready: Callable[[], bool]
) -> None:
    """Start ``script`` with ``args``; SIGKILL it as soon as ``ready()``; check that nothing
    was published at ``dst``."""
    path = tmp_path / "convert_script.py"
    path.write_text(script)
    proc = subprocess.Popen(
        [sys.executable, "-W", "error", str(path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if ready():
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate()
                assert not dst.exists(), "killed before the end: nothing published"
                return
            if proc.poll() is not None:
                raise AssertionError(f"converter exited early: {proc.communicate()}")
            time.sleep(0.02)
        raise AssertionError("no progress from the converter within 60 s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def manifest_lines(dst: Path) -> int:
    """Blocks the manifest of ``dst``'s staging lists (0 before it exists)."""
    manifest = dst.parent / f".{dst.name}.chunkio-staging" / "manifest.jsonl"
    return manifest.read_text().count("\n") if manifest.exists() else 0
