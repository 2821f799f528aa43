"""The package's shape: no import cycles, format differences only behind ``backends/``, one
conversion engine, and the on-disk volume format outside the read side (``patches/``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "chunkio"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """chunkio modules ``path`` imports at module level (``TYPE_CHECKING`` blocks included:
    a cycle through type-only imports is still a cycle of meaning)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If):  # if TYPE_CHECKING: ...
            nodes += node.body
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("chunkio")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("chunkio"):
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {t for t in _imports(p) if t in files and t != m} for m, p in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges into a package ``__init__`` that only re-exports lazily or curates names are
    real imports too; drop only the edge from an ``__init__`` to its own submodules, which is
    how a package exposes them and never a design cycle."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules() -> None:
    graph = _without_package_inits(_graph())
    assert _cycles(graph) == []


def test_convert_does_not_import_the_read_side() -> None:
    graph = _graph()
    for module, targets in graph.items():
        if module.startswith("chunkio.convert"):
            bad = {t for t in targets if t.startswith(("chunkio.patches", "chunkio.dataset"))}
            assert not bad, f"{module} imports {bad}"


_FORMAT_BRANCH = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](zarr|hdf5|memory)["']""")


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if "backends" not in p.parts),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_format_branches_outside_backends(path: Path) -> None:
    """Capabilities (``storage_for(fmt).concurrent_writers``...) instead of format names."""
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _FORMAT_BRANCH.search(line)
    ]
    assert hits == []


def test_the_format_branch_pattern_catches_branches() -> None:
    assert _FORMAT_BRANCH.search('if fmt != "hdf5":')
    assert _FORMAT_BRANCH.search('if fmt in ("zarr", "hdf5"):')
    assert not _FORMAT_BRANCH.search('Format = Literal["zarr", "hdf5", "memory"]')


def test_one_conversion_engine() -> None:
    """Only the engine drives conversion tasks (pool, dask or in-process)."""
    convert = PACKAGE / "convert"
    drivers = sorted(
        p.name
        for p in convert.glob("*.py")
        if re.search(r"FIRST_COMPLETED|client\.submit\(", p.read_text(encoding="utf-8"))
    )
    assert drivers == ["engine.py"]
