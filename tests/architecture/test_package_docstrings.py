"""Package docstrings say what is true: each package's "may import" sentence names exactly the
layers the import check allows it (``LAYERS`` in test_architecture.py), and every module a
package docstring names exists. A newcomer trusts these lines first."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from test_architecture import _FOUNDATION, LAYERS, PACKAGE, _packages, _unit

#: where the sentence starts ("Foundations every other package may import" is not it)
_SENTENCE = re.compile(r"(?:[Mm]odules here|this package) may import")
#: ``:mod:`chunkio.format``` or ``:mod:`.zarr``` in a docstring
_MOD = re.compile(r":mod:`(~?[\w.]+)`")


def _docstring(package: Path) -> str:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    return " ".join((doc or "").split())


def _module_name(package: Path) -> str:
    return ".".join(package.relative_to(PACKAGE.parent).parts)


def _may_import(doc: str) -> str:
    """The sentence that says what the package may import, up to its "never" clause."""
    found = _SENTENCE.search(doc)
    if found is None:
        return ""
    start = found.start()
    stop = [i for i in (doc.find(". ", start), doc.find("never", start)) if i > 0]
    return doc[start : min(stop)] if stop else doc[start:]


def _named_units(sentence: str, here: str) -> set[str]:
    """The layers the sentence names (``chunkio.backends.codec_table`` -> ``backends``); names
    relative to the package (``.stream``) are its own modules, not layers."""
    return {
        _unit(name.lstrip("~"))
        for name in _MOD.findall(sentence)
        if name.lstrip("~").startswith("chunkio.")
    } - {here}


def _resolves(name: str, package: str) -> bool:
    """Whether ``name`` (absolute, or relative to ``package``) is a module or a name in one."""
    name = name.lstrip("~")
    parts = (package + name if name.startswith(".") else name).split(".")
    for i in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


_CHECKED = [p for p in _packages(PACKAGE) if p != PACKAGE and _unit(_module_name(p)) in LAYERS]


@pytest.mark.parametrize("package", _CHECKED, ids=lambda p: _module_name(p))
def test_may_import_names_exactly_the_allowed_layers(package: Path) -> None:
    here = _unit(_module_name(package))
    named = _named_units(_may_import(_docstring(package)), here)
    allowed = (LAYERS[here] | _FOUNDATION) - {here}
    assert named == allowed, (
        f"{_module_name(package)}/__init__.py says it may import {sorted(named)}; the layer "
        f"check allows {sorted(allowed)} (missing: {sorted(allowed - named)}, not allowed: "
        f"{sorted(named - allowed)})"
    )


@pytest.mark.parametrize("package", _packages(PACKAGE), ids=lambda p: _module_name(p))
def test_modules_a_package_docstring_names_exist(package: Path) -> None:
    name = _module_name(package)
    dead = [m for m in _MOD.findall(_docstring(package)) if not _resolves(m, name)]
    assert not dead, f"{name}/__init__.py names modules that do not exist: {dead}"


def test_the_docstring_checks_catch_a_wrong_sentence() -> None:
    sentence = _may_import(
        "Readers every package may import. Modules here may import :mod:`chunkio.util`, "
        ":mod:`chunkio.backends.base` and :mod:`.stream`, never :mod:`chunkio.read`."
    )
    assert _named_units(sentence, "format") == {"util", "backends"}
    assert not _resolves("chunkio.no_such_module", "chunkio")
    assert _resolves(".core", "chunkio.read") and _resolves("chunkio.read.core.ReadCore", "x")
    assert _may_import("Foundations every other package may import.") == ""
