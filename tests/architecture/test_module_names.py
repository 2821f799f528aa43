"""No module of chunkio is named like a standard-library module.

A ``chunkio/inspect.py`` once made ``import dataclasses`` fail when run from inside
``chunkio/`` (the standard library's ``inspect`` resolved to it); names that shadow the
standard library are refused outright.
"""

from __future__ import annotations

import sys
from pathlib import Path

import chunkio

PACKAGE = Path(chunkio.__file__).parent


def module_names() -> dict[str, Path]:
    """Every module and package of chunkio by its last name component."""
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        name = path.parent.name if path.name == "__init__.py" else path.stem
        found.setdefault(name, path)
    return found


def test_modules_are_found() -> None:
    names = module_names()
    assert {"cli", "numeric", "transport", "backends"} <= names.keys()


def test_no_module_shadows_the_standard_library() -> None:
    clashes = {
        name: str(path.relative_to(PACKAGE))
        for name, path in module_names().items()
        if name in sys.stdlib_module_names
    }
    assert not clashes, f"modules named like standard-library modules: {clashes}"
