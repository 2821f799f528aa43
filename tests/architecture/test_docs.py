"""The documentation keeps up with the code: every public name is in the API reference, every
module the README and docs name exists, every command-line option, error class and public
parameter is described. ``mkdocs build --strict`` (``make docs-check``) covers the rest:
links, anchors and API entries that name nothing."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import chunkio

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
API = DOCS / "reference" / "api"

#: ``::: chunkio.make_loader``: an mkdocstrings entry
_ENTRY = re.compile(r"^:::\s+(chunkio(?:\.\w+)*)\s*$", re.M)
#: ``chunkio/images/encoding.py``, ``tests/read/``: a path in the repository
_PATH = re.compile(
    r"(?<![\w./-])(?:chunkio|tests|benchmarks|converters)/(?:[\w-]+/)*[\w-]+(?:\.\w+)?/?"
)
#: ``chunkio.errors``, ``chunkio.convert.append_arrays``: a module or a name in one
_DOTTED = re.compile(r"(?<![\w./-])chunkio(?:\.[A-Za-z_]\w*)+")


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _entries() -> list[str]:
    return [m for page in sorted(API.glob("*.md")) for m in _ENTRY.findall(page.read_text())]


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _unresolved(names: set[str]) -> list[str]:
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    return missing


def test_every_public_name_is_in_the_api_reference() -> None:
    entries = _entries()
    assert entries, f"no ::: entries under {API}"
    documented = {id(_resolve(e)) for e in entries if not _unresolved({e})}
    missing = [
        name
        for name in chunkio.__all__
        if f"chunkio.{name}" not in entries and id(getattr(chunkio, name)) not in documented
    ]
    assert not missing, (
        f"names in chunkio.__all__ with no '::: chunkio.NAME' entry under {API}: {missing}"
    )


def test_the_api_check_sees_a_missing_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunkio, "__all__", [*chunkio.__all__, "_undocumented"])
    monkeypatch.setattr(chunkio, "_undocumented", object(), raising=False)
    with pytest.raises(AssertionError, match="_undocumented"):
        test_every_public_name_is_in_the_api_reference()


def test_modules_named_in_the_docs_exist() -> None:
    paths: dict[str, set[str]] = {}
    dotted: dict[str, set[str]] = {}
    for doc in _doc_files():
        text = doc.read_text()
        where = str(doc.relative_to(ROOT))
        for p in _PATH.findall(text):
            paths.setdefault(p, set()).add(where)
        for d in _DOTTED.findall(text):
            dotted.setdefault(d, set()).add(where)
    absent = {p: sorted(w) for p, w in paths.items() if not (ROOT / p).exists()}
    assert not absent, f"paths named in the docs that do not exist: {absent}"
    unresolved = {d: sorted(dotted[d]) for d in _unresolved(set(dotted))}
    assert not unresolved, f"chunkio names in the docs that do not exist: {unresolved}"


def test_the_module_check_catches_a_dead_name() -> None:
    text = "by (`chunkio/image_codecs.py`) and chunkio.image_codecs, in user.chunkio.zarr, tests/a/"
    assert _PATH.findall(text) == ["chunkio/image_codecs.py", "tests/a/"]
    assert _DOTTED.findall(text) == ["chunkio.image_codecs"]
    assert not (ROOT / "chunkio/image_codecs.py").exists()
    assert _unresolved({"chunkio.image_codecs", "chunkio.errors.ChunkioError"}) == [
        "chunkio.image_codecs"
    ]


def _cli_help(*words: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "chunkio", *words, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _subcommands(help_text: str) -> list[str]:
    """The subcommands a usage line ends with: ``chunkio convert [-h] {images,arrays} ...``."""
    found = re.search(r"\{([\w,-]+)\} \.\.\.", help_text)
    return found.group(1).split(",") if found else []


@pytest.mark.timeout(120)
def test_every_command_line_option_is_documented() -> None:
    page = (DOCS / "reference" / "cli.md").read_text()
    undocumented: dict[str, list[str]] = {}
    commands = [[c] for c in _subcommands(_cli_help())]
    while commands:
        words = commands.pop()
        text = _cli_help(*words)
        commands += [[*words, sub] for sub in _subcommands(text)]
        assert f"`{' '.join(words)}" in page or f"chunkio {' '.join(words)}" in page, words
        options = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text)) - {"--help"}
        missing = sorted(o for o in options if f"`{o}" not in page)
        if missing:
            undocumented[" ".join(words)] = missing
    assert not undocumented, f"options missing from docs/reference/cli.md: {undocumented}"


def test_every_error_class_is_documented() -> None:
    errors = importlib.import_module("chunkio.errors")
    page = (DOCS / "reference" / "errors.md").read_text()
    missing = [name for name in errors.__all__ if not re.search(rf"\b{name}\b", page)]
    assert not missing, f"errors missing from the tree in docs/reference/errors.md: {missing}"


def _parameter_gaps() -> dict[str, list[str]]:
    """Public functions and classes whose docstring has a Parameters section that leaves out
    some of their parameters, read as the API reference reads them (griffe, numpy style)."""
    griffe = pytest.importorskip("griffe")
    loader = griffe.GriffeLoader(docstring_parser=griffe.Parser.numpy, search_paths=[str(ROOT)])
    package = loader.load("chunkio")
    loader.resolve_aliases(implicit=False, external=False)
    gaps: dict[str, list[str]] = {}
    for name in chunkio.__all__:
        obj = package[name]
        obj = obj.final_target if obj.is_alias else obj
        if not (obj.is_function or obj.is_class):
            continue
        holders = [obj]
        if obj.is_class and "__init__" in obj.members:
            holders.append(obj.members["__init__"])
        sections = [
            section
            for holder in holders
            if holder.docstring is not None
            for section in holder.docstring.parse(griffe.Parser.numpy)
            if section.kind is griffe.DocstringSectionKind.parameters
        ]
        if not sections:
            continue  # described in prose (or a dataclass): nothing half-listed
        described = {p.name for section in sections for p in section.value}
        params = [p.name for p in obj.parameters if p.name not in ("self", "cls")]
        left_out = [p for p in params if p not in described and not p.startswith("_")]
        if left_out:
            gaps[f"chunkio.{name}"] = left_out
    return gaps


@pytest.mark.timeout(120)
def test_every_public_parameter_is_described() -> None:
    gaps = _parameter_gaps()
    assert not gaps, f"parameters missing from their docstring's Parameters section: {gaps}"


def _table_paths(cell: str) -> list[str]:
    """Paths of a 'where' cell of the where-things-live table, relative to ``chunkio/``: a
    name with a folder starts from ``chunkio/``, a bare name is in the folder of the one
    before it (``convert/images.py``, ``arrays.py``; ``images/`` (``jpeg.py``))."""
    out: list[str] = []
    folder = ""
    for token in re.findall(r"`([\w./-]+)`", cell):
        path = token if "/" in token else folder + token
        folder = path if path.endswith("/") else path.rpartition("/")[0] + "/" * ("/" in path)
        out.append(path)
    return out


def test_the_table_paths_follow_the_convention() -> None:
    cell = "`convert/images.py`, `arrays.py`; `patches/stitch.py`, `images/` (`jpeg.py`), `x.py`"
    assert _table_paths(cell) == [
        "convert/images.py",
        "convert/arrays.py",
        "patches/stitch.py",
        "images/",
        "images/jpeg.py",
        "images/x.py",
    ]


def test_where_things_live_names_modules_that_exist() -> None:
    page = (DOCS / "contributing.md").read_text()
    table = page[page.index("## Where things live") :]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ")]
    paths = [p for row in rows[1:] for p in _table_paths(row[2])]
    assert paths
    missing = [p for p in paths if not (ROOT / "chunkio" / p).exists()]
    assert not missing, f"docs/contributing.md, 'Where things live': no chunkio/{missing}"


def test_the_reference_renders_roles_and_grouped_parameters() -> None:
    """docs/_griffe/docstrings.py, the griffe extension the API reference loads with."""
    spec = importlib.util.spec_from_file_location("docstrings", DOCS / "_griffe" / "docstrings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (
        "See :class:`~chunkio.ChunkDataset`.\n\nParameters\n----------\nseed, shuffle\n    Both.\n"
    )
    obj = SimpleNamespace(docstring=SimpleNamespace(value=text))
    module.Docstrings().on_object(obj=obj, loader=None)
    assert obj.docstring.value.split("\n") == [
        "See ``ChunkDataset``.",
        "",
        "Parameters",
        "----------",
        "seed",
        "    Both.",
        "shuffle",
        "    Both.",
        "",
    ]
