"""One worker's reads of a 2-worker first epoch over a sorted h5ad, replayed in one process: the
CPU of the reads alone (``time.process_time``), without the loader's processes and transport.

The loader's order (``make_loader(..., shuffle=True, num_workers=2,
workers=Workers(hold_bytes=0))``, as :mod:`benchmarks.bench_singlecell_epochs` runs it) is
drawn once; worker ``--worker``'s share of each batch (``sampler.reader_rows``) is then read
with ``read_batch`` on a fresh dataset handle, ``--passes`` times (each pass a new handle, so
every chunk is decoded as in a first epoch). Printed: each pass's CPU-s, their minimum and
median, the reads and the chunks decoded. ``--baseline DIR`` (another chunkio checkout, e.g.
the main branch's) alternates rounds of this tree and that one, each in a process of its own,
and prints each round's ratio of minima::

    python -m benchmarks.singlecell_replay PATH.h5ad [--passes 5] [--rounds 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bench_singlecell as sc


def replay(path: str, passes: int, worker: int) -> tuple[list[float], int, int]:
    """CPU-s of each pass over worker ``worker``'s reads, the reads and the chunks decoded."""
    import chunkio

    def loader(workers: int) -> Any:
        return chunkio.make_loader(
            path, batch_size=sc.BATCH, fields=sc.FIELDS, shuffle=True,
            num_workers=workers, workers=chunkio.Workers(hold_bytes=0),
        )  # fmt: skip

    sampler = loader(sc.WORKERS).sampler
    parts = []
    for batch in sampler.iter_arrays():
        start, stop = sampler.reader_rows(len(batch), sc.WORKERS)[worker]
        parts.append(np.asarray(batch[start:stop]))
    times, chunks = [], 0
    for _ in range(passes):
        dataset = loader(0).dataset
        dataset.read_batch(parts[0][:1])  # the file opened, the row offsets read: not counted
        started = time.process_time()
        for rows in parts:
            dataset.read_batch(rows)
        times.append(time.process_time() - started)
        chunks = dataset.read_stats().chunks_read
    return times, len(parts), chunks


def _in_tree(tree: Path, args: argparse.Namespace) -> float:
    """The minimum pass of a replay in a process importing ``tree``'s chunkio."""
    here = Path(__file__).resolve()
    options = ["--passes", str(args.passes), "--worker", str(args.worker), "--min-only"]
    command = [sys.executable, str(here), args.path, *options]
    # that tree's chunkio (and benchmarks) first, this script's benchmarks after
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{here.parent.parent}"}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a sorted h5ad (bench_singlecell writes one)")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--worker", type=int, default=0, choices=range(sc.WORKERS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another chunkio checkout, alternated")
    parser.add_argument("--min-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline is None:
        times, reads, chunks = replay(args.path, args.passes, args.worker)
        if args.min_only:
            print(f"{min(times):.4f}")
            return
        each = ", ".join(f"{t:.3f}" for t in times)
        low, mid = min(times), statistics.median(times)
        print(f"CPU-s per pass: {each}; min {low:.3f}, median {mid:.3f}; {reads} reads, "
              f"{chunks} chunks decoded")  # fmt: skip
        return
    here = Path(__file__).resolve().parent.parent
    ratios = []
    for i in range(args.rounds):
        this, other = _in_tree(here, args), _in_tree(args.baseline.resolve(), args)
        ratios.append(this / other)
        load = os.getloadavg()[0]
        print(f"round {i}: this tree {this:.3f}, baseline {other:.3f} CPU-s (min of "
              f"{args.passes}); ratio {this / other:.2f}; load {load:.1f}")  # fmt: skip
    print(f"ratio median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
