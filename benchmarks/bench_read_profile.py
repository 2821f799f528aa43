"""Where one epoch's time goes, stage by stage, so the next person sees what to cut.

Two measurements of the same shuffled epoch (make_loader's order and defaults):

* **in-process** (``num_workers=0``): the reader's own stage clocks (:meth:`ReadStats.stages`)
  split the epoch into *file read*, *checksum*, *decompress* and *gather*; what remains of the
  wall time is *plan and bookkeeping* (planning, cache admission, Python per batch).
* **ring** (``num_workers=N``): the epoch's wall time, the CPU seconds of the main process
  outside the consumer's own code (*slot hand-off*: dispatch, waiting, leases), the
  *consumer*'s seconds between batches, and the workers' CPU seconds, compared with the
  in-process reading cost of the same samples (the excess is workers' pipe and scheduling
  overhead and two readers contending for memory bandwidth).

    python -m benchmarks.bench_read_profile [--root bench-data] [--images 8192]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

import chunkio
from benchmarks import bench_loaders

__all__ = ["format_profile", "profile_format", "run"]

FIELDS = ["image", "label"]


def _epoch_in_process(path: str, batch_size: int) -> dict[str, float]:
    with chunkio.make_loader(path, batch_size, fields=FIELDS, num_workers=0) as loader:
        for _ in loader:  # warm-up: page cache, handles, pool
            pass
        stats = loader.dataset.read_stats()
        before, samples0 = stats.stages(), stats.samples
        start = time.perf_counter()
        for _ in loader:
            pass
        wall = time.perf_counter() - start
        after = loader.dataset.read_stats().stages()
        samples = loader.dataset.read_stats().samples - samples0
    stages = {k: after[k] - before[k] for k in after}
    stages["plan and bookkeeping"] = max(0.0, wall - sum(stages.values()))
    return {"wall_s": wall, "samples": samples, **{f"{k}_s": v for k, v in stages.items()}}


def _timed_consumer(loader: Any) -> Iterator[tuple[Any, float]]:
    """Batches with the seconds the consumer kept each (the time outside ``next``)."""
    batches = iter(loader)
    while True:
        batch = next(batches, None)
        if batch is None:
            return
        start = time.perf_counter()
        yield batch, start


def _epoch_ring(path: str, batch_size: int, workers: int) -> dict[str, float]:
    with chunkio.make_loader(path, batch_size, fields=FIELDS, num_workers=workers) as loader:
        for _ in loader:  # warm-up: workers start, ring allocated, pools filled
            pass
        procs = [psutil.Process(pid) for pid in loader.worker_pids()]
        cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
        main0 = time.process_time()
        consumer = 0.0
        samples = 0
        start = time.perf_counter()
        for batch, got in _timed_consumer(loader):
            samples += bench_loaders._batch_len(batch)  # the consumer's work: nearly nothing
            consumer += time.perf_counter() - got
        wall = time.perf_counter() - start
        main = time.process_time() - main0
        workers_cpu = sum(sum(p.cpu_times()[:2]) - c for p, c in zip(procs, cpu0, strict=True))
    return {
        "wall_s": wall,
        "samples": samples,
        "slot hand-off_s": max(0.0, main - consumer),
        "consumer_s": consumer,
        "workers_cpu_s": workers_cpu,
    }


def profile_format(path: str, *, batch_size: int, workers: int) -> dict[str, Any]:
    """The stage profile of one epoch of ``path`` (in-process and on the ring)."""
    local = _epoch_in_process(path, batch_size)
    ring = _epoch_ring(path, batch_size, workers) if workers > 0 else {}
    out: dict[str, Any] = {"in_process": local, "ring": ring}
    if ring:
        reading = local["wall_s"] * ring["samples"] / max(1, local["samples"])
        out["ring"]["worker overhead_s"] = max(0.0, ring["workers_cpu_s"] - reading)
    return out


def _rows(name: str, prof: dict[str, Any]) -> list[dict[str, Any]]:
    local, ring = prof["in_process"], prof["ring"]
    stages = ["read", "checksum", "decode", "gather", "plan and bookkeeping"]
    labels = {"read": "file read", "decode": "decompress"}
    rows = []
    for stage in stages:
        s = local[f"{stage}_s"]
        rows.append(
            {
                "dataset": name,
                "where": "worker (in-process epoch)",
                "stage": labels.get(stage, stage),
                "seconds": s,
                "share": s / local["wall_s"],
                "samples_per_s_if_alone": local["samples"] / s if s else float("inf"),
            }
        )
    for stage in ("worker overhead", "slot hand-off", "consumer"):
        if f"{stage}_s" in ring:
            s = ring[f"{stage}_s"] * local["samples"] / max(1, ring["samples"])
            rows.append(
                {
                    "dataset": name,
                    "where": "ring" if stage == "worker overhead" else "main process",
                    "stage": stage,
                    "seconds": s,
                    "share": s / local["wall_s"],
                    "samples_per_s_if_alone": local["samples"] / s if s else float("inf"),
                }
            )
    return rows


def run(
    *,
    root: str | Path = "bench-data",
    n_images: int = 8192,
    workers: int = 2,
    batch_size: int = 256,
) -> dict[str, Any]:
    """Stage profiles of the benchmark dataset's Zarr and HDF5 forms (prepared if missing)."""
    root = Path(root)
    paths = {"zarr": root / "images.zarr", "hdf5": root / "images.h5"}
    if not all(p.exists() for p in paths.values()):
        bench_loaders.prepare(root, n_images=n_images, workers=max(1, workers))
    profiles = {
        fmt: profile_format(str(p), batch_size=batch_size, workers=workers)
        for fmt, p in paths.items()
    }
    rows = [r for fmt, prof in profiles.items() for r in _rows(fmt, prof)]
    ring = {
        fmt: {
            "ring_samples_per_s": p["ring"]["samples"] / p["ring"]["wall_s"],
            "in_process_samples_per_s": p["in_process"]["samples"] / p["in_process"]["wall_s"],
        }
        for fmt, p in profiles.items()
        if p["ring"]
    }
    return {"workers": workers, "batch_size": batch_size, "epoch": rows, "rates": ring}


def format_profile(result: dict[str, Any]) -> str:
    """The profile as a plain-text table (seconds are per epoch of the in-process run)."""
    lines = [
        f"{'dataset':7} {'where':26} {'stage':22} {'s/epoch':>8} {'share':>6} "
        f"{'samples/s alone':>16}"
    ]
    for r in result["epoch"]:
        alone = r["samples_per_s_if_alone"]
        lines.append(
            f"{r['dataset']:7} {r['where']:26} {r['stage']:22} {r['seconds']:8.4f} "
            f"{r['share']:6.1%} {alone:16,.0f}"
        )
    for fmt, rates in result["rates"].items():
        lines.append(
            f"{fmt}: ring with {result['workers']} workers {rates['ring_samples_per_s']:,.0f} "
            f"samples/s; one process {rates['in_process_samples_per_s']:,.0f} samples/s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--root", default="bench-data")
    p.add_argument("--images", type=int, default=8192)
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args(argv)
    result = run(
        root=args.root, n_images=args.images, workers=args.workers, batch_size=args.batch_size
    )
    print(format_profile(result))


if __name__ == "__main__":
    main()
