"""Field kinds live in their registries: what a kind stores, how it is read and how it is
written is one module per kind (:mod:`chunkio.format.kinds`, the readers of
:data:`chunkio.read.core.FIELD_KINDS`, :mod:`chunkio.convert.engine.kinds` and
:mod:`chunkio.convert.shuffle.spill_kinds`). Everywhere else code asks the kind
(``kind_of(f.kind).flat``, ``f.kind_def.plain_arrays``) or the field's arrays by role
(``f.roles.offsets``), never compares a kind with a kind's name, and never picks an array by
its position in ``array_names()`` (whose order changes with the kind)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from chunkio.convert.engine.kinds import WRITE_KINDS
from chunkio.convert.shuffle.spill_kinds import SPILL_KINDS
from chunkio.format.kinds import KINDS
from chunkio.format.layout import FieldInfo, FieldKind
from chunkio.format.sparse import SparseInfo
from chunkio.read.core import FIELD_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "chunkio"

#: the modules of the registries, where a kind's own module may name it
REGISTRIES = (
    "format/kinds/",
    "convert/engine/kinds/",
    "convert/shuffle/spill_kinds.py",
    "read/core.py",
    "read/windows/",  # the window kind's reader (FIELD_KINDS["window"])
)


def _is_kind(node: ast.AST) -> bool:
    """``kind``, ``<anything>.kind``, ``spec["kind"]`` or ``spec.get("kind")``: a field's
    kind (a dtype's ``kind`` is compared with one-letter codes, which name no field kind)."""
    if isinstance(node, ast.Name | ast.Attribute):
        return (node.id if isinstance(node, ast.Name) else node.attr) == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "kind"
    )


def _names_a_kind(node: ast.AST) -> bool:
    """A field kind's name, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in KINDS
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(e) for e in node.elts)
    return False


def _is_array_names(node: ast.AST) -> bool:
    """``f.array_names()``, or ``sparse_array_names(name)`` and its kin: lists of a field's
    arrays whose order means a role."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return str(name).endswith("array_names")


def kind_branches(source: str) -> list[str]:
    """``line: code`` of each comparison of a field's kind with a kind's name in ``source``
    (``==``, ``!=``, ``in``, ``not in``, a ``match`` case)."""
    tree = ast.parse(source)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_kind, operands)) and any(map(_names_a_kind, operands)):
                hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Match) and _is_kind(node.subject):
            for case in node.cases:
                pattern = case.pattern
                if isinstance(pattern, ast.MatchValue) and _names_a_kind(pattern.value):
                    hits.append(f"{pattern.lineno}: case {ast.unparse(pattern)}")
    return sorted(hits, key=lambda hit: int(hit.split(":")[0]))


def positional_roles(source: str) -> list[str]:
    """``line: code`` of each array picked by its position in ``array_names()``: an index or
    a slice of it, or the list unpacked into names."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and _is_array_names(node.value):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Assign | ast.For) and _is_array_names(
            node.value if isinstance(node, ast.Assign) else node.iter
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Tuple | ast.List) for t in targets):
                hits.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return sorted(hits, key=lambda hit: int(hit.split(":")[0]))


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _in_registry(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).as_posix()
    return any(rel == r or (r.endswith("/") and rel.startswith(r)) for r in REGISTRIES)


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if not _in_registry(p)],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_field_kind_branches_outside_the_registries(path: Path) -> None:
    """Ask the kind (``f.kind_def.flat``) or the field's roles, not the kind's name."""
    assert kind_branches(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "path",
    # the kinds themselves turn their names' order into roles
    [p for p in _modules() if not p.relative_to(PACKAGE).as_posix().startswith("format/kinds/")],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_array_picked_by_its_position(path: Path) -> None:
    """``f.roles.shapes``, not ``f.array_names()[2]`` (the offsets of a sparse field)."""
    assert positional_roles(path.read_text(encoding="utf-8")) == []


def test_the_checks_catch_branches_and_positions() -> None:
    planted = """
if f.kind == "sparse": pass
if info.kind not in ("dense", "window"): pass
ok = kind != "ragged"
if f.dtype.kind == "f" or fmt == "dense" or kind == "image": pass
match f.kind:
    case "encoded": pass
name = f.array_names()[2]
flat = f.array_names()[:2]
data, spans, shapes = f.array_names()
for name in f.array_names(): pass
every = list(f.array_names())
sparse = spec.get("kind") == "sparse" or spec["kind"] in ("dense",) or spec.get("x") == "dense"
columns = sparse_array_names(name)[1]
"""
    assert kind_branches(planted) == [
        "2: f.kind == 'sparse'",
        "3: info.kind not in ('dense', 'window')",
        "4: kind != 'ragged'",
        "7: case 'encoded'",
        "13: spec.get('kind') == 'sparse'",
        "13: spec['kind'] in ('dense',)",
    ]
    assert positional_roles(planted) == [
        "8: f.array_names()[2]",
        "9: f.array_names()[:2]",
        "10: data, spans, shapes = f.array_names()",
        "14: sparse_array_names(name)[1]",
    ]


def test_the_registries_exist() -> None:
    """A registry moved or renamed would let its branches hide: each entry is a real path."""
    for entry in REGISTRIES:
        assert (PACKAGE / entry).exists(), entry


def test_every_kind_is_read_and_every_stored_kind_written() -> None:
    """Adding a kind is a module in each registry: none is forgotten in one of them."""
    assert set(FIELD_KINDS) == set(KINDS) == set(get_args(FieldKind))
    assert set(WRITE_KINDS) == {name for name, kind in KINDS.items() if kind.stored}
    assert set(SPILL_KINDS) <= set(WRITE_KINDS)


def test_the_roles_name_the_arrays_the_format_defines() -> None:
    """The on-disk names stay as earlier versions wrote them; each role is the array that
    holds it, whatever its position."""
    f4 = np.dtype("f4")
    ragged = FieldInfo("x", f4, None, "ragged").roles
    assert (ragged.values, ragged.offsets, ragged.shapes) == (
        "x__values",
        "x__offsets",
        "x__shapes",
    )
    coded = FieldInfo("im", np.dtype("u1"), None, "encoded", encoding="jpeg").roles
    assert (coded.bytes, coded.spans, coded.shapes) == ("im__bytes", "im__spans", "im__shapes")
    assert coded.data == coded.bytes and coded.locator == coded.spans
    sparse = FieldInfo("s", f4, (9,), "sparse")
    assert sparse.array_names() == ("s__values", "s__indices", "s__offsets", "s__shapes")
    assert (sparse.roles.offsets, sparse.roles.shapes) == ("s__offsets", "s__shapes")
    assert sparse.roles.flat == ("s__values", "s__indices")
    group = SparseInfo("s", f4, (9,), "sparse", group="X").roles
    assert (group.values, group.indices, group.offsets) == ("X/data", "X/indices", "X/indptr")
    assert not group.has("shapes")
    dense = FieldInfo("y", np.dtype("i8"), ())
    assert dense.array_names() == ("y",) and dense.roles.flat == ()
    assert FieldInfo("c", f4, (), array="table/c").roles.values == "table/c"
