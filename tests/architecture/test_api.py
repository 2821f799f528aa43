"""The public API: every exported name resolves; conversion never imports torch."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import chunkio


def test_every_exported_name_resolves() -> None:
    assert chunkio.__all__ == sorted(chunkio.__all__)
    for name in chunkio.__all__:
        assert getattr(chunkio, name) is not None, name


def test_conversion_and_inspection_do_not_import_torch() -> None:
    code = (
        "import sys, chunkio, chunkio.convert.images, chunkio.diagnose.dataset_report, "
        "chunkio.diagnose.cli; "
        "chunkio.write_arrays; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _lazy_packages() -> list[str]:
    import pkgutil

    return sorted(
        m.name
        for m in pkgutil.walk_packages(chunkio.__path__, "chunkio.")
        if m.ispkg and "_LAZY" in vars(importlib.import_module(m.name))
    )


@pytest.mark.parametrize("package", ["chunkio", *_lazy_packages()])
def test_no_lazily_exported_name_is_also_a_submodule(package: str) -> None:
    """Importing a submodule sets the package attribute of its name, which then hides a
    lazily exported name of the same spelling (``chunkio.transforms.normalize`` was once the
    module, not the function, after any transform was imported)."""
    import pkgutil

    module = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
    assert set(vars(module)["_LAZY"]) & submodules == set()
    for name in vars(module)["_LAZY"]:
        assert not inspect.ismodule(getattr(module, name)), name
