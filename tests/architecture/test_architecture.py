"""The package's shape: packages by concept that import only what their layer allows, no import
cycles (imports inside function bodies included), format differences only behind ``backends/``,
one conversion engine, and the on-disk volume format outside the read side (``patches/``)."""

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


def _imports(path: Path, name: str | None = None) -> set[str]:
    """chunkio modules ``path`` imports anywhere: at module level, under ``TYPE_CHECKING`` (a
    cycle through type-only imports is still a cycle of meaning) and inside function and
    method bodies (an import deferred to call time still ties the two modules together).
    ``name``: the module ``path`` is read as (its own by default)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
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


def test_the_import_finder_sees_function_bodies(tmp_path: Path) -> None:
    """An import deferred into a function or a method counts: that is how the
    ``dataset_report`` <-> ``foreign_report`` cycle once hid from a module-level scan."""
    planted = tmp_path / "dataset_report.py"
    planted.write_text(
        "def f():\n    from .foreign_report import info\n"
        "class C:\n    def m(self):\n        import chunkio.sampling.order\n",
        encoding="utf-8",
    )
    found = _imports(planted, "chunkio.diagnose.dataset_report")
    assert {"chunkio.diagnose.foreign_report", "chunkio.sampling.order"} <= found


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


# --------------------------------------------------------------------------------------------
# Layers: what each package may import, as its docstring says
# --------------------------------------------------------------------------------------------

#: Subpackages that are layers of their own (the rest of a package is one unit with them).
_SUBLAYERS = {
    "backends": {"zarr", "hdf5"},
    "convert": {"engine", "durability", "shuffle", "image", "volume"},
}
_FOUNDATION = {"errors", "util"}
_CONVERT_PARTS = {"convert.engine", "convert.durability", "convert.shuffle"}
#: unit -> the units it may import (besides itself, ``errors`` and ``util``). ``chunkio``
#: (the root package, whose lazy table names everything) and ``diagnose`` (the top) may import
#: anything.
LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "util": set(),
    "remote": set(),
    "images": {"backends"},  # yuv420's LZ4 goes through backends/codec_table.py
    "transforms": set(),
    # the GPU-decode route (transport/gpu_decode.py) plans crops and decodes JPEGs on the device
    "transport": {"images", "transforms"},
    "backends": {"backends.zarr", "backends.hdf5"},  # the registry opens implementations lazily
    "backends.zarr": {"backends", "format", "remote"},
    "backends.hdf5": {"backends", "remote"},
    "format": {"backends"},
    "testing": {"backends", "format", "remote"},
    "read": {"backends", "format", "images", "transforms"},
    "sampling": {"backends", "format"},
    # many files as one dataset: one read core per file
    "collection": {"backends", "format", "read", "transforms"},
    "dataset": {"backends", "collection", "format", "read", "sampling", "transforms"},
    "loader_options": {"dataset", "sampling", "transport"},
    "loader": {
        "backends",
        "dataset",
        "format",
        "loader_options",
        "patches",  # make_loader over a PatchDataset: chunkio.patches.loading
        "read",
        "sampling",
        "transforms",
        "transport",
    },
    "patches": {"backends", "format", "read", "sampling", "transforms", "convert", *_CONVERT_PARTS},
    "convert.durability": {"backends", "format"},
    "convert.engine": {"backends", "convert", "convert.durability", "format", "sampling"},
    "convert.shuffle": {"backends", "convert", "convert.durability", "convert.engine", "format"},
    "convert.image": {"backends", "convert", *_CONVERT_PARTS, "format", "images"},
    "convert.volume": {"backends", "convert", "convert.durability", "convert.engine", "format"},
    "convert": {
        "backends",
        # convert_arrays of many files: described and remapped as ChunkDataset of them reads them
        "collection",
        "format",
        "images",
        "read",
        "sampling",
        *_CONVERT_PARTS,
        "convert.image",
        "convert.volume",
    },
    "__main__": {"diagnose"},
}
_ANYTHING = {"chunkio", "diagnose"}
#: the read path: what a training process imports to read batches
_READ_PATH = ["chunkio.dataset", "chunkio.loader", "chunkio.patches.dataset"]


def _unit(module: str) -> str:
    """The layer of ``module``: ``chunkio.format.grid`` -> ``format``,
    ``chunkio.backends.zarr.engine`` -> ``backends.zarr``, ``chunkio`` -> ``chunkio``."""
    parts = module.split(".")[1:]
    if not parts:
        return "chunkio"
    if len(parts) > 1 and parts[1] in _SUBLAYERS.get(parts[0], ()):
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        unit = _unit(module)
        if unit in _ANYTHING:
            continue
        allowed = LAYERS.get(unit)
        if allowed is None:
            out.append(f"{module}: its layer {unit!r} is not declared in LAYERS")
            continue
        for target in sorted(targets):
            there = _unit(target)
            if there != unit and there not in allowed | _FOUNDATION:
                out.append(f"{module} imports {target} ({unit} may not import {there})")
    return out


def test_the_layer_check_catches_a_violation() -> None:
    graph = {
        "chunkio.format.layout": {"chunkio.backends.zarr.backend", "chunkio.util.numeric"},
        "chunkio.read.core": {"chunkio.convert.arrays"},
        "chunkio.sampling.order": {"chunkio.sampling.label_metrics", "chunkio.errors"},
        "chunkio.newthing": set(),
    }
    assert _layer_violations(graph) == [
        "chunkio.format.layout imports chunkio.backends.zarr.backend (format may not import "
        "backends.zarr)",
        "chunkio.newthing: its layer 'newthing' is not declared in LAYERS",
        "chunkio.read.core imports chunkio.convert.arrays (read may not import convert)",
    ]


def test_each_package_imports_only_its_layers() -> None:
    assert _layer_violations(_graph()) == []


def _reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return seen


def test_the_read_path_does_not_import_the_converter_or_diagnostics() -> None:
    """Whatever a training process imports to read batches (function bodies included) stays
    clear of ``chunkio.convert`` and ``chunkio.diagnose``: ``label_check`` once pulled in the
    converter through ``doctor_chunking`` to build one message."""
    graph = _graph()
    reached = _reachable(graph, _READ_PATH)
    assert not {m for m in reached if m.startswith(("chunkio.convert", "chunkio.diagnose"))}


def test_the_reach_check_follows_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert _reachable(graph, ["a"]) == {"a", "b", "c"}


def test_convert_parts_import_no_entry_point() -> None:
    """Below the entry points (``images``, ``arrays``, ``volumes``, ``append``,
    ``pipeline``), convert's subpackages share only its vocabulary: options, progress, source."""
    shared = {"chunkio.convert", "chunkio.convert.options", "chunkio.convert.progress"}
    shared.add("chunkio.convert.source")
    graph = _graph()
    bad = {
        f"{m} -> {t}"
        for m, ts in graph.items()
        if _unit(m) in _SUBLAYERS_OF_CONVERT
        for t in ts
        if _unit(t) == "convert" and t not in shared
    }
    assert bad == set()


_SUBLAYERS_OF_CONVERT = {f"convert.{s}" for s in _SUBLAYERS["convert"]}


# --------------------------------------------------------------------------------------------
# Size and shape: a newcomer finds things by concept
# --------------------------------------------------------------------------------------------

#: The top level holds the public entry points and the error tree. ``loader_options`` is the
#: options half of ``make_loader`` (its keyword arguments validated once; the option objects
#: the public API takes).
TOP_LEVEL = {"__init__", "__main__", "errors", "dataset", "loader", "loader_options"}
#: entry points that are packages of their own (a class made of the objects it holds)
TOP_LEVEL_PACKAGES = {"dataset", "loader"}
MAX_MODULES_PER_PACKAGE = 12
MAX_LINES = 500


def _packages(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("__init__.py"))


def _flat_bags(root: Path) -> dict[str, int]:
    """Packages holding more than the limit of modules directly."""
    counts = {
        str(p.relative_to(root.parent)): sum(1 for f in p.glob("*.py") if f.name != "__init__.py")
        for p in _packages(root)
    }
    return {p: n for p, n in counts.items() if n > MAX_MODULES_PER_PACKAGE}


def _long_modules(root: Path) -> dict[str, int]:
    lengths = {
        str(p.relative_to(root.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in root.rglob("*.py")
    }
    return {p: n for p, n in lengths.items() if n > MAX_LINES}


def test_top_level_holds_only_the_entry_points() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.name for p in PACKAGE.iterdir() if p.name in TOP_LEVEL and p.is_dir()}
    assert packages == TOP_LEVEL_PACKAGES
    assert modules | packages == TOP_LEVEL


def test_no_package_is_a_flat_bag() -> None:
    assert _flat_bags(PACKAGE) == {}


def test_no_module_over_the_line_limit() -> None:
    assert _long_modules(PACKAGE) == {}


def test_the_shape_checks_catch_violations(tmp_path: Path) -> None:
    bag = tmp_path / "chunkio" / "bag"
    bag.mkdir(parents=True)
    (bag / "__init__.py").write_text('"""A bag."""\n', encoding="utf-8")
    for i in range(MAX_MODULES_PER_PACKAGE + 1):
        (bag / f"m{i}.py").write_text("x = 1\n" * (MAX_LINES + 1 if i == 0 else 1), "utf-8")
    assert _flat_bags(tmp_path / "chunkio") == {"chunkio/bag": MAX_MODULES_PER_PACKAGE + 1}
    assert _long_modules(tmp_path / "chunkio") == {"chunkio/bag/m0.py": MAX_LINES + 1}


@pytest.mark.parametrize(
    "package",
    [p for p in _packages(PACKAGE) if p != PACKAGE],  # the root: the public API, see the README
    ids=lambda p: str(p.relative_to(PACKAGE.parent)),
)
def test_each_package_says_what_lives_there_and_what_it_may_import(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"{package.name}/__init__.py has no docstring"
    assert "may import" in " ".join(doc.split()), (
        f"{package.name}/__init__.py does not say what it may import"
    )
