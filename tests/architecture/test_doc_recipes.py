"""Every code block of README.md and docs/ runs as written (chunkio issue 39, item 3).

A page is a recipe: its ``python`` blocks run in order in one namespace (later blocks use
earlier names), its ``bash`` blocks as a terminal runs them (``bash -e``, the ``chunkio``
command on ``PATH``), in a fresh directory holding the small input files the page assumes
(:mod:`doc_inputs`). A block that cannot run here says so in the page, visibly, on the line
before its fence: ``<!-- not run: why -->``; the list is printed and kept short. Every fence
names its language: ``text`` for output and diagrams, which are not run. Pages whose recipes
are heavy (a model trained by worker processes; many ``chunkio`` commands, each an
interpreter importing the package) run under ``-m slow``; every block, run or not, is
compiled by the default suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from doc_inputs import prepare

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "support" / "doc_runner.py"
SHELLS = {"bash", "sh", "shell", "console"}
RUN = {"python", *SHELLS}
NOT_CODE = {"text"}
#: blocks marked ``not run`` in all of the docs: each one is a recipe nobody checks
MAX_NOT_RUN = 10
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    not_run: str | None


@dataclass(frozen=True)
class Recipe:
    """What a page needs (:data:`doc_inputs.INPUTS` names, ``s3``), the files its run must
    leave (proof that its blocks did their work), and whether it is heavy."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    slow: bool = False
    #: blocks (by index among the page's runnable ones) run twice: the page says a rerun works
    rerun: tuple[int, ...] = field(default=())


RECIPES: dict[str, Recipe] = {
    "README.md": Recipe(
        ("photos", "volumes"),
        (
            "train.zarr/zarr.json",
            "user.zarr/zarr.json",
            "small.h5",
            "photos.zarr/zarr.json",
            "photos-jpeg.zarr/zarr.json",
            "ct.zarr/zarr.json",
        ),
        rerun=(0,),
    ),
    "docs/getting-started.md": Recipe(outputs=("train.zarr/zarr.json",), rerun=(0,)),
    "docs/guides/conversion.md": Recipe(
        ("photos", "volumes"),
        ("photos.zarr/zarr.json", "photos.h5", "ct.zarr/zarr.json"),
        slow=True,
    ),
    "docs/guides/images-and-transforms.md": Recipe(("train_images",), ("train.zarr/zarr.json",)),
    "docs/guides/object-stores.md": Recipe(("s3",)),
    "docs/guides/single-cell.md": Recipe(("pbmc", "atlas"), ("atlas.zarr/zarr.json", "mine.h5")),
    "docs/guides/volumes.md": Recipe(("toy_nifti",), ("toy.zarr/zarr.json",), slow=True),
    "docs/guides/windows.md": Recipe(("era5",), ("stats.json",)),
    "docs/guides/your-own-files.md": Recipe(("user_h5", "era5", "s3")),
    "docs/reference/errors.md": Recipe(("user_h5_other_names",)),
    "docs/reference/options.md": Recipe(
        ("user_h5", "era5", "s3"), ("user.zarr/zarr.json",), slow=True
    ),
}


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, each with the ``not run`` reason on the line before."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{page}:{i + 1}: a fence that never closes"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        reason = NOT_RUN.match(before)
        code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        found.append(Block(page, i + 1, m.group(2), code, reason and reason.group(1)))
        i = end + 1
    return found


def shell_code(block: Block) -> str:
    """A ``console`` block's commands are its ``$ `` lines; other shell blocks are scripts."""
    if block.lang != "console":
        return block.code
    return "\n".join(ln[2:] for ln in block.code.splitlines() if ln.startswith("$ ")) + "\n"


ALL = [b for p in pages() for b in blocks(p)]


def test_every_fence_names_its_language_and_every_code_block_runs_or_says_why() -> None:
    untagged = [f"{b.page}:{b.line} ```{b.lang}" for b in ALL if b.lang not in RUN | NOT_CODE]
    assert not untagged, (
        f"fences must name their language ({sorted(RUN)} are run, {sorted(NOT_CODE)} is not "
        f"code): {untagged}"
    )
    marked = [f"{b.page}:{b.line} ({b.not_run})" for b in ALL if b.not_run and b.lang in RUN]
    print(f"{len(marked)} documented code blocks not run:", *marked, sep="\n  ")
    assert len(marked) <= MAX_NOT_RUN, f"too many blocks not run ({len(marked)}): {marked}"
    stray = [f"{b.page}:{b.line}" for b in ALL if b.not_run and b.lang not in RUN]
    assert not stray, f"a 'not run' mark before a block that is not code: {stray}"
    unknown = set(RECIPES) - {b.page for b in ALL if b.lang in RUN and not b.not_run}
    assert not unknown, f"recipes for pages that have no block to run: {sorted(unknown)}"


@pytest.mark.parametrize("page", sorted({b.page for b in ALL if b.lang in RUN}))
def test_every_block_compiles(page: str) -> None:
    """Run or not, a page's Python is valid Python and its shell lines valid bash."""
    mine = [b for b in ALL if b.page == page]
    for b in mine:
        if b.lang == "python":
            compile(b.code, f"{page}:{b.line}", "exec")
        elif b.lang in SHELLS:
            done = subprocess.run(
                ["bash", "-n", "-c", shell_code(b)], capture_output=True, text=True
            )
            assert done.returncode == 0, f"{page}:{b.line}: {done.stderr}"


def _plan(selected: list[str], tmp_path: Path, stack: contextlib.ExitStack) -> list[dict[str, Any]]:
    plan: list[dict[str, Any]] = []
    shared: dict[str, Any] = {}
    for page in selected:
        recipe = RECIPES.get(page, Recipe())
        work = tmp_path / page.replace("/", "_").removesuffix(".md")
        work.mkdir()
        env = prepare(work, recipe.inputs, stack, shared)
        run = [b for b in ALL if b.page == page and b.lang in RUN and not b.not_run]
        steps = []
        for k, b in enumerate(run):
            lang = "python" if b.lang == "python" else "shell"
            code = b.code if lang == "python" else shell_code(b)
            steps += [{"lang": lang, "code": code, "line": b.line}] * (
                2 if k in recipe.rerun else 1
            )
        plan.append({"page": page, "dir": str(work), "env": env, "blocks": steps})
    return plan


def _run_pages(selected: list[str], tmp_path: Path, *, timeout: float) -> None:
    with contextlib.ExitStack() as stack:
        plan = _plan(selected, tmp_path, stack)
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(tmp_path / "plan.json"), str(tmp_path / "out.json")],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((tmp_path / "out.json").read_text())
    failed = [f"{r['page']}:{r['line']}\n{r['error']}" for r in results if not r["ok"]]
    assert not failed, "documented recipes that fail as written:\n\n" + "\n\n".join(failed)
    missing = [
        f"{page}: {out}"
        for page in selected
        for out in RECIPES.get(page, Recipe()).outputs
        if not (tmp_path / page.replace("/", "_").removesuffix(".md") / out).exists()
    ]
    assert not missing, f"recipes that ran but left no result: {missing}"
    print(
        *(
            f"{r['page']}: {r['seconds']} s ({r['cpu']} s of CPU), by block {r['blocks']}"
            for r in results
        ),
        sep="\n",
    )


RUNNABLE = sorted({b.page for b in ALL if b.lang in RUN and not b.not_run})


@pytest.mark.timeout(300)
def test_documented_recipes_run_as_written(tmp_path: Path) -> None:
    _run_pages([p for p in RUNNABLE if not RECIPES.get(p, Recipe()).slow], tmp_path, timeout=280)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_heavy_documented_recipes_run_as_written(tmp_path: Path) -> None:
    """The heavy pages (:data:`RECIPES` ``slow=True``): ``pytest -m slow`` (``make soak``)."""
    _run_pages([p for p in RUNNABLE if RECIPES.get(p, Recipe()).slow], tmp_path, timeout=580)


def test_the_rules_catch_what_they_guard(tmp_path: Path) -> None:
    """The parser sees languages, marks and indented fences; the runner reports a failing
    Python or shell block by its line (a guard that cannot fail guards nothing)."""
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs a GPU -->\n```python\nx.cuda()\n```\n\n"
        "* a list\n\n  ```bash\n  false\n  ```\n```\nno language\n```\n"
    )
    found = blocks(page)
    assert [(b.lang, b.not_run, b.line) for b in found] == [
        ("python", "needs a GPU", 2),
        ("bash", None, 8),
        ("", None, 11),
    ]
    plan = [
        {"page": "p.md", "dir": str(tmp_path), "env": {}, "blocks": [step]}
        for step in (
            {"lang": "python", "code": "y = 1\nraise SystemExit(3)\n", "line": 5},
            {"lang": "shell", "code": found[1].code, "line": 8},
            {"lang": "shell", "code": "true\n", "line": 9},
        )
    ]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    run = [sys.executable, str(RUNNER), str(tmp_path / "plan.json"), str(tmp_path / "out.json")]
    subprocess.run(run, check=True, timeout=60)
    results = json.loads((tmp_path / "out.json").read_text())
    assert [(r["ok"], r["line"]) for r in results] == [(False, 5), (False, 8), (True, 9)]
    assert "SystemExit: 3" in results[0]["error"]
