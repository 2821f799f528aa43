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


#: Where conversion tasks may be driven: the engine alone (``convert/engine/core.py``).
#: ``processes.py`` only defines the
#: process server the engine starts; ``writing.py`` is the writer protocol (it applies the
#: writes of one task, a loop over arrays, not over tasks).
_ENGINE = PACKAGE / "convert" / "engine" / "core.py"
_POOL_MAKERS = {"ProcessPoolExecutor", "ThreadPoolExecutor", "Pool"}
_POOL_MAKERS |= {"WorkerProcesses", "worker_processes", "ConversionPool", "process_pool"}
_SUBMITTERS = {"submit", "scatter", "as_completed", "FIRST_COMPLETED", "map_async"}
_BLOCK_WRITES = {"write_block", "write_runs", "write_region", "write_here", "apply_writes"}


def _name(node: ast.AST) -> str:
    """The called or referenced name: ``f`` of ``f(...)``, ``m`` of ``x.y.m(...)``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _writes_blocks(call: ast.Call, writers: set[str]) -> bool:
    """A block written: a writer primitive, ``...target.write(...)``, or a function of the same
    module that (directly or not) does one."""
    func = call.func
    if _name(call) in _BLOCK_WRITES | writers:
        return True
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "write"
        and ast.unparse(func.value).lower().endswith("target")
    )


def _driver_findings(path: Path) -> list[str]:
    """What in ``path`` drives conversion tasks itself instead of handing them to the engine:
    a process pool made, work submitted to a pool or a dask client, a progress bar of tasks,
    or a loop that writes blocks (through helpers of the same module too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    writers: set[str] = set()
    while True:  # functions of this module that write blocks, to a fixed point
        more = {
            f.name
            for f in functions
            if f.name not in writers
            and any(isinstance(c, ast.Call) and _writes_blocks(c, writers) for c in ast.walk(f))
        }
        if not more:
            break
        writers |= more
    out = []
    for node in ast.walk(tree):
        name = _name(node) if isinstance(node, ast.Call | ast.Name | ast.Attribute) else ""
        if isinstance(node, ast.Call) and name in _POOL_MAKERS and path.name != "processes.py":
            out.append(f"{path.name}:{node.lineno}: makes a pool ({name})")
        elif name in _SUBMITTERS and isinstance(node, ast.Call | ast.Name):
            out.append(f"{path.name}:{node.lineno}: submits tasks ({name})")
        elif isinstance(node, ast.Call) and name == "tqdm":
            out.append(f"{path.name}:{node.lineno}: a progress bar of tasks")
        elif isinstance(node, ast.For | ast.While) and path.name != "writing.py":
            body = [c for stmt in node.body for c in ast.walk(stmt) if isinstance(c, ast.Call)]
            hits = sorted({_name(c) for c in body if _writes_blocks(c, writers)})
            if hits:
                out.append(f"{path.name}:{node.lineno}: a loop writing blocks ({', '.join(hits)})")
    return out


def _drivers() -> list[str]:
    paths = [*(PACKAGE / "convert").rglob("*.py"), *(PACKAGE / "patches").rglob("*.py")]
    return sorted(f for p in paths if p != _ENGINE for f in _driver_findings(p))


def test_the_driver_finder_finds_drivers(tmp_path: Path) -> None:
    """What the check below catches: each of these, in any module but the engine."""
    src = tmp_path / "second_driver.py"
    src.write_text(
        "from concurrent.futures import ProcessPoolExecutor, FIRST_COMPLETED\n"
        "from tqdm import tqdm\n"
        "def _flush(self, chunk):\n"
        "    self.target.write(chunk)\n"
        "def drive(tasks, client, writer, out):\n"
        "    pool = ProcessPoolExecutor(2)\n"
        "    client.submit(len, tasks)\n"
        "    wait(tasks, return_when=FIRST_COMPLETED)\n"
        "    bar = tqdm(total=len(tasks))\n"
        "    for start, rows in tasks:\n"
        "        writer.write_block('x', start, rows)\n"
        "    while tasks:\n"
        "        _flush(out, tasks.pop())\n",
        encoding="utf-8",
    )
    found = "\n".join(_driver_findings(src))
    for what in ("makes a pool", "submits tasks", "progress bar", "(write_block)", "(_flush)"):
        assert what in found, found
    assert "FIRST_COMPLETED" in found


def test_one_conversion_engine() -> None:
    """Only the engine drives conversion tasks: images, arrays, volumes, appends and stitching
    all hand it their tasks (in-process, a process pool or dask). Before the engine drove
    them all this listed pipeline.py's and volumes.py's own progress loops, append.py's and
    stitch.py's serial write loops."""
    assert _drivers() == []
