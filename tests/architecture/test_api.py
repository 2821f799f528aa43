"""The public API: every exported name resolves; conversion never imports torch."""

from __future__ import annotations

import dataclasses
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
        "chunkio.write_arrays, chunkio.Output, chunkio.Execution, chunkio.ImageOptions; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


#: the most parameters each entry point takes: what a user touches, the rest in option objects
PARAMETERS = {
    "make_loader": 12,
    "write_arrays": 10,
    "convert_arrays": 10,
    "convert_images": 10,
    "convert_volumes": 10,
    "append_arrays": 10,
    "ChunkDataset": 12,
}


@pytest.mark.parametrize(("name", "limit"), sorted(PARAMETERS.items()))
def test_entry_points_take_few_parameters(name: str, limit: int) -> None:
    parameters = inspect.signature(getattr(chunkio, name)).parameters
    assert len(parameters) <= limit, list(parameters)
    kinds = {p.kind for p in parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds  # old spellings: the wrapper takes them


def test_converters_share_one_output_and_one_execution_object() -> None:
    for name in ("write_arrays", "convert_arrays", "convert_images", "convert_volumes"):
        parameters = inspect.signature(getattr(chunkio, name)).parameters
        for param, cls in (("output", "Output"), ("execution", "Execution")):
            assert parameters[param].default is None, (name, param)  # one set of defaults
            assert cls in str(parameters[param].annotation), (name, param)
    loader = inspect.signature(chunkio.make_loader).parameters
    assert "Ordering" in str(loader["ordering"].annotation)
    assert "Workers" in str(loader["workers"].annotation)


@pytest.mark.parametrize(
    "name", ["Decoding", "Execution", "ImageOptions", "Ordering", "Output", "Workers"]
)
def test_option_objects_are_frozen_and_documented(name: str) -> None:
    cls = getattr(chunkio, name)
    option = cls()
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert dataclasses.replace(option) == option
    doc = inspect.getdoc(cls) or ""
    assert "Parameters" in doc and "Examples" in doc
    for field in dataclasses.fields(cls):
        assert field.name in doc, (name, field.name)


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
