"""Does the cost per sample, and the memory per process, stay flat as a dimension grows 100x?

One section per dimension; each runs its measure at growing sizes, each size in a fresh
process, and reports wall and CPU time per sample, the peak RSS of every process (the main
one and its workers) and, per column, the fitted growth exponent ``b`` of ``value ~ size^b``
(least squares on the logs: 0 is flat, 1 grows with the size). Sections are plain functions
``section(sizes, root) -> rows`` in :data:`SECTIONS`, so the others (the epoch's order, many
files, windows) slot in beside ``convert``.

``convert``: ``convert_arrays`` of a Zarr v3 store (zarr-python, written block by block, never
whole in memory) of ``rows`` rows: ``x`` (rows, 4) float32 and ``y`` (rows,) int64 in chunks
of 65,536 rows (24 bytes a row: 2.4 GB decoded at 100M), into ``out.zarr``, shuffled (the
external two-pass shuffle) with 2 worker processes (a pool at every size), in a child
process; the parent polls the peak RSS (``VmHWM``) and CPU time of that process and of each of
its descendants (workers started by the forkserver: not its children, so ``RUSAGE_CHILDREN``
would miss them). ``peak_rss_worker_mb`` is the largest worker's.
``tests/convert/test_convert_memory.py`` asserts the memory bound on a reduced source.

    python -m benchmarks.bench_scale [--sections convert] [--rows 1e6 1e7 1e8]
        [--root bench-data] [--workers 2] [--no-shuffle] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_memory import peak_rss

__all__ = ["SECTIONS", "convert_section", "fitted_exponent", "make_store", "run"]

#: rows per source chunk, and per slice generated and written at a time
SOURCE_CHUNK = 65536
_SLICE = 16 * SOURCE_CHUNK

_CHILD = """
import json, sys, time
from chunkio import Execution, convert_arrays
from chunkio.convert.engine import workers

workers.POOL_MIN_SECONDS = 0.0  # the pool at every size: the same processes at each
wall = time.perf_counter()
r = convert_arrays(sys.argv[1], sys.argv[2], fields={"x": "x", "y": "y"},
                   shuffle=sys.argv[3] == "1",
                   execution=Execution(workers=int(sys.argv[4]), progress=False))
print(json.dumps({"wall_s": time.perf_counter() - wall, "blocks": r.written_blocks}))
"""


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


def _peak_rss(pid: int) -> int:
    """The peak RSS of process ``pid`` so far (``VmHWM``), 0 once it is gone."""
    return peak_rss(pid) or 0


def _convert_once(src: Path, dst: Path, *, shuffle: bool, workers: int) -> dict[str, Any]:
    """One conversion in a child process; polls the peak RSS (``VmHWM``) and CPU time of it
    and of each of its descendants (workers, and the forkserver that starts them) until it
    exits."""
    import psutil

    shutil.rmtree(dst, ignore_errors=True)
    cmd = [sys.executable, "-c", _CHILD, str(src), str(dst), "1" if shuffle else "0", str(workers)]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    main = psutil.Process(child.pid)
    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}
    while child.poll() is None:
        try:
            procs = [main, *main.children(recursive=True)]
        except psutil.Error:
            break
        for p in procs:
            try:
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
            except psutil.Error:
                continue
            peaks[p.pid] = max(peaks.get(p.pid, 0), _peak_rss(p.pid))
        time.sleep(0.05)
    out, err = child.communicate()
    shutil.rmtree(dst, ignore_errors=True)
    if child.returncode:
        raise RuntimeError(f"conversion failed ({child.returncode}): {err[-2000:]}")
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    others = [v for pid, v in peaks.items() if pid != child.pid]
    got["peak_rss_main"] = peaks.get(child.pid, 0)
    got["peak_rss_worker"] = max(others, default=0)
    got["cpu_s"] = sum(cpu.values())
    return got


def convert_section(
    sizes: Sequence[int], root: Path, *, shuffle: bool = True, workers: int = 2
) -> list[dict[str, Any]]:
    """``convert_arrays`` at each row count in ``sizes`` (see the module docstring)."""
    out = []
    for rows in sizes:
        src = make_store(root / "scale", rows)
        got = _convert_once(src, root / "scale" / "out.zarr", shuffle=shuffle, workers=workers)
        cpu = got["cpu_s"]
        out.append(
            {
                "rows": rows,
                "wall_s": got["wall_s"],
                "wall_us_per_row": got["wall_s"] / rows * 1e6,
                "cpu_us_per_row": cpu / rows * 1e6,
                "peak_rss_main_mb": got["peak_rss_main"] / 2**20,
                "peak_rss_worker_mb": got["peak_rss_worker"] / 2**20,
            }
        )
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    return out


#: section name -> measure(sizes, root) -> one row per size
SECTIONS: dict[str, Callable[[Sequence[int], Path], list[dict[str, Any]]]] = {
    "convert": convert_section,
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


def _table(name: str, rows: list[dict[str, Any]]) -> str:
    cols = [k for k in rows[0] if k != "rows"]
    lines = [f"## {name}", "", "| rows | " + " | ".join(cols) + " |"]
    lines.append("|" + "---|" * (len(cols) + 1))
    for r in rows:
        lines.append(f"| {r['rows']:.0e} | " + " | ".join(f"{r[c]:.3g}" for c in cols) + " |")
    sizes = [r["rows"] for r in rows]
    fits = [f"{fitted_exponent(sizes, [r[c] for r in rows]):.2f}" for c in cols]
    lines.append("| exponent | " + " | ".join(fits) + " |")
    return "\n".join(lines)


def run(
    sections: Sequence[str] = ("convert",),
    sizes: Sequence[int] = (10**6, 10**7),
    *,
    root: str | Path = "bench-data",
) -> dict[str, list[dict[str, Any]]]:
    """Every section of ``sections`` at every size; prints its table with the exponents."""
    results = {}
    for name in sections:
        results[name] = SECTIONS[name](sizes, Path(root))
        print(_table(name, results[name]), flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", nargs="+", default=["convert"], choices=sorted(SECTIONS))
    parser.add_argument("--rows", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--root", default="bench-data")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-shuffle", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    SECTIONS["convert"] = lambda sizes, root: convert_section(
        sizes, root, shuffle=not args.no_shuffle, workers=args.workers
    )
    results = run(args.sections, [int(r) for r in args.rows], root=args.root)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
