"""The epoch's order at 1M-100M rows: the first batch, a whole pass and a resume, block by block
(:mod:`chunkio.sampling.epoch_order`) against the whole-epoch sort it replaced.

For each row count and world size: ``ChunkBatchSampler(sizes, 256, world_size=W, rank=0)``
with its default pool (four global batches) over chunks of 1000-4000 rows; wall and CPU time
to the first batch, for a pass over the whole epoch (batches not kept, as a loader uses them)
and to the first batch of a resume at 90% of the epoch; the order's peak memory as traced by
``tracemalloc`` and as the process's peak RSS above its RSS before the epoch. ``eager`` rows
build the epoch the way chunkio did before (``tests/sampling/reference_order.py``): one sort,
all batches at once, which is also its first batch and its resume. Each row runs in a fresh
process, so peak RSS is that row's. The eager build needs ~90 B/sample (9 GB at 100M): pass
``--eager-up-to`` to bound it.

Outside the test suite (a script, not collected); ``tests/sampling/test_epoch_order.py``
asserts the memory bounds at 2M rows.

    python -m benchmarks.bench_order [--rows 1e6 1e7 1e8] [--ranks 1 4] [--eager-up-to 1e8]
        [--out results.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["chunk_sizes", "measure", "run"]

BATCH = 256
REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "sampling" / "reference_order.py"


def chunk_sizes(rows: int, seed: int = 0) -> Any:
    """Chunks of 1000-4000 rows summing to ``rows`` (the last one the remainder)."""
    sizes = np.random.default_rng(seed).integers(1000, 4001, rows // 1000 + 1)
    ends = np.cumsum(sizes)
    keep = int(np.searchsorted(ends, rows))
    out = sizes[: keep + 1].copy()
    out[-1] -= int(ends[keep]) - rows
    return out[out > 0]


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    """Start VmHWM (peak RSS) afresh from the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _traced(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _eager(sizes: Any, sampler: Any) -> list[Any]:
    spec = importlib.util.spec_from_file_location("reference_order", REFERENCE)
    assert spec is not None and spec.loader is not None  # a file of this repository
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out: list[Any] = module.eager_rank_batches(
        sizes,
        sampler.spec,
        seed=sampler.seed,
        epoch=sampler.epoch,
        rank=sampler.rank,
        world_size=sampler.world_size,
    )
    return out


def measure(rows: int, world: int, mode: str) -> dict[str, Any]:
    """One row of the table, in this process (``mode``: ``lazy`` or ``eager``)."""
    from chunkio.sampling.sampler import ChunkBatchSampler

    sizes = chunk_sizes(rows)
    sampler = ChunkBatchSampler(sizes, BATCH, world_size=world, rank=0)
    resume_at = int(0.9 * len(sampler))
    row: dict[str, Any] = {"rows": rows, "ranks": world, "mode": mode, "chunks": int(sizes.size)}
    row["pool"] = sampler.pool
    next(sampler.iter_arrays())  # imports and first-call allocations out of the measure
    base = _rss("VmRSS")
    _reset_peak()
    if mode == "eager":
        peak = 0

        def build() -> None:
            nonlocal peak
            peak = _traced(lambda: _eager(sizes, sampler))

        _, wall, cpu = _timed(build)
        row.update(first_s=wall, first_cpu_s=cpu, epoch_cpu_s=cpu, resume_s=wall)
        row.update(traced_first=peak, traced_epoch=peak, traced_resume=peak)
    else:
        it = sampler.iter_arrays()
        _, row["first_s"], row["first_cpu_s"] = _timed(lambda: next(it))
        _, _, rest = _timed(lambda: sum(1 for _ in it))
        row["epoch_cpu_s"] = row["first_cpu_s"] + rest

        def resume() -> Any:
            sampler.load_state_dict(sampler.state_at(resume_at))
            return next(sampler.iter_arrays())

        _, row["resume_s"], _ = _timed(resume)
        row["traced_first"] = _traced(lambda: next(sampler.iter_arrays()))
        row["traced_epoch"] = _traced(lambda: sum(1 for _ in sampler.iter_arrays()))
        row["traced_resume"] = _traced(resume)
    row["rss_peak"] = _rss("VmHWM") - base
    return row


def run(rows: list[int], ranks: list[int], eager_up_to: int) -> list[dict[str, Any]]:
    """All rows, each in a fresh process, one at a time."""
    out = []
    for n in rows:
        for world in ranks:
            modes = ["lazy"] + (["eager"] if n <= eager_up_to and world == ranks[0] else [])
            for mode in modes:
                cmd = [sys.executable, "-m", "benchmarks.bench_order", "--one", str(n), str(world)]
                done = subprocess.run([*cmd, mode], check=True, capture_output=True, text=True)
                out.append(json.loads(done.stdout))
                print(markdown([out[-1]], header=len(out) == 1), flush=True)
    return out


def markdown(rows: list[dict[str, Any]], header: bool = True) -> str:
    lines = (
        [
            "| rows | ranks | order | first batch s (CPU s) | epoch CPU s | resume at 90% s "
            "| traced peak MB: first / epoch / resume | RSS peak MB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        if header
        else []
    )
    mb = 2**20
    for r in rows:
        lines.append(
            f"| {r['rows']:.0e} | {r['ranks']} | {r['mode']} "
            f"| {r['first_s']:.4f} ({r['first_cpu_s']:.4f}) | {r['epoch_cpu_s']:.2f} "
            f"| {r['resume_s']:.4f} "
            f"| {r['traced_first'] / mb:.2f} / {r['traced_epoch'] / mb:.1f} / "
            f"{r['traced_resume'] / mb:.2f} | {r['rss_peak'] / mb:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7, 1e8])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--eager-up-to", type=float, default=1e7)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(int(float(args.one[0])), int(args.one[1]), args.one[2])))
        return
    rows = run([int(n) for n in args.rows], args.ranks, int(args.eager_up_to))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
