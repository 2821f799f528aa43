"""`make bench`: every loader side by side on one realistic dataset, as ratios, in one run.

Builds natural-image JPEGs (3x96x96, class folders), converts them to Zarr and HDF5, then
measures shuffled-epoch samples/s of chunkio and of the per-sample Datasets users write today
(0 and N workers), the limits on the same batches, read amplification and shuffle quality,
worker memory over many epochs, and - when their modules are present - conversion, transport,
patch and codec benchmarks, training parity (a CNN trained from make_loader against a uniform
shuffle) and label mixing. Writes ``benchmarks/results/latest.{md,json,png}`` and prints the
table, with the issue's targets as checks.

    python -m benchmarks.run [--quick] [--workers N] [--epochs 20]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import platform
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from benchmarks import bench_loaders, bench_memory
from benchmarks.report import RESULTS, check, write_report

__all__ = ["checks", "machine", "main", "run"]

#: mixing pools measured, as multiples of make_loader's default ``pool_bytes``
POOL_FACTORS = (0.25, 0.5, 1.0, 2.0)


def machine() -> dict[str, Any]:
    """What the figures were measured on (the machine is shared: name it)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": bench_loaders.cores(),
        "cpu_count": psutil.cpu_count(),
        "memory_gib": psutil.virtual_memory().total / 2**30,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _optional(module: str, quick: bool, **kwargs: Any) -> dict[str, Any]:
    """Run ``benchmarks.<module>.run`` with the keyword arguments it accepts, or say why not."""
    try:
        mod = importlib.import_module(f"benchmarks.{module}")
    except ImportError as err:
        return {"skipped": f"benchmarks/{module}.py not available ({err})"}
    params = inspect.signature(mod.run).parameters
    accepted = {k: v for k, v in {**kwargs, "quick": quick}.items() if k in params}
    try:
        result: dict[str, Any] = mod.run(**accepted)
    except Exception as err:  # another module's failure must not lose the rest of the run
        return {"skipped": f"benchmarks/{module}.py failed: {type(err).__name__}: {err}"}
    return result


def _rate(rows: list[dict[str, Any]], name: str, workers: int) -> float:
    return next(r["samples_per_s"] for r in rows if r["name"] == name and r["workers"] == workers)


def checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, on the N-worker figures."""
    rows, n = results["rows"], results["settings"]["workers"]
    gather = _rate(rows, "limit: in-process NumPy gather", 0)
    in_memory = _rate(rows, "limit: in-memory batched reader via DataLoader", n)
    naive = _rate(rows, "naive per-sample h5py Dataset", n)
    cores = results["machine"]["cores"]
    out = []
    for fmt in ("zarr", "hdf5"):
        ours = _rate(rows, f"chunkio make_loader {fmt} (default)", n)
        decode = _rate(rows, f"limit: {fmt} decode rate x {cores} cores", n)
        limit = min(gather, decode)
        out += [
            check(f"{fmt} make_loader / min(gather, decode x cores)", ours / limit, 0.4),
            check(f"{fmt} make_loader / in-memory reader via DataLoader", ours / in_memory, 2.0),
            check(f"{fmt} make_loader / naive per-sample h5py", ours / naive, 30.0),
        ]
    amp = results["amplification"]
    worst = max(amp["modelled_readers"], amp["in_process_zarr"], amp["in_process_hdf5"])
    out.append(
        check("read amplification (worst of in-process, N readers)", worst, 1.1, at_most=True)
    )
    mem = results["memory"]
    if "skipped" not in mem:
        growth = max(w["uss_growth"] for w in mem["workers"]) / 2**20
        tol = mem["tolerance_bytes"] / 2**20
        label = f"worker USS growth over {mem['epochs']} epochs, MiB (flat)"
        out.append(check(label, growth, tol, at_most=True) | {"passed": bool(mem["flat"])})
    # bench_training's own target (accuracy parity with a uniform shuffle), when it ran
    out += results.get("training", {}).get("checks", [])
    # bench_convert's targets (conversion over bare decode; write_arrays workers), when it ran
    out += results.get("convert", {}).get("checks", [])
    # bench_images' targets (augmented epochs vs ImageFolder + Pillow; JPEG storage), when it ran
    out += results.get("images", {}).get("checks", [])
    # bench_foreign's targets (stores chunkio did not write, read in place), when it ran
    out += results.get("foreign", {}).get("checks", [])
    # bench_convert_arrays' target (peak memory of a streaming conversion), when it ran
    out += results.get("convert_arrays", {}).get("checks", [])
    # bench_windows' targets (windows in time vs insitubatch and a per-sample Dataset), when it ran
    out += results.get("windows", {}).get("checks", [])
    # bench_singlecell's targets (vs scDataset and a per-cell backed read; mixing; memory)
    out += results.get("singlecell", {}).get("checks", [])
    return out


def run(
    *,
    root: str | Path,
    quick: bool,
    n_images: int,
    workers: int,
    batch_size: int,
    budget_s: float,
    epochs: int,
    codecs: bool,
    optional: bool = True,
    min_s: float = bench_loaders.MIN_S,
) -> dict[str, Any]:
    """Every measurement of the suite, as one JSON-serialisable dict.

    ``min_s``: fast routes are timed over whole epochs for at least this long.
    ``optional=False`` leaves out the other modules' benchmarks (conversion, transport,
    patches, codecs, training, mixing): the smoke test uses it.
    """
    start = time.perf_counter()
    data = bench_loaders.prepare(root, n_images=n_images, workers=workers)
    rows: list[dict[str, Any]] = []
    for w in sorted({0, workers}):
        rows += bench_loaders.loader_rows(
            data,
            workers=w,
            batch_size=batch_size,
            budget_s=120,
            naive_budget_s=budget_s,
            min_s=min_s,
        )
        print(f"  loaders with {w} workers measured", file=sys.stderr)
    rows += bench_loaders.limit_rows(data, workers=workers, batch_size=batch_size, min_s=min_s)
    bench_loaders.add_limit_fractions(rows, workers=workers)
    amp = bench_loaders.amplification(
        data, workers=workers, batch_size=batch_size, pool_factors=POOL_FACTORS
    )
    memory = (
        bench_memory.run(data.zarr, epochs=epochs, num_workers=workers, batch_size=batch_size)
        if workers > 0
        else {"skipped": "needs at least one worker"}
    )
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "quick": quick,
            "n_images": n_images,
            "sample_shape": list(data.images.shape[1:]),
            "batch_size": batch_size,
            "workers": workers,
            "naive_budget_s": budget_s,
            "memory_epochs": epochs,
        },
        "prepare": {"converter": data.converter, "convert_s": data.convert_s},
        "rows": rows,
        "amplification": amp,
        "memory": memory,
    }
    if optional:
        _run_optional(
            results,
            root=root,
            quick=quick,
            n_images=n_images,
            workers=workers,
            batch_size=batch_size,
            codecs=codecs,
        )
    results["elapsed_s"] = time.perf_counter() - start
    results["checks"] = checks(results)
    return results


def _run_optional(
    results: dict[str, Any],
    *,
    root: str | Path,
    quick: bool,
    n_images: int,
    workers: int,
    batch_size: int,
    codecs: bool,
) -> None:
    print("  core measurements done; other modules' benchmarks next", file=sys.stderr)
    small = max(256, n_images // 4) if quick else n_images
    # bench_convert makes its own JPEGs (224-256 px and 64-128 px) and reports images/s of
    # convert_images against a bare Pillow decode on the same cores, and its own targets
    results["convert"] = _optional("bench_convert", quick, workers=workers)
    results["transport"] = _optional(
        "bench_transport",
        quick,
        root=root,
        num_samples=small,
        batch_size=batch_size,
        num_workers=workers,
        epochs=1 if quick else 2,
    )
    results["patches"] = _optional("bench_patches", quick, root=root)
    # where one epoch's time goes, stage by stage (file read ... consumer)
    results["read_profile"] = _optional(
        "bench_read_profile", quick, root=root, workers=workers, batch_size=batch_size
    )
    if codecs:
        results["codecs"] = _optional(
            "bench_codecs", quick, n_images=min(n_images, 2048), root=str(Path(root) / "codecs")
        )
    # its own small dataset (the digits) and batch size 64: what training parity is judged on
    results["training"] = _optional("bench_training", quick, workers=workers)
    # training inputs at 224 px: RandomResizedCrop + flip epochs, chunkio raw / jpeg against an
    # ImageFolder + Pillow loader (same workers), storage per field; and the decoders
    results["images"] = _optional(
        "bench_images", quick, workers=workers, root=str(Path(root) / "images")
    )
    results["decoders"] = _optional("bench_decoders", quick)
    # a user's own h5py file and zarr-python store, read in place, against a naive per-sample
    # Dataset and chunkio on a converted copy (and label mixing on a label-sorted store)
    results["foreign"] = _optional("bench_foreign", quick)
    # a gzip-chunked h5py file larger than the memory the conversion may use (1.2 GiB; quick:
    # 256 MiB), converted shuffled and in order by 2 workers: time and peak tree RSS
    results["convert_arrays"] = _optional("bench_convert_arrays", quick, root=root)
    results["mixing"] = _optional(
        "bench_mixing", quick, workers=max(workers, 1), root=str(Path(root) / "mixing")
    )
    # windows t-1, t + t+1 on an ERA5-like xarray store (1 and 24 steps per chunk): chunkio
    # against a per-sample zarr-python Dataset, xbatcher and insitubatch (Python 3.12 venv)
    results["windows"] = _optional("bench_windows", quick)
    # single-cell: a 200k-cell sorted h5ad (CSR X, categorical cell types) through a per-cell
    # backed read, AnnLoader, scDataset, annbatch (Python 3.12 venv) and chunkio
    results["singlecell"] = _optional("bench_singlecell", quick, root=root, workers=workers)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small dataset, short budgets, 3 epochs")
    p.add_argument("--root", default="bench-data", help="working folder (default bench-data)")
    p.add_argument("--out", default=str(RESULTS), help="results folder")
    p.add_argument("--images", type=int, help="JPEGs to make (default 8192; quick 2048)")
    p.add_argument("--workers", type=int, default=min(2, bench_loaders.cores()))
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--budget", type=float, help="seconds per naive loader (10; quick 3)")
    p.add_argument("--epochs", type=int, help="memory soak epochs (20; quick 3)")
    p.add_argument("--no-codecs", action="store_true", help="skip the codec sweep")
    args = p.parse_args(argv)
    quick = bool(args.quick)
    results = run(
        root=args.root,
        quick=quick,
        n_images=args.images or (2048 if quick else 8192),
        workers=args.workers,
        batch_size=args.batch_size,
        budget_s=args.budget or (3.0 if quick else 10.0),
        epochs=args.epochs or (3 if quick else 20),
        codecs=not (quick or args.no_codecs),
    )
    print(write_report(results, args.out))


if __name__ == "__main__":
    main()
