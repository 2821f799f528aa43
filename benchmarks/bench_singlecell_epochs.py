"""First epochs and later epochs, beyond memory: chunkio against annbatch run as its README says.

Part of ``bench_singlecell`` (same synthetic sorted h5ad, batch 256, dense batches with their
cell types). Each configuration iterates whole epochs in its own process and reports the first
epoch (from the first ``iter()``: worker start-up, annbatch's first preload) apart from the
later ones: cells/s (wall), cells per CPU-second (the process and all its children: workers,
zarr's and zarrs' threads) and distinct cell types per batch against a uniform shuffle.

- annbatch as its README runs it (``annbatch_singlecell.py``): the ``zarrs``
  codec pipeline, the pre-shuffled collection ``DatasetCollection.add_adatas`` writes,
  ``Loader(chunk_size=32, preload_nchunks=256)`` on it; threads, no workers;
- chunkio ``make_loader`` on the h5ad in place and on its native converted copy
  (``convert_arrays``: the write-time shuffle, the counterpart of annbatch's pre-shuffled
  collection), each by default (later epochs served from the held decoded copy when it fits
  ``Workers(hold_bytes)``) and **beyond memory** (``Workers(hold_bytes=0)``: no held copy, so
  every epoch decodes every chunk, as for data larger than the hold budget).

The configurations alternate within each round (the machine is shared: compare ratios within
a round). ``--baseline DIR`` (another chunkio checkout, e.g. the main branch's) runs its
beyond-memory configurations too, in the same rounds: a change measured before and after in
one run. Updates the "Beyond memory" section of ``benchmarks/results/singlecell.md`` and the
``epochs`` key of ``singlecell.json``.

    python -m benchmarks.bench_singlecell_epochs [--cells N] [--epochs E] [--rounds R]
                                                 [--workers W] [--baseline DIR]
                                                 [--target-only] [--root DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks import bench_singlecell as sc
from benchmarks.report import RESULTS, check, check_lines

#: annbatch's README: ``Loader(chunk_size=32, preload_nchunks=256, batch_size=...)``
ANNBATCH_RECOMMENDED = (32, 256)
HOLD_OFF = "beyond memory: Workers(hold_bytes=0)"
DEFAULT = "default (held decoded copy when it fits)"
SECTION = "## Beyond memory: first and later epochs"


def _labels(batch: Any) -> tuple[int, Any]:
    return sc._labels_of(batch)


def _cpu_by_process(proc: psutil.Process) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of ``proc`` and each of its descendants, by pid, with its role:
    ``main``, ``workers`` (the loader's processes) or ``helpers`` (multiprocessing's
    resource tracker)."""
    out = {}
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        role = (
            "main" if p.pid == proc.pid else "helpers" if "resource_tracker" in line else "workers"
        )
        out[p.pid] = (role, t.user + t.system)
    return out


def _split(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
           ) -> dict[str, float]:  # fmt: skip
    """CPU seconds between two :func:`_cpu_by_process` snapshots, summed by role."""
    out = {"main": 0.0, "workers": 0.0, "helpers": 0.0}
    for pid, (role, cpu) in after.items():
        out[role] += cpu - before.get(pid, (role, 0.0))[1]
    return out


def epochs(spec: dict[str, Any]) -> dict[str, Any]:
    """Whole epochs of one chunkio loader (``--child``): each epoch's cells, wall, CPU of the
    process tree (and its split: the main process, the workers, multiprocessing's helpers)
    and distinct types per batch."""
    import chunkio

    warnings.simplefilter("ignore")
    workers = chunkio.Workers(hold_bytes=spec["hold_bytes"]) if "hold_bytes" in spec else None
    w = spec["workers"]
    if spec["kind"] == "chunkio":
        loader = chunkio.make_loader(spec["path"], batch_size=sc.BATCH, fields=sc.FIELDS,
                                     shuffle=True, num_workers=w, workers=workers)  # fmt: skip
    else:
        loader = chunkio.make_loader(spec["converted"], batch_size=sc.BATCH, shuffle=True,
                                     num_workers=w, workers=workers)  # fmt: skip
    proc, out = psutil.Process(), []
    for _ in range(spec["epochs"]):
        cells, distinct = 0, []
        start, cpu = time.perf_counter(), _cpu_by_process(proc)
        for batch in loader:
            n, labels = _labels(batch)
            cells += n
            distinct.append(len(np.unique(labels)))
        split = _split(cpu, _cpu_by_process(proc))
        out.append({"cells": cells, "elapsed_s": time.perf_counter() - start,
                    "cpu_s": sum(split.values()), "cpu_split": split,
                    "distinct_per_batch": float(np.mean(distinct))})  # fmt: skip
    close = getattr(loader, "close", None)
    if callable(close):
        close()
    return {"epochs": out}


def _summary(r: dict[str, Any], uniform: float) -> dict[str, Any]:
    """First epoch and later epochs (summed) of one run: cells/s, cells/CPU-s, mixing."""
    if "error" in r:
        return {"error": r["error"]}
    out: dict[str, Any] = {"peak_rss_mib": r["peak_rss_mib"], "peak_pss_mib": r["peak_pss_mib"]}
    for key, part in (("first", r["epochs"][:1]), ("later", r["epochs"][1:])):
        if not part:
            continue
        cells = sum(e["cells"] for e in part)
        wall, cpu = sum(e["elapsed_s"] for e in part), sum(e["cpu_s"] for e in part)
        distinct = float(np.mean([e["distinct_per_batch"] for e in part]))
        out[key] = {"cells_per_s": cells / wall, "cells_per_cpu_s": cells / cpu if cpu else None,
                    "distinct_ratio": distinct / uniform, "cells": cells, "cpu_s": cpu}  # fmt: skip
        if all("cpu_split" in e for e in part):
            out[key]["cpu_split"] = {k: sum(e["cpu_split"][k] for e in part)
                                     for k in part[0]["cpu_split"]}  # fmt: skip
    return out


def _annbatch(python: Path, path: Path, store: Path, n_epochs: int) -> dict[str, Any]:
    chunk, preload = ANNBATCH_RECOMMENDED
    cmd = [str(python), str(sc.HERE / "annbatch_singlecell.py"), str(path), str(store),
           str(sc.BATCH), "0", str(chunk), str(preload), "--epochs", str(n_epochs)]  # fmt: skip
    return sc.run_child(cmd, 900)


def _child(spec: dict[str, Any], tree: Path | None) -> list[str]:
    """The command that runs ``spec`` with this checkout's chunkio, or with ``tree``'s (its
    ``chunkio`` and ``benchmarks`` first on the path, whatever the working directory)."""
    if tree is None:
        return [sys.executable, "-m", "benchmarks.bench_singlecell_epochs", "--child",
                json.dumps(spec)]  # fmt: skip
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); "
            "from benchmarks.bench_singlecell_epochs import main; main()")  # fmt: skip
    return [sys.executable, "-c", code, "--child", json.dumps(spec)]


def _configs(workers: int, *, target_only: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """chunkio's rows, ``(loader, settings, spec)``: each by default and beyond memory, with
    ``workers`` and with 0; ``target_only``: the h5ad in place beyond memory with ``workers``.

    >>> [(name == sc.IN_PLACE, spec) for name, _, spec in _configs(2, target_only=True)]
    [(True, {'kind': 'chunkio', 'hold_bytes': 0, 'workers': 2})]
    """
    configs: list[tuple[str, str, dict[str, Any]]] = [
        (sc.IN_PLACE, DEFAULT, {"kind": "chunkio"}),
        (sc.CONVERTED, DEFAULT, {"kind": "chunkio-converted"}),
    ]
    for w in sorted({workers, 0}, reverse=True):  # and 0 workers: annbatch has none either
        for kind, name in (("chunkio", sc.IN_PLACE), ("chunkio-converted", sc.CONVERTED)):
            configs.append((name, HOLD_OFF, {"kind": kind, "hold_bytes": 0, "workers": w}))
    if target_only:
        return [c for c in configs if c[0] == sc.IN_PLACE and c[1] == HOLD_OFF
                and c[2]["workers"] == workers]  # fmt: skip
    return configs


def _tree_commit(tree: Path) -> str:
    git = ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"]
    try:
        return subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(*, root: str | Path | None = None, n_cells: int = 100_000, n_epochs: int = 3,
        rounds: int = 2, workers: int = sc.WORKERS, annbatch: bool = True,
        baseline: str | Path | None = None, target_only: bool = False
        ) -> dict[str, Any]:  # fmt: skip
    """Every configuration, ``rounds`` times in alternation, as one JSON-able dict
    (``baseline``: another checkout whose beyond-memory configurations run beside them;
    ``target_only``: annbatch and the h5ad in place beyond memory with ``workers`` workers
    alone, the issue's hardest target, so that more rounds fit in the same minutes)."""
    from chunkio.sampling.label_metrics import uniform_distinct_labels

    root = Path(root or "bench-data") / "singlecell"
    started = time.perf_counter()
    path = sc.synthetic_h5ad(root, n_cells)
    uniform = uniform_distinct_labels(sc.type_sizes(n_cells), sc.BATCH)
    dst = root / f"{path.stem}.chunkio-sparse.zarr"
    conversion = None if target_only else sc.converted(path, dst)  # no converted row then
    python, why = sc.annbatch_python() if annbatch else (None, "left out")
    store = root / f"{path.stem}.annbatch-collection.zarr"
    base = {"path": str(path), "converted": str(dst), "workers": workers, "epochs": n_epochs}
    configs = _configs(workers, target_only=target_only)
    tree = None if baseline is None else Path(baseline).resolve()
    runs: list[tuple[str, str, dict[str, Any], Path | None]] = [(*c, None) for c in configs]
    if tree is not None:  # beside each of this checkout's beyond-memory rows
        other = f"{HOLD_OFF}; baseline {tree} at {_tree_commit(tree)}"
        runs = [r for c in runs for r in ([c, (c[0], other, c[2], tree)] if c[1] == HOLD_OFF
                                          else [c])]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for k in range(rounds):
        if python is not None:
            r = _annbatch(python, path, store, n_epochs)
            chunk, preload = ANNBATCH_RECOMMENDED
            settings = (f"zarrs pipeline, pre-shuffled collection, chunk_size {chunk}, "
                        f"preload_nchunks {preload}, threads")  # fmt: skip
            extra = {x: r[x] for x in ("version", "collection_s") if x in r}
            row = {"loader": "annbatch Loader (README set-up)", "workers": 0,
                   "settings": settings, "round": k}  # fmt: skip
            rows.append(row | _summary(r, uniform) | extra)
        for name, settings, extra_spec, where in runs:
            r = sc.run_child(_child(base | extra_spec, where), 900)
            w = extra_spec.get("workers", workers)
            rows.append({"loader": name, "workers": w, "settings": settings, "round": k}
                        | _summary(r, uniform))  # fmt: skip
    if python is None:
        rows.append({"loader": "annbatch Loader (README set-up)", "workers": 0, "settings": "",
                     "round": 0, "error": f"skipped: {why}"})  # fmt: skip
    result = {
        "settings": {"cells": n_cells, "genes": sc.N_GENES, "batch": sc.BATCH,
                     "workers": workers, "epochs": n_epochs, "rounds": rounds,
                     "file": path.name, "chunkio_commit": sc._commit(),
                     "baseline": None if tree is None else str(tree),
                     "target_only": target_only,
                     "load_average": os.getloadavg()},
        "conversion": conversion, "uniform_distinct_per_batch": uniform, "rows": rows,
        "elapsed_s": time.perf_counter() - started,
    }  # fmt: skip
    result["checks"] = checks(rows)
    return result


def _ratios(rows: list[dict[str, Any]], name: str, workers: int, part: str,
            key: str, settings: str = HOLD_OFF) -> list[float]:  # fmt: skip
    """Per round: chunkio's row beyond memory over annbatch's, both measured in that round."""
    out = []
    for k in sorted({r["round"] for r in rows}):
        peer = [r for r in rows if r["round"] == k and r["loader"].startswith("annbatch")]
        ours = [r for r in rows if r["round"] == k and r["loader"] == name
                and r["settings"] == settings and r["workers"] == workers]  # fmt: skip
        if peer and ours and part in peer[0] and part in ours[0]:
            a, b = ours[0][part][key], peer[0][part][key]
            if a and b:
                out.append(a / b)
    return out


def checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's target: beyond the hold budget, >= 1.5x annbatch per CPU-second (the worst
    round), for every epoch (a first epoch and later ones are both beyond memory here)."""
    out = []
    workers = sorted({r["workers"] for r in rows if r.get("settings") == HOLD_OFF}, reverse=True)
    for w in workers:
        for name, where in ((sc.IN_PLACE, "in place"), (sc.CONVERTED, "converted")):
            for part in ("first", "later"):
                ratios = _ratios(rows, name, w, part, "cells_per_cpu_s")
                if ratios:
                    label = (f"single-cell beyond memory, chunkio {where}, {w} workers / "
                             f"annbatch (README set-up), {part} epoch(s), cells/CPU-s, "
                             f"worst round")  # fmt: skip
                    out.append(check(label, min(ratios), 1.5))
    return out


def ratio_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each beyond-memory row (and its baseline's) over annbatch per CPU-second, per round."""
    lines = ["| loader | workers | settings | first epoch / annbatch, cells/CPU-s, per round "
             "| median (range) | later epochs / annbatch | median (range) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    seen = []
    for r in rows:
        key = (r["loader"], r["workers"], r["settings"])
        if r["settings"].startswith(HOLD_OFF) and key not in seen:
            seen.append(key)
    for name, w, settings in seen:
        cells = []
        for part in ("first", "later"):
            ratios = _ratios(rows, name, w, part, "cells_per_cpu_s", settings)
            cells.append(", ".join(f"{x:.2f}" for x in ratios))
            cells.append(_spread(ratios))
        lines.append(f"| {name} | {w} | {settings} | {' | '.join(cells)} |")
    return lines


def _spread(values: list[float]) -> str:
    """``median (min-max)`` of per-round figures (empty for none).

    >>> _spread([1.5, 1.0, 1.25])
    '1.25 (1.00-1.50)'
    """
    if not values:
        return ""
    return f"{float(np.median(values)):.2f} ({min(values):.2f}-{max(values):.2f})"


def split_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each row's first-epoch CPU-seconds: in all, and (chunkio) by process role."""
    lines = ["| round | loader | workers | settings | first epoch CPU-s | main | workers "
             "| helpers (resource tracker) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        first = r.get("first")
        if not first or "cpu_s" not in first:
            continue
        split = first.get("cpu_split")
        parts = ["", "", ""] if split is None else [
            f"{split[k]:.2f}" for k in ("main", "workers", "helpers")]  # fmt: skip
        lines.append(f"| {r['round']} | {r['loader']} | {r['workers']} | {r['settings']} | "
                     f"{first['cpu_s']:.2f} | {' | '.join(parts)} |")  # fmt: skip
    return lines


def _cell(part: dict[str, Any] | None) -> list[str]:
    if not part:
        return ["", "", ""]
    per_cpu = part["cells_per_cpu_s"]
    return [f"{part['cells_per_s']:,.0f}", "" if per_cpu is None else f"{per_cpu:,.0f}",
            f"{part['distinct_ratio']:.2f}"]  # fmt: skip


def table(result: dict[str, Any]) -> str:
    s = result["settings"]
    load = ", ".join(f"{x:.1f}" for x in s["load_average"])
    lines = [
        SECTION,
        "",
        f"Sorted h5ad: {s['cells']:,} cells x {s['genes']:,} genes; batch {s['batch']}; "
        f"{s['epochs']} epochs per run, first epoch apart (from the first `iter()`: worker "
        f"start-up, annbatch's first preload); {s['rounds']} rounds, the configurations "
        f"alternating within each; load average at the end {load} (2 cores, shared); chunkio "
        f"at commit {s['chunkio_commit']}. Mixing: distinct cell types per batch / a uniform "
        f"shuffle's {result['uniform_distinct_per_batch']:.1f}. `hold_bytes=0` turns off the "
        f"held copy, not the mixing pool's cache of decoded chunks (`Ordering(pool_bytes)`, "
        f"64 MiB): data whose stored values and columns fit the pool (100,000 cells: about "
        f"61 MiB) still find their chunks there in later epochs, so the first epoch (every "
        f"chunk decoded once) is the figure for data beyond memory."
        + (
            " `--target-only`: annbatch and the h5ad in place beyond memory alone (no "
            "converted rows, their checks not run)."
            if s.get("target_only")
            else ""
        ),
        "",
        "| round | loader | workers | settings | first epoch cells/s | cells/CPU-s | mixing "
        "| later epochs cells/s | cells/CPU-s | mixing | peak PSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        head = f"| {r['round']} | {r['loader']} | {r['workers']} | {r['settings']} |"
        if "error" in r:
            lines.append(f"{head} not available: {r['error'][:160]} | | | | | | |")
            continue
        cells = [*_cell(r.get("first")), *_cell(r.get("later")), f"{r['peak_pss_mib']:,.0f}"]
        lines.append(f"{head} {' | '.join(cells)} |")
    ratios = ["", *ratio_lines(result["rows"]), "", *split_lines(result["rows"])]
    return "\n".join([*lines, *ratios, "", *check_lines(result["checks"])])


def write(result: dict[str, Any], out: Path = RESULTS) -> str:
    """Replace the section in ``singlecell.md`` (appended when absent) and the ``epochs`` key
    of ``singlecell.json``; the rest of both files stays as the full bench wrote it."""
    text = table(result)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "singlecell.md"
    old = md.read_text() if md.exists() else "# Single-cell loaders (`bench_singlecell`)\n"
    keep = old.split(SECTION)[0].rstrip("\n")
    md.write_text(f"{keep}\n\n{text}\n")
    js = out / "singlecell.json"
    data = json.loads(js.read_text()) if js.exists() else {}
    js.write_text(json.dumps(data | {"epochs": result}, indent=1) + "\n")
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cells", type=int, default=100_000, help="cells (default 100,000)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    p.add_argument("--workers", type=int, default=sc.WORKERS, help="chunkio's workers")
    p.add_argument("--baseline", help="another chunkio checkout to run beside this one")
    p.add_argument("--target-only", action="store_true",
                   help="annbatch and the h5ad in place, beyond memory, alone")  # fmt: skip
    p.add_argument("--root", default="bench-data", help="data folder (default bench-data)")
    p.add_argument("--out", default=str(RESULTS), help="results folder")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.target_only and Path(args.out).resolve() == RESULTS.resolve():
        p.error("--target-only needs --out DIR: its one row would replace the full results")
    if args.child:
        print(json.dumps(epochs(json.loads(args.child))))
        return
    result = run(root=args.root, n_cells=args.cells, n_epochs=args.epochs, rounds=args.rounds,
                 workers=args.workers, baseline=args.baseline,
                 target_only=args.target_only)  # fmt: skip
    print(write(result, Path(args.out)))


if __name__ == "__main__":
    main()
