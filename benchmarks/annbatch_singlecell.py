"""annbatch's side of ``bench_singlecell``, run under Python >= 3.12 in its own venv.

    python benchmarks/annbatch_singlecell.py H5AD STORE BATCH BUDGET_S CHUNK_SIZE PRELOAD_NCHUNKS
                                             [--epochs N]

annbatch as its README runs it: the ``zarrs`` codec pipeline (``zarr.config.set({
"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})``, "necessary for local filesystem
performance"); the h5ad rewritten once into the pre-shuffled collection
``DatasetCollection(STORE).add_adatas([H5AD], shuffle=True)`` writes (its defaults: sharded
Zarr, 64 cells per chunk, lz4; kept at STORE, its writing time reported); ``Loader(batch_size=
BATCH, chunk_size=..., preload_nchunks=..., shuffle=True).use_collection(...)`` under
``anndata.settings.override(remove_unused_categories=False)``, loading ``X`` and the
``cell_type`` column only (the README's ``custom_load_func``: all of ``obs`` otherwise). Each
CSR batch is densified on the CPU (the other loaders deliver dense host batches; the README
densifies on the GPU, which this machine has not). annbatch has no worker processes (zarr's
and zarrs' threads read).

Without ``--epochs``: BUDGET_S seconds after one untimed batch (the first preload). With
``--epochs N``: N whole epochs, each timed from its ``iter()`` (the first one's preload
included). Prints one JSON line: cells, wall and CPU seconds of the process (all its threads),
distinct cell types per batch, and the version.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _collection(h5ad: Path, store: Path) -> float:
    """Write the pre-shuffled collection once (seeded); its wall seconds."""
    import numpy as np
    from annbatch import DatasetCollection

    start = time.perf_counter()
    partial = store.with_name(store.stem + ".partial.zarr")
    DatasetCollection(partial).add_adatas([str(h5ad)], shuffle=True, rng=np.random.default_rng(0))
    partial.rename(store)
    return time.perf_counter() - start


def _load(group: Any) -> Any:
    """The README's ``custom_load_func``: X on disk, the one obs column the batches need."""
    import anndata as ad

    obs = ad.io.read_elem(group["obs"])[["cell_type"]]
    return ad.AnnData(X=ad.io.sparse_dataset(group["X"]), obs=obs)


def _batch(out: Any) -> tuple[int, int]:
    import numpy as np

    x = out["X"]
    x = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
    return int(x.shape[0]), int(out["obs"]["cell_type"].nunique())


def main() -> None:
    h5ad, store = Path(sys.argv[1]), Path(sys.argv[2])
    batch, budget = int(sys.argv[3]), float(sys.argv[4])
    chunk_size, preload = int(sys.argv[5]), int(sys.argv[6])
    n_epochs = int(sys.argv[sys.argv.index("--epochs") + 1]) if "--epochs" in sys.argv else 0
    warnings.simplefilter("ignore")  # FutureWarnings about obsm it does not yield yet
    import anndata as ad
    import numpy as np
    import zarr
    from annbatch import DatasetCollection, Loader

    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    collection_s = 0.0 if store.exists() else _collection(h5ad, store)
    with ad.settings.override(remove_unused_categories=False):
        loader = Loader(batch_size=batch, chunk_size=chunk_size, preload_nchunks=preload,
                        shuffle=True, preload_to_gpu=False,
                        rng=np.random.default_rng(0))  # fmt: skip
        loader = loader.use_collection(DatasetCollection(store, mode="r"), load_adata=_load)
    result: dict[str, Any] = {"collection_s": collection_s, "version": version("annbatch"),
                              "zarrs": version("zarrs")}  # fmt: skip
    if n_epochs:
        epochs = []
        for _ in range(n_epochs):
            start, cpu, cells, distinct = time.perf_counter(), _cpu(), 0, []
            for out in loader:
                n, d = _batch(out)
                cells += n
                distinct.append(d)
            epochs.append({"cells": cells, "elapsed_s": time.perf_counter() - start,
                           "cpu_s": _cpu() - cpu,
                           "distinct_per_batch": float(np.mean(distinct))})  # fmt: skip
        print(json.dumps(result | {"epochs": epochs}))
        return
    n = 0
    counts: list[int] = []
    start = cpu = 0.0
    for k, out in enumerate(loader):
        cells, d = _batch(out)
        if k == 0:  # the first batch waits for the first preload: untimed
            start, cpu = time.perf_counter(), _cpu()
            continue
        n += cells
        counts.append(d)
        if time.perf_counter() - start > budget and len(counts) >= 2:
            break
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    print(json.dumps(result | {
        "cells_per_s": n / elapsed,
        "cells": n,
        "cpu_s": cpu,
        "elapsed_s": elapsed,
        "distinct_per_batch": float(np.mean(counts)),
        "batches": len(counts),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
