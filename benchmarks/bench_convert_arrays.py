"""Streaming conversion of a user's own HDF5 file larger than the memory it may use.

A file as plain h5py writes it: ``images`` (N, 3, 64, 64) uint8 crops of natural photographs
in gzip chunks of 32 samples (h5py's default compressor), ``labels`` (N,) int64 contiguous,
sorted by label; about 1.2 GiB decoded (``--quick``: 256 MiB), made once in the data folder.
``chunkio convert arrays`` runs in a child process with 2 workers, shuffled (the external
two-pass shuffle) and in source order; psutil samples the resident memory of the whole
process tree (the converting process and its workers) every 20 ms.

Reported: wall time, decoded MB/s, and the peak of the tree's summed RSS as a ratio to the
source's decoded size (RSS counts shared library pages once per process, so the sum
overstates what the tree holds).

    python -m benchmarks.bench_convert_arrays [--root bench-data] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.data import sample_photos
from benchmarks.report import check

__all__ = ["run"]

WORKERS = 2
#: decoded bytes of the source file
SOURCE_BYTES = {False: 1200 << 20, True: 256 << 20}
_SAMPLE = 3 * 64 * 64
_SLICE = 4096  # samples generated and written at a time

_CHILD = """
import json, sys, time
from chunkio import Execution, convert_arrays
from chunkio.convert.engine import workers

workers.POOL_MIN_SECONDS = 0.0  # the pool also for the --quick source
started = time.perf_counter()
r = convert_arrays(sys.argv[1], sys.argv[2], fields={"image": "images", "label": "labels"},
                   shuffle=sys.argv[3] == "1",
                   execution=Execution(workers=int(sys.argv[4]), progress=False))
print(json.dumps({"seconds": time.perf_counter() - started, "blocks": r.written_blocks}))
"""


def make_source(root: Path, nbytes: int) -> Path:
    """The user's file (reused when present with the same size)."""
    import h5py

    n = nbytes // (_SAMPLE + 8)
    path = root / f"user-{n}.h5"
    if path.exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    rng = np.random.default_rng(0)
    photos = sample_photos()
    with h5py.File(tmp, "w") as f:
        images = f.create_dataset("images", shape=(n, 3, 64, 64), dtype="u1",
                                  chunks=(32, 3, 64, 64), compression="gzip")  # fmt: skip
        for start in range(0, n, _SLICE):
            count = min(_SLICE, n - start)
            block = np.empty((count, 3, 64, 64), np.uint8)
            for i in range(count):
                p = photos[int(rng.integers(len(photos)))]
                y, x = (int(rng.integers(0, s - 64)) for s in p.shape[:2])
                block[i] = p[y : y + 64, x : x + 64].transpose(2, 0, 1)
            images[start : start + count] = block
        f.create_dataset("labels", data=np.repeat(np.arange(10), -(-n // 10))[:n])
    tmp.rename(path)
    return path


def _tree_memory(proc: psutil.Process, *, unique: bool) -> tuple[int, int]:
    """Summed RSS of ``proc`` and its descendants, and their summed USS where ``unique``
    (pages no other process maps: slower to read, so sampled less often), else 0."""
    rss = uss = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            if unique:
                info = p.memory_full_info()
                rss, uss = rss + info.rss, uss + info.uss
            else:
                rss += p.memory_info().rss
        except psutil.Error:
            pass  # a worker that just exited
    return rss, uss


def convert_measured(src: Path, dst: Path, *, shuffle: bool) -> dict[str, Any]:
    """Run the conversion in a child process; sample its tree's RSS until it exits."""
    shutil.rmtree(dst, ignore_errors=True)
    cmd = [sys.executable, "-c", _CHILD, str(src), str(dst), "1" if shuffle else "0", str(WORKERS)]
    started = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc, peak, peak_uss, k = psutil.Process(child.pid), 0, 0, 0
    while child.poll() is None:
        try:
            rss, uss = _tree_memory(proc, unique=k % 5 == 0)
        except psutil.Error:
            break
        peak, peak_uss, k = max(peak, rss), max(peak_uss, uss), k + 1
        time.sleep(0.02)
    out, err = child.communicate()
    wall = time.perf_counter() - started
    if child.returncode:
        raise RuntimeError(f"conversion failed ({child.returncode}): {err.strip()[-2000:]}")
    reported = json.loads(out.strip().splitlines()[-1])
    decoded = decoded_size(src)
    shutil.rmtree(dst, ignore_errors=True)
    return {
        "shuffle": shuffle,
        "workers": WORKERS,
        "wall_s": wall,
        "convert_s": reported["seconds"],
        "blocks": reported["blocks"],
        "decoded_mb_per_s": decoded / 1e6 / reported["seconds"],
        "peak_tree_rss_bytes": peak,
        "peak_rss_over_source": peak / decoded,
        "peak_tree_uss_bytes": peak_uss,
    }


def decoded_size(src: Path) -> int:
    """Decoded bytes of the source's arrays."""
    import h5py

    with h5py.File(src, "r") as f:
        return int(sum(f[k].size * f[k].dtype.itemsize for k in ("images", "labels")))


def run(*, root: str | Path = "bench-data", quick: bool = False) -> dict[str, Any]:
    folder = Path(root) / "convert_arrays"
    src = make_source(folder, SOURCE_BYTES[quick])
    rows = [convert_measured(src, folder / "out.zarr", shuffle=s) for s in (True, False)]
    decoded = decoded_size(src)
    return {
        "source": str(src),
        "source_file_bytes": src.stat().st_size,
        "source_decoded_bytes": decoded,
        "rows": rows,
        # --quick: the source is too small for the ratio to mean much (four interpreters
        # with numpy, zarr and h5py hold about 70 MiB each before reading anything)
        "checks": []
        if quick
        else [
            check(
                f"convert arrays, shuffled, {WORKERS} workers: peak tree RSS / source size",
                max(r["peak_rss_over_source"] for r in rows),
                0.5,
                at_most=True,
            )
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default="bench-data")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = run(root=args.root, quick=args.quick)
    mib = 2**20
    print(
        f"source {result['source']}: {result['source_decoded_bytes'] / mib:.0f} MiB decoded, "
        f"{result['source_file_bytes'] / mib:.0f} MiB on disk (gzip chunks of 32)"
    )
    for r in result["rows"]:
        order = "shuffled" if r["shuffle"] else "in order"
        print(
            f"{order:9} {r['workers']} workers: {r['convert_s']:6.1f} s, "
            f"{r['decoded_mb_per_s']:6.1f} MB/s decoded, peak tree RSS "
            f"{r['peak_tree_rss_bytes'] / mib:5.0f} MiB = {r['peak_rss_over_source']:.2f} x source "
            f"(USS {r['peak_tree_uss_bytes'] / mib:.0f} MiB)"
        )
    print(json.dumps(result["checks"], indent=1))


if __name__ == "__main__":
    main()
