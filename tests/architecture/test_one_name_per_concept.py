"""One name per concept. On the read side: a *reader* is a backend handle on a store's files
(``chunkio.backends.Reader`` and its implementations, opened by ``ReaderOptions``); the read
core, a field's reads, a batch's read request and a dataset's per-process handle have names of
their own. (There were four different "readers", and ``ReaderOptions`` beside ``ReadOptions``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import chunkio

PACKAGE = Path(chunkio.__file__).parent


def _classes() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        out += [(path, n.name) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    return out


def test_only_backend_readers_are_called_readers() -> None:
    named = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path, name in _classes()
        if "Reader" in name and "backends" not in path.relative_to(PACKAGE).parts
    ]
    assert named == []


def test_no_read_options_beside_reader_options() -> None:
    names = {name for _, name in _classes()}
    assert "ReaderOptions" in names and "ReadOptions" not in names


def test_one_class_named_output() -> None:
    """``chunkio.Output`` is how a dataset is stored; the engine's "where finished tasks go"
    is a ``TaskSink`` (there were two ``Output`` classes)."""
    named = [str(path.relative_to(PACKAGE)) for path, name in _classes() if name == "Output"]
    assert named == ["convert/options.py"]
    assert [name for _, name in _classes() if name.endswith("Output")] == ["Output"]
