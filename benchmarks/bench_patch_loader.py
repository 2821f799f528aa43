"""Patches through ``make_loader``: the shared-memory ring against the DataLoader route.

One :class:`~chunkio.patches.RandomPatchSampler` order of a converted volume dataset (64^3
chunks), read by ``make_loader(PatchDataset(...), batch_size, num_workers=2)`` on

``ring``
    ``Workers(transport="ring")`` (the default): both workers read their half of every batch
    straight into a preallocated shared-memory slot.
``dataloader``
    ``Workers(transport="dataloader")``: a torch DataLoader over the same patches (each worker
    reads whole batches; every batch travels through a fresh shared-memory segment).

for 64^3 and 96^3 patches of uint8 and int16 volumes. Epochs are interleaved (one untimed
warm-up each, then ``epochs`` rounds; the median is reported). Workers are not persistent, so
the CPU seconds of each epoch (this process and its exited workers, ``getrusage``) include
theirs; the consumer reads every voxel of each batch once (``max``), as a copy to a device would.

Run ``python -m benchmarks.bench_patch_loader`` (``--help`` for sizes); :func:`run` returns the
figures.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import chunkio
from chunkio.patches import PatchDataset, RandomPatchSampler

__all__ = ["make_dataset", "run"]

ROUTES = ("ring", "dataloader")


def make_dataset(root: Path, *, dtype: str, size: int, count: int, seed: int = 0) -> str:
    """``count`` smooth ``size``^3 volumes of ``dtype`` (CT-like: structure plus noise),
    converted with 64^3 chunks; the dataset's path."""
    from scipy.ndimage import zoom

    rng = np.random.default_rng(seed)
    top = np.iinfo(np.dtype(dtype)).max
    files = []
    for i in range(count):
        coarse = rng.random((size // 16,) * 3).astype(np.float32)
        field = zoom(coarse, 16, order=1)[:size, :size, :size]
        noisy = field * 0.8 * top + rng.normal(0, 0.02 * top, field.shape)
        files.append(str(root / f"{dtype}-{i}.npy"))
        np.save(files[-1], np.clip(noisy, 0, top).astype(dtype))
    path = root / f"volumes-{dtype}-{size}.zarr"
    chunkio.convert_volumes(
        files,
        str(path),
        output=chunkio.Output(chunks=64),
        execution=chunkio.Execution(overwrite=True, progress=False),
    )
    return str(path)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # workers that exited
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _epoch(loader: Any) -> tuple[int, float, float]:
    """Patches, wall seconds and CPU seconds of one pass."""
    n, cpu, start = 0, _cpu_s(), time.perf_counter()
    for batch in loader:
        batch["image"].max()  # the consumer reads the batch once
        n += len(batch["origin"])
    return n, time.perf_counter() - start, _cpu_s() - cpu


def _case(path: str, patch: int, args: dict[str, Any]) -> dict[str, Any]:
    sampler = RandomPatchSampler(args["num_patches"], seed=0)
    ds = PatchDataset(path, (patch,) * 3, sampler=sampler, cache_bytes=args["cache_bytes"])
    loaders = {
        route: chunkio.make_loader(
            ds,
            args["batch_size"],
            num_workers=args["num_workers"],
            workers=chunkio.Workers(transport=route, persistent=False),
        )
        for route in ROUTES
    }
    rounds: dict[str, list[tuple[int, float, float]]] = {r: [] for r in ROUTES}
    try:
        for loader in loaders.values():
            loader.set_epoch(0)
            _epoch(loader)  # warm-up: page cache, imports
        for _ in range(args["epochs"]):
            for route, loader in loaders.items():
                loader.set_epoch(0)  # the same patches every round, on both routes
                rounds[route].append(_epoch(loader))
    finally:
        for loader in loaders.values():
            loader.close()
    out: dict[str, Any] = {}
    for route, got in rounds.items():
        out[f"{route}_patches_per_s"] = float(np.median([n / wall for n, wall, _ in got]))
        out[f"{route}_cpu_s"] = float(np.median([cpu for _, _, cpu in got]))
    out["speedup"] = out["ring_patches_per_s"] / out["dataloader_patches_per_s"]
    out["cpu_ratio"] = out["dataloader_cpu_s"] / out["ring_cpu_s"]
    return out


def run(
    *,
    root: str | Path | None = None,
    size: int = 192,
    count: int = 3,
    patch_sizes: tuple[int, ...] = (64, 96),
    dtypes: tuple[str, ...] = ("uint8", "int16"),
    num_patches: int = 240,
    batch_size: int = 4,
    num_workers: int = 2,
    cache_bytes: int = 64 << 20,
    epochs: int = 3,
) -> dict[str, Any]:
    """Patches/s and CPU seconds per epoch of both routes for every (dtype, patch size).

    Returns ``{"settings": {...}, "cases": [{"dtype", "patch", "ring_patches_per_s",
    "dataloader_patches_per_s", "speedup", "ring_cpu_s", "dataloader_cpu_s", "cpu_ratio"}]}``.
    """
    workdir = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="bench-patchload-"))
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {
        "volumes": f"{count} x {size}^3",
        "chunks": 64,
        "num_patches": num_patches,
        "batch_size": batch_size,
        "num_workers": num_workers,
        "cache_bytes": cache_bytes,
        "rounds": epochs,
    }
    args = {**settings, "epochs": epochs}
    cases = []
    for dtype in dtypes:
        path = make_dataset(workdir, dtype=dtype, size=size, count=count)
        for patch in patch_sizes:
            cases.append({"dtype": dtype, "patch": patch, **_case(path, patch, args)})
    return {"settings": settings, "cases": cases}


def _table(result: dict[str, Any]) -> str:
    head = (
        "| volumes | patch | ring patches/s | DataLoader patches/s | ring / DataLoader "
        "| CPU-s ring | CPU-s DataLoader | CPU DataLoader / ring |"
    )
    lines = [head, "|" + "---|" * 8]
    for c in result["cases"]:
        lines.append(
            f"| {c['dtype']} | {c['patch']}^3 | {c['ring_patches_per_s']:.0f} | "
            f"{c['dataloader_patches_per_s']:.0f} | {c['speedup']:.2f}x | "
            f"{c['ring_cpu_s']:.2f} | {c['dataloader_cpu_s']:.2f} | {c['cpu_ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=192, help="volume side (voxels)")
    p.add_argument("--volumes", type=int, default=3)
    p.add_argument("--patches", type=int, default=240, help="patches per epoch")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3, help="timed rounds per route")
    args = p.parse_args(argv)
    out = run(
        size=args.size,
        count=args.volumes,
        num_patches=args.patches,
        batch_size=args.batch_size,
        num_workers=args.workers,
        epochs=args.epochs,
    )
    print(out["settings"])
    print(_table(out))


if __name__ == "__main__":
    main()
