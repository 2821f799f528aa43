"""``make mutate``: mutmut over the modules that carry chunkio's core promises, module by module.

Each module in ``modules.toml`` is mutated with only the tests listed for it, in its own work
folder (``build/mutation/<module>/``, kept between runs so mutmut reuses its results for
functions that did not change). Then the score: killed / (mutants - declared equivalent), where
``equivalent.txt`` declares each equivalent mutant with a one-line reason, and timeouts count as
killed (the mutant made the tests hang). Mutants with no covering test count as survivors. A
rerun tests the survivors again (with the tests added since) and reuses the other verdicts
while their function is unchanged; the wall time printed is the last run's.

    python tests/mutation/run.py [MODULE ...] [--children N] [--report-only] [--fresh]

Prints a table (mutants, killed, survived, equivalent, score, wall time) and the surviving
mutants that are neither killed nor declared; exits 1 when a module scores under ``TARGET``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORK = ROOT / "build" / "mutation"
TARGET = 0.90
#: copied into each work folder (mutmut copies chunkio/ and tests/ into its mutants/ folder)
COPIED = ("chunkio", "tests", "benchmarks", "converters")
#: mutmut's exit codes: failed tests, a timeout, or a test process the mutant crashed (SIGSEGV:
#: e.g. the ring's mapping dropped while a view still points into it)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11}
_EQUIVALENT_LINE = re.compile(r"^(?P<name>\S+__mutmut_\d+)\s+#\s*(?P<why>\S.*)$")


def modules() -> dict[str, list[str]]:
    """Module path -> the test files that cover it (``modules.toml``)."""
    data = tomllib.loads((HERE / "modules.toml").read_text())
    return {m["path"]: list(m["tests"]) for m in data["module"]}


def equivalent() -> dict[str, str]:
    """Declared equivalent mutants -> the reason (``equivalent.txt``; a line without a reason
    is an error: an equivalence nobody explained is a survivor)."""
    out = {}
    for n, line in enumerate((HERE / "equivalent.txt").read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _EQUIVALENT_LINE.match(line)
        if m is None:
            raise SystemExit(f"equivalent.txt:{n}: expected 'NAME  # reason'; got {line!r}")
        out[m["name"]] = m["why"]
    return out


def _slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def _pyproject(module: str, tests: list[str]) -> str:
    """The repository's pyproject.toml with [tool.mutmut] set for ``module``."""
    text = (ROOT / "pyproject.toml").read_text()
    text = text[: text.index("[tool.mutmut]")] if "[tool.mutmut]" in text else text
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"].get("mutmut", {})
    args = base.get("pytest_add_cli_args", [])
    return text + "\n".join(
        [
            "[tool.mutmut]",
            'source_paths = ["chunkio"]',
            # tests that build their inputs with the benchmarks' data helpers import them
            'also_copy = ["benchmarks"]',
            f"only_mutate = {json.dumps([module])}",
            f"pytest_add_cli_args = {json.dumps(args)}",
            f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
            'process_isolation = "forkserver"',
            "",
        ]
    )


def prepare(module: str, tests: list[str]) -> Path:
    work = WORK / _slug(module)
    work.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.rmtree(work / name, ignore_errors=True)
        shutil.copytree(
            ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    (work / "pyproject.toml").write_text(_pyproject(module, tests))
    return work


def recheck_survivors(work: Path, module: str) -> int:
    """Mark the mutants that survived the last run as unchecked, so that this run tries the
    tests added since (mutmut keeps a verdict until the mutated function changes). Killed
    ones stay killed; ``--fresh`` starts the module over."""
    meta = work / "mutants" / f"{module}.meta"
    if not meta.exists():
        return 0
    data = json.loads(meta.read_text())
    codes = data["exit_code_by_key"]
    again = [k for k, v in codes.items() if v not in KILLED]
    for k in again:
        codes[k] = None
    meta.write_text(json.dumps(data))
    return len(again)


def run_mutmut(work: Path, children: int) -> float:
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONDONTWRITEBYTECODE": "1"}
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    subprocess.run(
        [mutmut, "run", "--max-children", str(children)],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    return time.monotonic() - started


def results(work: Path, module: str) -> dict[str, int | None]:
    meta = work / "mutants" / f"{module}.meta"
    if not meta.exists():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return codes


def score(module: str, codes: dict[str, int | None], declared: dict[str, str]) -> dict:
    prefix = _slug(module) + "."
    mine = {k: v for k, v in codes.items() if k.startswith(prefix)}
    equiv = sorted(k for k in mine if k in declared)
    killed = sorted(k for k, v in mine.items() if v in KILLED and k not in declared)
    alive = sorted(k for k in mine if k not in declared and k not in killed)
    denominator = len(mine) - len(equiv)
    return {
        "mutants": len(mine),
        "killed": len(killed),
        "equivalent": len(equiv),
        "survived": alive,
        "no_tests": sum(1 for k in alive if mine[k] in (5, 33)),
        "score": len(killed) / denominator if denominator else 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module paths (default: all in modules.toml)")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once")
    parser.add_argument(
        "--report-only", action="store_true", help="score the last run, run nothing"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="forget earlier verdicts (test every mutant again)"
    )
    args = parser.parse_args(argv)
    table = modules()
    chosen = args.modules or list(table)
    unknown = [m for m in chosen if m not in table]
    if unknown:
        raise SystemExit(f"not in modules.toml: {unknown}; known: {sorted(table)}")
    declared = equivalent()
    rows = []
    for module in chosen:
        work = WORK / _slug(module)
        wall = None
        if not args.report_only:
            if args.fresh:
                shutil.rmtree(work, ignore_errors=True)
            work = prepare(module, table[module])
            recheck_survivors(work, module)
            wall = run_mutmut(work, args.children)
            (work / "wall_s").write_text(f"{wall:.0f}")
        elif (work / "wall_s").exists():
            wall = float((work / "wall_s").read_text())
        rows.append((module, score(module, results(work, module), declared), wall))
    print(f"\n{'module':34} {'mutants':>7} {'killed':>6} {'equiv':>5} {'alive':>5} "
          f"{'score':>6} {'wall':>7}")  # fmt: skip
    failed = False
    for module, s, wall in rows:
        if not s["mutants"]:
            print(f"{module:34} (not run)")
            failed = True
            continue
        failed |= s["score"] < TARGET
        shown = "-" if wall is None else f"{wall / 60:.1f} min"
        print(
            f"{module:34} {s['mutants']:>7} {s['killed']:>6} {s['equivalent']:>5} "
            f"{len(s['survived']):>5} {s['score']:>6.1%} {shown:>7}"
        )
    for module, s, _ in rows:
        if s.get("survived"):
            print(f"\n{module}: {len(s['survived'])} alive ({s['no_tests']} with no test); "
                  f"`mutmut show NAME` in {WORK / _slug(module)}")  # fmt: skip
            for name in s["survived"]:
                print(f"  {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
