"""insitubatch's side of ``bench_windows``, run under Python >= 3.12 in its own venv.

    python benchmarks/insitubatch_windows.py STORE BATCH BUDGET_S

Windows ``t-1, t`` of every variable plus a ``t+1`` target, as shifted geometries
(``geometry.shift(k)``), over one ``InSituDataset`` (its own threads: it has no worker
processes); prints one JSON line: samples/s of the first epoch (which decodes every chunk) and
of the later ones (which its pool serves decoded), chunks decoded per stored chunk in the later
epochs, and the std of anchor times per batch; samples per CPU-second of both.
"""

from __future__ import annotations

import json
import sys
import time

import insitubatch as ib
import numpy as np
import zarr.storage


def main() -> None:
    path, batch, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    store = zarr.storage.LocalStore(path, read_only=True)
    base = ib.open_geometries(store, ["t2m", "u10", "v10"])
    geoms = {}
    for name, g in base.items():
        for k in (-1, 0, 1):
            geoms[f"{name}@{k}"] = g.shift(k)
    ref = base["t2m"]
    manifest = ib.split_by_chunk(ref, fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=batch, seed=0)
    first, first_cpu, cold = time.perf_counter(), time.process_time(), 0
    for b in ds.train:  # the first epoch decodes every chunk; later ones reuse its pool
        cold += len(b)
    cold_rate = cold / (time.perf_counter() - first)
    cold_cpu = cold / (time.process_time() - first_cpu)
    n = epochs = 0
    spreads = []
    misses = 0
    start, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < budget or not epochs:
        ds.set_epoch(epochs + 1)
        for b in ds.train:
            n += len(b)
            spreads.append(float(np.std(np.asarray(b.sample_indices, dtype=float))))
        misses += ds.cache_misses
        epochs += 1
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu  # every thread of this one process
    chunks = -(-ref.n_samples // ref.chunks[0]) * len(base)
    print(json.dumps({
        "samples_per_s": n / elapsed,
        "first_epoch_samples_per_s": cold_rate,
        "samples_per_cpu_s": n / cpu,
        "first_epoch_samples_per_cpu_s": cold_cpu,
        "amplification": misses / (chunks * epochs),
        "time_std": float(np.mean(spreads)),
        "version": ib.__version__,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
