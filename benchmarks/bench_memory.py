"""Worker memory over many epochs: does a long run leak? (RELIABILITY row 27.)

A persistent-worker ``make_loader`` reads ``epochs`` shuffled epochs; after each, psutil
samples every worker's RSS and USS (USS: memory only that process holds, without the shared
ring slots and shared libraries RSS also counts). Growth is the last epoch's value minus the
first's (the first epoch fills caches and staging buffers).

    python -m benchmarks.bench_memory PATH [--epochs 20]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import psutil

import chunkio

__all__ = ["FLAT_TOLERANCE_BYTES", "is_flat", "run", "worker_pids"]

#: growth per worker below this many bytes counts as flat (allocator noise, lazy imports)
FLAT_TOLERANCE_BYTES = 32 * 2**20


def worker_pids(loader: Any) -> tuple[int, ...]:
    """Worker process ids of a ChunkLoader (ring) or of its torch DataLoader route."""
    pids = tuple(loader.worker_pids())
    if pids:
        return pids
    # the DataLoader route keeps its persistent workers in its private iterator
    dl = getattr(getattr(loader, "_route", None), "loader", None)
    workers = getattr(getattr(dl, "_iterator", None), "_workers", None) or ()
    return tuple(int(w.pid) for w in workers if w.pid is not None)


def _sample(pids: tuple[int, ...]) -> dict[int, tuple[int, int, int]]:
    """pid -> (RSS, USS, peak RSS so far: VmHWM, or RSS where /proc lacks it)."""
    out = {}
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        out[pid] = (int(info.rss), int(info.uss), peak_rss(pid) or int(info.rss))
    return out


def peak_rss(pid: int) -> int | None:
    """Peak RSS of process ``pid`` so far (``VmHWM``), ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def is_flat(series: list[int], tolerance: int = FLAT_TOLERANCE_BYTES) -> bool:
    """True if the value after the last epoch exceeds the first by at most ``tolerance``."""
    return len(series) < 2 or series[-1] - series[0] <= tolerance


def run(
    path: str,
    *,
    epochs: int = 20,
    num_workers: int = 2,
    batch_size: int = 256,
    transport: str = "ring",
) -> dict[str, Any]:
    """RSS/USS per worker after each of ``epochs`` epochs of one persistent-worker loader."""
    if epochs < 1 or num_workers < 1:
        raise ValueError(f"need epochs >= 1 and num_workers >= 1, got {epochs}, {num_workers}")
    rss: dict[int, list[int]] = {}
    uss: dict[int, list[int]] = {}
    peak: dict[int, int] = {}
    pids: tuple[int, ...] = ()
    with chunkio.make_loader(
        path,
        batch_size,
        fields=["image", "label"],
        num_workers=num_workers,
        workers=chunkio.Workers(transport=transport),
    ) as loader:
        for _ in range(epochs):
            for _batch in loader:
                pids = worker_pids(loader)  # sampled mid-epoch: workers are alive
            for pid, (r, u, hwm) in _sample(pids).items():
                rss.setdefault(pid, []).append(r)
                uss.setdefault(pid, []).append(u)
                peak[pid] = max(peak.get(pid, 0), hwm)
    workers = [
        {
            "pid": pid,
            "peak_rss": peak[pid],
            "peak_uss": max(uss[pid]),
            "rss_growth": rss[pid][-1] - rss[pid][0],
            "uss_growth": uss[pid][-1] - uss[pid][0],
            "uss_series": uss[pid],
        }
        for pid in rss
    ]
    restarted = any(len(v) != epochs for v in rss.values()) or len(rss) != num_workers
    return {
        "epochs": epochs,
        "num_workers": num_workers,
        "transport": transport,
        "workers": workers,
        "workers_restarted": restarted,
        "flat": not restarted and all(is_flat(uss[p]) for p in uss),
        "tolerance_bytes": FLAT_TOLERANCE_BYTES,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("path")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    print(json.dumps(run(args.path, epochs=args.epochs, num_workers=args.workers), indent=1))


if __name__ == "__main__":
    main()
