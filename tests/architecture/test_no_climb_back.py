"""The ``make_loader`` walk stays in its rooms: no layer below :mod:`chunkio.dataset` climbs back
up to read the dataset's internals.

A layer below the dataset (what ``dataset`` may import, and ``transport``, which the loader hands
the dataset to) gets what it needs as values or through a protocol of its own
(``LabelSource``, ``Columns``, ``DecodeTarget``, ``BatchSource``...), built by the dataset or the
loader. A *climb back* is a function there that takes the dataset as ``Any`` (or untyped) and
reads its attributes: a parameter named ``dataset`` (or ``ds``) typed ``Any`` or untyped, or an
attribute of :class:`~chunkio.ChunkDataset`'s own (``layout``, ``reader_options``, ``_files``...)
read from any parameter typed ``Any`` or untyped (``x.layout``, ``getattr(x, "_files")``).
A parameter typed by a protocol, or ``object`` (``mypy --strict`` then allows no attribute read
without an ``isinstance`` check against one), is declared and passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_architecture import _FOUNDATION, LAYERS, PACKAGE, _module_name, _unit

_DATASET = PACKAGE / "dataset" / "__init__.py"
#: parameter names that say "the dataset"
_NAMES = {"dataset", "ds"}


def _below(unit: str) -> set[str]:
    """Every layer ``unit`` may import, directly or through another."""
    seen: set[str] = set()
    todo = [*LAYERS[unit], *_FOUNDATION]
    while todo:
        there = todo.pop()
        if there not in seen:
            seen.add(there)
            todo += LAYERS.get(there, ())
    return seen


#: the layers below the dataset, and the transport the loader hands it to
BELOW = (_below("dataset") | _below("transport") | {"transport"}) - {"dataset"}


def _dataset_attributes(path: Path = _DATASET) -> set[str]:
    """What :class:`~chunkio.ChunkDataset` holds: ``self.x = ...`` in its methods, class-level
    names, and properties (its methods are not listed: calling a method a protocol declares,
    ``read_batch``, is how a lower layer is meant to ask)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ChunkDataset")
    found: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
        ):
            found.add(node.name)
    for node in ast.walk(cls):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        for t in flat:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                found.add(t.attr)
    return found


def _is_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return True
    text = ast.unparse(annotation).strip("'\"")
    return text in {"Any", "typing.Any"}


def climbs(source: str, where: str, attributes: set[str]) -> list[str]:
    """The climbs back in module ``source`` (named ``where`` in what it returns)."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        loose = {
            a.arg
            for a in args
            if a.arg not in ("self", "cls")
            and (isinstance(fn, ast.Lambda) or _is_any(a.annotation))
        }
        name = getattr(fn, "name", "<lambda>")
        out += [f"{where}:{fn.lineno} {name}({a}: Any)" for a in sorted(loose & _NAMES)]
        for node in ast.walk(fn):
            read = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                read = (node.value.id, node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and isinstance(node.args[1], ast.Constant)
            ):
                read = (node.args[0].id, str(node.args[1].value))
            if read and read[0] in loose and read[1] in attributes:
                out.append(f"{where}:{node.lineno} {name} reads {read[0]}.{read[1]}")
    return out


def _lower_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if _unit(_module_name(p)) in BELOW)


def test_the_layers_below_the_dataset_are_the_ones_it_stands_on() -> None:
    assert {"sampling", "transforms", "transport", "read", "collection", "format"} <= BELOW
    assert not {"dataset", "loader", "loader_options", "diagnose", "convert"} & BELOW


def test_the_dataset_attributes_are_found() -> None:
    found = _dataset_attributes()
    assert {"layout", "location", "reader_options", "_files", "remote", "samples"} <= found
    assert "read_batch" not in found  # a method a protocol declares


@pytest.mark.parametrize("path", _lower_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_layer_below_the_dataset_climbs_back(path: Path) -> None:
    where = str(path.relative_to(PACKAGE))
    assert climbs(path.read_text(encoding="utf-8"), where, _dataset_attributes()) == []


def test_the_climb_check_sees_a_climb() -> None:
    """The climbs this check was written against (the label check, ``Normalize`` and the
    GPU-decode route before they took values), and what passes."""
    planted = (
        "from typing import Any\n"
        "def labels_of(dataset: Any, reader=None):\n"  # 2: named dataset, typed Any
        "    return dataset.layout\n"  # 3: reads its layout
        "def check(source, sampler: Any):\n"  # 4
        "    return getattr(source, '_files', None), sampler.batch_size\n"  # 5: untyped source
        "def route(ds, field: str):\n"  # 6: untyped ds
        "    return ds.read_encoded([0], field)\n"  # 7: a method: only the parameter counts
        "def fine(dataset: 'BatchSource', columns: Columns, where: object):\n"
        "    return dataset.read_batch([0]), columns.location, dataset.fields\n"
        "check_files = lambda dataset, _, sampler: dataset.chunk_sizes\n"  # 10
    )
    attributes = {"layout", "_files", "fields", "location", "chunk_sizes"}
    assert climbs(planted, "m.py", attributes) == [
        "m.py:2 labels_of(dataset: Any)",
        "m.py:3 labels_of reads dataset.layout",
        "m.py:5 check reads source._files",
        "m.py:6 route(ds: Any)",
        "m.py:10 <lambda>(dataset: Any)",
        "m.py:10 <lambda> reads dataset.chunk_sizes",
    ]
