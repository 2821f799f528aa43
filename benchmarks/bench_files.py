"""Many files as one dataset: cells/s, label mixing, files opened and ``make_loader`` time at
10-3,000 h5ad files, the file-aware order (:mod:`chunkio.sampling.file_order`) against the order
chunkio used before it, in one run.

Each file is what anndata writes for 500 cells x 200 genes (float32 CSR ``X``, 10% non-zero)
and a categorical ``obs/cell_type`` of 20 types whose codes differ per file (categories
shuffled per file); files are written once under ``--root`` and reused (the first ``n`` of
them make the ``n``-file dataset). Each row runs in a fresh process:
``ChunkDataset(paths, fields={"x": "X", "label": "obs/cell_type"})``, ``make_loader`` (timed),
batch 256, 2 ring workers (fork), then batches for ``--seconds`` after the first (several epochs
when the dataset is small): cells/s, the mean distinct labels per batch against a uniform
shuffle's (:func:`chunkio.sampling.label_metrics.label_mixing_of_batches`), the CPU time per
batch of the parent (from the first batch) and both workers (their whole life, start included)
together, less disturbed by a shared machine's load than the rate, and the files each
worker opens per epoch, modelled from the order (each worker's rows of every batch through an
LRU of the worker's open-file cap, as :class:`chunkio.collection.FileSetCore` keeps them).

Modes, switched privately in the child process: ``after`` is chunkio as it is;
``previous`` hands the workers no description of the files, so each worker opens each file
through h5py and looks at each array again (links, checks, chunk index: the open before
:mod:`chunkio.backends.hdf5.described`); ``before`` also switches the file-aware order off (no
file grouping and the pool sized by memory alone, the open-file cap at 32, the label check
reading every file's labels). ``make_loader`` is timed with its modules imported already
(importing them is the same at any file count). Outside the test suite (a script, not
collected); ``tests/read/test_many_files.py`` asserts the bounds without timing.

    python -m benchmarks.bench_files [--files 10 100 1000] [--seconds 20] [--root DIR]
        [--modes before previous after]
    python -m benchmarks.bench_files --describe 100 1000 3000   # ChunkDataset(paths) only:
        # every file described in one process (``here``) against chunkio's pool (``pool``),
        # alternately in one process, [--repeat 2] times each (the best kept),
        # [--processes N] to force the pool's size (default: the idle cores, as chunkio does)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["files_opened", "measure", "write_files"]

BATCH = 256
WORKERS = 2
CELLS, GENES, TYPES = 500, 200, 20
FIELDS = {"x": "X", "label": "obs/cell_type"}
MODES = ("before", "previous", "after")


def write_files(root: Path, n: int) -> list[Path]:
    """The first ``n`` files under ``root`` (written if missing; the same bytes every run)."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    root.mkdir(parents=True, exist_ok=True)
    types = [f"t{i}" for i in range(TYPES)]
    paths = [root / f"{k:05d}.h5ad" for k in range(n)]
    for k, path in enumerate(paths):
        if path.exists():
            continue
        rng = np.random.default_rng([0, k])
        x = sp.random(CELLS, GENES, density=0.1, format="csr", dtype=np.float32, random_state=rng)
        cats = list(types)
        rng.shuffle(cats)  # codes differ per file
        labels = pd.Categorical(rng.choice(types, CELLS), categories=cats)
        obs = pd.DataFrame({"cell_type": labels}, index=[f"c{k}_{i}" for i in range(CELLS)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anndata's index-conversion notes
            ad.AnnData(x, obs=obs).write_h5ad(path)
    return paths


def _previous() -> None:
    """Hand the workers no description of the files (this process and those it forks)."""
    from chunkio.backends import reader_documents
    from chunkio.collection import files

    files._documents = lambda reader, layout: reader_documents(reader)  # type: ignore[assignment]


def _before() -> None:
    """Switch the file-aware parts off in this process (and the workers it forks)."""
    from chunkio.collection import core, files
    from chunkio.sampling import label_check

    _previous()

    files.FileSet.chunks_per_file = lambda self: None  # type: ignore[assignment,method-assign,return-value]
    core.MAX_OPEN_CEILING = 0  # the cap stays MAX_OPEN_FILES
    label_check._check_files = lambda source, _, sampler: label_check._check_whole(  # type: ignore[assignment]
        source, sampler, None
    )


def files_opened(sampler: Any, starts: Any, max_open: int, readers: int) -> float:
    """Files each of ``readers`` workers opens in one epoch of ``sampler`` (mean), keeping
    ``max_open`` open, least recently used closed first."""
    opened = np.zeros(readers, np.int64)
    lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(readers)]
    for batch in sampler.iter_batches(0):
        for r, (lo, hi) in enumerate(sampler.reader_rows(batch.size, readers)):
            for f in np.unique(np.searchsorted(starts, batch[lo:hi], side="right") - 1).tolist():
                if f in lru[r]:
                    lru[r].move_to_end(f)
                    continue
                opened[r] += 1
                lru[r][f] = None
                if len(lru[r]) > max_open:
                    lru[r].popitem(last=False)
    return float(opened.mean())


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One row, in this process."""
    if spec["mode"] == "before":
        _before()
    elif spec["mode"] == "previous":
        _previous()
    import chunkio
    from chunkio.sampling.label_metrics import label_mixing_of_batches

    paths = write_files(Path(spec["root"]), spec["files"])
    make_loader, workers = chunkio.make_loader, chunkio.Workers  # imported: not timed
    t0 = time.perf_counter()
    dataset = chunkio.ChunkDataset(paths, fields=FIELDS)
    t1 = time.perf_counter()
    loader = make_loader(dataset, BATCH, num_workers=WORKERS, workers=workers(context="fork"))
    t2 = time.perf_counter()
    cells, labels, start, epoch, batches = 0, [], 0.0, 0, 0
    while not start or time.perf_counter() - start < spec["seconds"]:
        loader.set_epoch(epoch)
        for batch in loader:
            if not start:  # from the first batch: worker start-up is not the rate
                start, cpu = time.perf_counter(), os.times()
                continue
            batches += 1
            y = batch["label"] if isinstance(batch, dict) else batch[list(FIELDS).index("label")]
            cells += int(y.shape[0])
            labels.append(np.asarray(y).astype(np.int64) + 1)  # missing (-1) as class 0
            if time.perf_counter() - start >= spec["seconds"]:
                break
        epoch += 1
    rate = cells / (time.perf_counter() - start)
    mine = os.times()
    loader.close()  # the workers' CPU is known once they are joined
    theirs = os.times()
    parent = mine.user + mine.system - cpu.user - cpu.system
    children = theirs.children_user + theirs.children_system
    children -= cpu.children_user + cpu.children_system
    used = parent + children
    counts = np.bincount(dataset.labels() + 1)
    mixing = label_mixing_of_batches(labels, counts)
    handle = loader.dataset._open_handle()
    opened = files_opened(loader.sampler, dataset._files.starts, handle.max_open, WORKERS)
    return {
        **spec,
        "describe_s": t1 - t0,
        "make_loader_s": t2 - t1,
        "cells_per_s": rate,
        "cpu_ms_per_batch": 1e3 * used / max(1, batches),
        "parent_cpu_ms_per_batch": 1e3 * parent / max(1, batches),
        "distinct_ratio": mixing["distinct_labels_ratio"],
        "pool": loader.sampler.pool,
        "max_open": handle.max_open,
        "files_opened_per_worker_epoch": opened,
    }


def describe_time(spec: dict[str, Any]) -> dict[str, Any]:
    """``ChunkDataset(paths)`` timed in this process, alternately ``here`` (every file
    described in this process) and ``pool`` (as chunkio does: forked processes, one per core,
    when the rest would take over a second), ``repeat`` times each, after a warm-up (the
    backends' imports and first looks, the same at any file count)."""
    import chunkio
    from chunkio.collection import describe

    paths = write_files(Path(spec["root"]), spec["files"])
    chunkio.ChunkDataset(paths[:2], fields=FIELDS)
    chosen = spec.get("processes")
    cores = describe.describe_processes if chosen is None else (lambda: int(chosen))
    times: dict[str, list[float]] = {"here": [], "pool": [], "here_cpu": [], "pool_cpu": []}
    for _ in range(spec["repeat"]):
        for mode in ("here", "pool"):
            describe.describe_processes = (lambda: 0) if mode == "here" else cores  # type: ignore[assignment]
            t0, c0 = time.perf_counter(), os.times()
            chunkio.ChunkDataset(paths, fields=FIELDS)
            times[mode].append(time.perf_counter() - t0)
            c1 = os.times()  # the pool's processes are joined: their CPU is counted
            used = c1.user + c1.system + c1.children_user + c1.children_system
            times[f"{mode}_cpu"].append(
                used - (c0.user + c0.system + c0.children_user + c0.children_system)
            )
    describe.describe_processes = cores  # type: ignore[assignment]
    found = {f"{k}_s": v for k, v in times.items()}
    return {**spec, **found, "processes": cores()}


def run_describe(
    files: list[int], root: Path, repeat: int, processes: int | None
) -> list[dict[str, Any]]:
    """:func:`describe_time` of each count, each in a fresh process."""
    write_files(root, max(files))
    spec = {"root": str(root), "repeat": repeat, "describe": True, "processes": processes}
    return [_child({**spec, "files": n}) for n in files]


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_files", "--child", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{spec}: {done.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(row), file=sys.stderr)
    return row


def describe_table(rows: list[dict[str, Any]]) -> str:
    head = ("| files | here s | pool s | here / pool | CPU ms / file here "
            "| CPU ms / file pool (all processes) |")  # fmt: skip
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        here, pool, n = min(r["here_s"]), min(r["pool_s"]), r["files"]
        lines.append(
            f"| {n} | {here:.1f} | {pool:.1f} | {here / pool:.2f} | "
            f"{1e3 * min(r['here_cpu_s']) / n:.1f} | {1e3 * min(r['pool_cpu_s']) / n:.1f} |"
        )
    return "\n".join(lines)


def run(files: list[int], seconds: float, root: Path, modes: list[str]) -> list[dict[str, Any]]:
    write_files(root, max(files))
    rows = []
    for n in files:
        for mode in modes:
            spec = {"files": n, "mode": mode, "seconds": seconds, "root": str(root)}
            rows.append(_child(spec))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| files | mode | cells/s | x 10-file rate | CPU ms / batch "
            "| distinct vs uniform | pool | open cap | files opened / worker / epoch "
            "| make_loader s | describe s |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    base = {
        r["mode"]: r["cells_per_s"] for r in rows if r["files"] == min(x["files"] for x in rows)
    }
    for r in rows:
        lines.append(
            f"| {r['files']} | {r['mode']} | {r['cells_per_s']:,.0f} | "
            f"{r['cells_per_s'] / base[r['mode']]:.2f} | {r['cpu_ms_per_batch']:.2f} | "
            f"{r['distinct_ratio']:.3f} | "
            f"{r['pool']:,} | {r['max_open']} | {r['files_opened_per_worker_epoch']:,.0f} | "
            f"{r['make_loader_s']:.2f} | {r['describe_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--root", type=Path, default=Path("/tmp/chunkio-bench-files"))
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=MODES, help="see the module docstring"
    )
    parser.add_argument(
        "--describe",
        type=int,
        nargs="+",
        help="only time ChunkDataset(paths) at these file counts: here vs a pool (no loader)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="--describe: times each, best kept")
    parser.add_argument(
        "--processes", type=int, help="--describe: the pool's size (default: chunkio's choice)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(describe_time(spec) if spec.get("describe") else measure(spec)))
        return
    if args.describe:
        found = run_describe(args.describe, args.root, args.repeat, args.processes)
        if args.out:
            args.out.write_text(json.dumps(found, indent=1))
        print(describe_table(found))
        return
    rows = run(args.files, args.seconds, args.root, args.modes)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
