"""annbatch's side of ``bench_singlecell``, run under Python >= 3.12 in its own venv.

    python benchmarks/annbatch_singlecell.py H5AD STORE BATCH BUDGET_S CHUNK_SIZE PRELOAD_NCHUNKS

Rewrites the h5ad once into the sharded Zarr v3 store annbatch reads (``write_sharded`` at its
defaults, in cell order: no pre-shuffle, so mixing is judged on the same sorted order as the
other loaders; kept at STORE), then iterates ``Loader(batch_size=BATCH, chunk_size=...,
preload_nchunks=..., shuffle=True)`` for BUDGET_S seconds after one warm-up batch, densifying
each CSR batch (the other loaders deliver dense batches). annbatch has no worker processes (it
reads with zarr's threads). Prints one JSON line: cells/s, CPU seconds of the process (all its
threads), the mean number of distinct cell types per batch, and the version.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _write(h5ad: Path, store: Path) -> float:
    import anndata as ad
    import zarr
    from annbatch import write_sharded

    start = time.perf_counter()
    adata = ad.read_h5ad(h5ad)
    partial = store.with_name(store.name + ".partial")
    write_sharded(zarr.open_group(partial, mode="w", zarr_format=3), adata)
    partial.rename(store)
    return time.perf_counter() - start


def main() -> None:
    h5ad, store = Path(sys.argv[1]), Path(sys.argv[2])
    batch, budget = int(sys.argv[3]), float(sys.argv[4])
    chunk_size, preload = int(sys.argv[5]), int(sys.argv[6])
    warnings.simplefilter("ignore")  # FutureWarnings about obsm it does not yield yet
    import numpy as np
    import zarr
    from annbatch import Loader
    from annbatch.utils import load_all_aligned

    write_s = 0.0 if store.exists() else _write(h5ad, store)
    adata = load_all_aligned(zarr.open_group(store, mode="r"))
    loader = Loader(batch_size=batch, chunk_size=chunk_size, preload_nchunks=preload,
                    shuffle=True, preload_to_gpu=False, rng=np.random.default_rng(0))  # fmt: skip
    loader.add_adata(adata)
    n = 0
    distinct: list[int] = []
    start = cpu = 0.0
    for k, out in enumerate(loader):
        x = out["X"]
        x = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
        if k == 0:  # the first batch waits for the first preload: untimed
            start, cpu = time.perf_counter(), _cpu()
            continue
        n += x.shape[0]
        distinct.append(int(out["obs"]["cell_type"].nunique()))
        if time.perf_counter() - start > budget and len(distinct) >= 2:
            break
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    print(json.dumps({
        "cells_per_s": n / elapsed,
        "cells": n,
        "cpu_s": cpu,
        "elapsed_s": elapsed,
        "distinct_per_batch": float(np.mean(distinct)),
        "batches": len(distinct),
        "write_sharded_s": write_s,
        "version": version("annbatch"),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
