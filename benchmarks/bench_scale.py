"""Does the cost per sample, and the memory per process, stay flat as a dimension grows 100x?

One section per dimension (issue 36's four); each runs its measure at growing sizes, each size
in a fresh process (:mod:`benchmarks.scale_measures`), and reports wall and CPU time per sample,
the peak RSS of every process (the main one and the largest worker) and, per column, the fitted
growth exponent ``b`` of ``value ~ size^b`` (least squares on the logs: 0 is flat, 1 grows with
the size). The parent polls the peak RSS (``VmHWM``) and CPU time of the child and of each of
its descendants until it exits (:func:`polled`: workers started by a forkserver are not the
child's children, so ``RUSAGE_CHILDREN`` would miss them); the child reports its own peak
(and the windows measure its workers') too, and the larger is kept. Sections are plain functions
``section(sizes, root) -> rows`` in :data:`SECTIONS`, each row's first key its size.

``order`` (rows, default 1M-100M): the loader's epoch order as a training job meets it
(``ChunkBatchSampler``, batch 256, chunks of 1000-4000 rows, :mod:`benchmarks.bench_order`):
first batch and resume at 90% (ms: O(pool) work, flat), a pass per row (wall and CPU of the
main process), the order's own peak RSS above the process's RSS before the epoch, and the
process's peak RSS.

``files`` (h5ad files, default 10-1,000): :func:`benchmarks.bench_files.measure` as chunkio
reads them: 500 cells x 200 genes a file, 2 ring workers (fork), batch 256, ``--seconds`` of
batches after the first: wall per cell, CPU per cell of all processes (parent from the first
batch, both workers their whole life; CPU per batch / 256, so a short last batch of an epoch
counts as a full one) and the parent's alone, ``make_loader`` seconds, peak RSS of the main
process and of the largest worker. Files are written once under ``--files-root`` and reused.

``windows`` (steps, default 1k-100k): ERA5-like stores written by xarray
(:func:`benchmarks.bench_windows.era_store`: 3 variables of 32x64 float32, 24 steps per chunk;
100k steps is 2.46 GB decoded, past the default 1 GiB ``Workers(hold_bytes)``), windows
``t-1, t`` and target ``t+1``, batch 32, 2 workers: wall and CPU per sample of every process in
the first epoch (workers' start included) and in later ones (``--seconds``), peak RSS main and
largest worker, and the path chunkio logged (held, held in part, streamed). ``era_store``
makes a store whole in memory (float64 intermediates: several GB at 100k steps) before writing
it, once: later runs reuse it under ``--root``.

``convert`` (rows, default 1M-10M): ``convert_arrays`` of a Zarr v3 store (zarr-python,
written block by block, never whole in memory) of ``rows`` rows: ``x`` (rows, 4) float32 and
``y`` (rows,) int64 in chunks of 65,536 rows (24 bytes a row: 2.4 GB decoded at 100M), into
``out.zarr``, shuffled (the external two-pass shuffle) with 2 worker processes (a pool at every
size). ``peak_rss_worker_mb`` is the largest worker's.

The reduced run that asserts the memory bounds (not times) is ``tests/bench/test_bench_scale.py``;
``tests/convert/test_convert_memory.py`` asserts conversion's on a reduced source.

    python -m benchmarks.bench_scale [--sections order files windows convert]
        [--rows 1e6 1e7 1e8] [--files 10 100 1000 3000] [--steps 1000 10000 100000]
        [--root bench-data] [--files-root DIR] [--seconds 5] [--hold-bytes B]
        [--workers 2] [--no-shuffle] [--out results.json]

``--rows`` sizes ``order`` and ``convert``; each section has its defaults (:data:`SIZES`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_memory import peak_rss

__all__ = [
    "SECTIONS",
    "SIZES",
    "convert_section",
    "files_section",
    "fitted_exponent",
    "make_store",
    "order_section",
    "polled",
    "run",
    "windows_section",
]

REPO = Path(__file__).resolve().parents[1]
#: rows per source chunk, and per slice generated and written at a time
SOURCE_CHUNK = 65536
_SLICE = 16 * SOURCE_CHUNK
#: the windows stores' variables' (lat, lon) shape and steps per chunk
WINDOWS_SHAPE, WINDOWS_PER_CHUNK = (32, 64), 24
MB = 2**20


def make_store(root: Path, rows: int) -> Path:
    """The source store of ``rows`` rows (reused when present), written a slice at a time."""
    import zarr

    path = root / f"scale-{rows}.zarr"
    if (path / "done").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    x = group.create_array("x", shape=(rows, 4), dtype="f4", chunks=(SOURCE_CHUNK, 4))
    y = group.create_array("y", shape=(rows,), dtype="i8", chunks=(SOURCE_CHUNK,))
    rng = np.random.default_rng(0)
    for start in range(0, rows, _SLICE):
        stop = min(rows, start + _SLICE)
        x[start:stop] = rng.standard_normal((stop - start, 4), dtype=np.float32)
        y[start:stop] = np.arange(start, stop, dtype=np.int64) * 10 // rows  # sorted labels
    (path / "done").write_text("")
    return path


def _kill(procs: Sequence[Any]) -> None:
    """Kill the processes ``procs`` (a child and its descendants this module started)."""
    import psutil

    for p in procs:
        with suppress(psutil.Error):
            p.kill()


def polled(
    cmd: Sequence[str], *, interval: float = 0.05, timeout: float | None = None
) -> dict[str, Any]:
    """Run ``cmd`` (a child printing one JSON object as its last line) and poll, until it
    exits, the peak RSS (``VmHWM``) and CPU time of it and of each of its descendants.

    Returns the child's object with ``peak_rss_main`` (the child's peak: the larger of the
    polled one and its ``self_peak_rss``), ``peak_rss_worker`` (the largest descendant's, or its
    ``workers_peak_rss``) and ``cpu_s`` (every process's CPU time as last polled). The child's
    output goes to files, not pipes, so a talkative child cannot fill a pipe and stall. Past
    ``timeout`` seconds, or when this process is interrupted, the child and its descendants are
    killed (``RuntimeError`` for the timeout).
    """
    import psutil

    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # its own process group: whatever it starts (workers, a forkserver and its children)
        # is killed with it, even a process started after the last poll or left by a child
        # that died (an OOM kill)
        child = subprocess.Popen(
            list(cmd), stdout=out, stderr=err, text=True, cwd=REPO, start_new_session=True
        )
        main = psutil.Process(child.pid)
        start, procs = time.monotonic(), [main]
        try:
            while child.poll() is None:
                if timeout is not None and time.monotonic() - start > timeout:
                    raise RuntimeError(f"{cmd[-2:]} still running after {timeout} s: killed")
                try:
                    procs = [main, *main.children(recursive=True)]
                except psutil.Error:
                    break
                for p in procs:
                    try:
                        times = p.cpu_times()
                    except psutil.Error:
                        continue
                    cpu[p.pid] = times.user + times.system
                    peaks[p.pid] = max(peaks.get(p.pid, 0), peak_rss(p.pid) or 0)
                time.sleep(interval)
        finally:
            if child.poll() is None:
                _kill(procs[1:] + procs[:1])  # the workers first: none outlives the child
            child.wait()
            with suppress(ProcessLookupError):  # the group is empty: nothing left behind
                os.killpg(child.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode or not stdout.strip():
        raise RuntimeError(f"{cmd[-2:]} failed ({child.returncode}): {stderr[-3000:]}")
    got: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    others = [v for pid, v in peaks.items() if pid != child.pid]
    got["peak_rss_main"] = max(peaks.get(child.pid, 0), got.pop("self_peak_rss", 0))
    got["peak_rss_worker"] = max(max(others, default=0), got.pop("workers_peak_rss", 0))
    got["cpu_s"] = sum(cpu.values())
    got["stderr"] = stderr
    return got


#: seconds one size may run before its process is killed (``None``: no limit)
TIMEOUT: float | None = None


def _measure(section: str, spec: dict[str, Any]) -> dict[str, Any]:
    """:mod:`benchmarks.scale_measures`' ``section`` of ``spec`` in a fresh, polled process."""
    cmd = [sys.executable, "-m", "benchmarks.scale_measures", section, json.dumps(spec)]
    return polled(cmd, timeout=TIMEOUT)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def convert_section(
    sizes: Sequence[int], root: Path, *, shuffle: bool = True, workers: int = 2
) -> list[dict[str, Any]]:
    """``convert_arrays`` at each row count in ``sizes`` (see the module docstring)."""
    out = []
    dst = root / "scale" / "out.zarr"
    for rows in sizes:
        src = make_store(root / "scale", rows)
        shutil.rmtree(dst, ignore_errors=True)
        spec = {"src": str(src), "dst": str(dst), "shuffle": shuffle, "workers": workers}
        try:
            got = _measure("convert", spec)
        finally:
            shutil.rmtree(dst, ignore_errors=True)
        row = {
            "rows": rows,
            "wall_s": got["wall_s"],
            "wall_us_per_row": got["wall_s"] / rows * 1e6,
            "cpu_us_per_row": got["cpu_s"] / rows * 1e6,
            "peak_rss_main_mb": got["peak_rss_main"] / MB,
            "peak_rss_worker_mb": got["peak_rss_worker"] / MB,
        }
        out.append(_shown(row))
    return out


def order_section(sizes: Sequence[int], root: Path, *, mode: str = "lazy") -> list[dict[str, Any]]:
    """The epoch's order at each row count in ``sizes`` (``root`` unused: nothing is written);
    ``mode="eager"``: the whole epoch built at once, as chunkio did before."""
    out = []
    for rows in sizes:
        got = _measure("order", {"rows": rows, "mode": mode})
        row = {
            "rows": rows,
            "first_ms": got["first_s"] * 1e3,
            "first_cpu_ms": got["first_cpu_s"] * 1e3,
            "pass_ns_per_row": got["pass_s"] / rows * 1e9,
            "pass_cpu_ns_per_row": got["pass_cpu_s"] / rows * 1e9,
            "resume_ms": got["resume_s"] * 1e3,
            "order_rss_mb": got["order_rss"] / MB,
            "peak_rss_main_mb": got["peak_rss_main"] / MB,
        }
        out.append(_shown(row))
    return out


def files_section(
    sizes: Sequence[int], root: Path, *, seconds: float = 5.0, files_root: Path | None = None
) -> list[dict[str, Any]]:
    """Many h5ad files at each file count in ``sizes``, written once under ``files_root``
    (default ``root/files``) and reused."""
    from benchmarks import bench_files

    where = root / "files" if files_root is None else files_root
    bench_files.write_files(where, max(sizes))
    out = []
    for n in sizes:
        got = _measure("files", {"files": n, "seconds": seconds, "root": str(where)})
        row = {
            "files": n,
            "wall_us_per_cell": 1e6 / got["cells_per_s"],
            "cpu_us_per_cell": 1e3 * got["cpu_ms_per_batch"] / bench_files.BATCH,
            "parent_cpu_us_per_cell": 1e3 * got["parent_cpu_ms_per_batch"] / bench_files.BATCH,
            "make_loader_s": got["make_loader_s"],
            "distinct_vs_uniform": got["distinct_ratio"],
            "peak_rss_main_mb": got["peak_rss_main"] / MB,
            "peak_rss_worker_mb": got["peak_rss_worker"] / MB,
        }
        out.append(_shown(row))
    return out


@contextmanager
def _windows_shape() -> Iterator[Any]:
    """:mod:`benchmarks.bench_windows` with :data:`WINDOWS_SHAPE` fields, restored after."""
    from benchmarks import bench_windows

    kept = bench_windows.SHAPE
    bench_windows.set_shape(*WINDOWS_SHAPE)
    try:
        yield bench_windows
    finally:
        bench_windows.set_shape(*kept)


def windows_section(
    sizes: Sequence[int],
    root: Path,
    *,
    seconds: float = 5.0,
    hold_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """Windows from a store of each step count in ``sizes`` (written once under
    ``root/windows`` and reused), ``Workers(hold_bytes)`` (the default when ``None``)."""
    out = []
    for steps in sizes:
        with _windows_shape() as bench_windows:
            path = bench_windows.era_store(root / "windows", steps, WINDOWS_PER_CHUNK)
        spec = {"path": str(path), "seconds": seconds, "hold_bytes": hold_bytes}
        got = _measure("windows", spec)
        row = {
            "steps": steps,
            "path": got["path"],
            "first_us_per_sample": 1e6 / got["first_per_s"],
            "first_cpu_us_per_sample": 1e6 / got["first_per_cpu_s"],
            "wall_us_per_sample": 1e6 / got["per_s"],
            "cpu_us_per_sample": 1e6 / got["per_cpu_s"],
            "held_mb": got["held_bytes"] / MB,
            "peak_rss_main_mb": got["peak_rss_main"] / MB,
            "peak_rss_worker_mb": got["peak_rss_worker"] / MB,
        }
        out.append(_shown(row))
    return out


#: section name -> measure(sizes, root) -> one row per size
SECTIONS: dict[str, Callable[[Sequence[int], Path], list[dict[str, Any]]]] = {
    "order": order_section,
    "files": files_section,
    "windows": windows_section,
    "convert": convert_section,
}
#: each section's sizes when none are given (issue 36 grows each 100x: pass the larger ones)
SIZES: dict[str, tuple[int, ...]] = {
    "order": (10**6, 10**7, 10**8),
    "files": (10, 100, 1000),
    "windows": (1000, 10000, 100000),
    "convert": (10**6, 10**7),
}


def fitted_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """``b`` of the least-squares fit ``log value = a + b log size``.

    >>> round(fitted_exponent([1e6, 1e7, 1e8], [2.0, 20.0, 200.0]), 3)
    1.0
    >>> round(fitted_exponent([1e6, 1e8], [5.0, 5.0]), 3)
    0.0
    """
    xs = np.log(np.asarray(sizes, dtype=np.float64))
    ys = np.log(np.maximum(np.asarray(values, dtype=np.float64), 1e-12))
    if len(xs) < 2 or math.isclose(float(np.ptp(xs)), 0.0):
        return float("nan")
    return float(np.polyfit(xs, ys, 1)[0])


def _cell(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)


def _table(name: str, rows: list[dict[str, Any]]) -> str:
    """A section's rows as markdown, the first column its size, the last line the fitted
    exponent of each numeric column."""
    if not rows:
        return f"## {name}\n\nno sizes"
    size, *cols = list(rows[0])
    lines = [f"## {name}", "", f"| {size} | " + " | ".join(cols) + " |"]
    lines.append("|" + "---|" * (len(cols) + 1))
    for r in rows:
        lines.append(f"| {r[size]:.0e} | " + " | ".join(_cell(r[c]) for c in cols) + " |")
    sizes = [r[size] for r in rows]
    fits = [
        f"{fitted_exponent(sizes, [r[c] for r in rows]):.2f}"
        if all(isinstance(r[c], (int, float)) for r in rows)
        else ""
        for c in cols
    ]
    lines.append("| exponent | " + " | ".join(fits) + " |")
    return "\n".join(lines)


def run(
    sections: Sequence[str] = tuple(SECTIONS),
    sizes: Mapping[str, Sequence[int]] | None = None,
    *,
    root: str | Path = "bench-data",
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Every section of ``sections`` at its sizes (``sizes[name]``, else :data:`SIZES`), with
    its keyword ``options[name]``; prints each table with the exponents."""
    results = {}
    for name in sections:
        measure = functools.partial(SECTIONS[name], **(options or {}).get(name, {}))
        results[name] = measure((sizes or {}).get(name, SIZES[name]), Path(root))
        print(_table(name, results[name]), flush=True)
    return results


def _counts(text: str) -> int:
    """A size on the command line: ``1e8`` and ``100000000`` alike."""
    return int(float(text))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument("--rows", nargs="+", type=_counts, help="order's and convert's rows")
    parser.add_argument("--files", nargs="+", type=_counts, help="files' counts of h5ad files")
    parser.add_argument("--steps", nargs="+", type=_counts, help="windows' store steps")
    parser.add_argument("--root", default="bench-data")
    parser.add_argument("--files-root", type=Path, help="files: where the h5ad files live")
    parser.add_argument("--seconds", type=float, default=5.0, help="files, windows: timed s")
    parser.add_argument("--hold-bytes", type=_counts, help="windows: Workers(hold_bytes)")
    parser.add_argument("--workers", type=int, default=2, help="convert: worker processes")
    parser.add_argument("--no-shuffle", action="store_true", help="convert: no shuffle")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    given = {"order": args.rows, "convert": args.rows, "files": args.files, "windows": args.steps}
    options = {
        "files": {"seconds": args.seconds, "files_root": args.files_root},
        "windows": {"seconds": args.seconds, "hold_bytes": args.hold_bytes},
        "convert": {"shuffle": not args.no_shuffle, "workers": args.workers},
    }
    sizes = {k: v for k, v in given.items() if v}
    results = run(args.sections, sizes, root=args.root, options=options)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
