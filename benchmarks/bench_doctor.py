"""What ``chunkio doctor`` measures a rewrite of a badly chunked foreign store to gain.

The unit tests (``tests/cli/test_foreign_commands.py``) give doctor its timings and check that
the advice follows them; the gains themselves are measured here, on this machine: h5py files
of random 16x16 (and 32x32) images, gzip, in chunks of 1 sample and in one chunk of every
sample, and a well chunked one (64 samples) that should get no advice. Per store: the issue
doctor names, the first-batch and per-batch speed-ups of the store's first samples rewritten
(``ChunkingAdvice.speedup``), and whether the rewrite is advised (>= 1.5x). On the 2-core
development machine chunks of one sample measured about 10x.

    python -m benchmarks.bench_doctor [--root DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["run"]

#: (name, samples per chunk or None for one chunk of all, samples, image side)
STORES = (
    ("h5py, chunks of 1 sample", 1, 512, 16),
    ("h5py, one chunk of all", None, 4096, 32),
    ("h5py, chunks of 64", 64, 512, 32),
)
FIELDS = {"image": "images", "label": "labels"}


def _h5py_store(path: Path, rows: int, n: int, side: int) -> Path:
    import h5py

    pixels = np.random.default_rng(1).integers(0, 255, (n, 3, side, side), dtype=np.uint8)
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=pixels, chunks=(rows, 3, side, side), compression="gzip")
        f.create_dataset("labels", data=np.arange(n) % 10)
    return path


def run(root: str | Path | None = None) -> list[dict[str, Any]]:
    from chunkio.diagnose.doctor import run_doctor

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(root or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for i, (name, per_chunk, n, side) in enumerate(STORES):
            path = _h5py_store(folder / f"store{i}.h5", per_chunk or n, n, side)
            started = time.perf_counter()
            report = run_doctor(
                path, fields=FIELDS, preload_bytes=0, worker_counts=[0], batch_sizes=[64],
                batches_per_setting=3, budget_s_per_setting=1.0,
            )  # fmt: skip
            advice = report.chunking
            rows.append(
                {
                    "store": name,
                    "issue": advice.issues[0].why if advice else "",
                    "first_batch_x": advice.speedup[0] if advice else None,
                    "per_batch_x": advice.speedup[1] if advice else None,
                    "advised": bool(advice and advice.recommended),
                    "doctor_s": time.perf_counter() - started,
                }
            )
    return rows


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    print(f"{'store':28} {'first batch':>12} {'per batch':>10} {'advised':>8} {'doctor':>8}")
    for r in run(args.root):
        print(
            f"{r['store']:28} {_x(r['first_batch_x']):>12} {_x(r['per_batch_x']):>10} "
            f"{'yes' if r['advised'] else 'no':>8} {r['doctor_s']:>7.1f}s"
        )


if __name__ == "__main__":
    main()
