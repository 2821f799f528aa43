"""2-D whole-slide patches: chunkio's ``PatchDataset`` vs zarrdataset on one OME-Zarr slide.

A synthetic RGB slide (``--size`` pixels a side, uint8, OME-Zarr 0.4 on Zarr v2, ``cyx`` in
chunks of 3 x ``--chunk``^2, zarr's default Blosc-LZ4), written chunk row by chunk row: white
background and textured "tissue" blobs, with a tissue mask at 1/``MASK_STEP`` scale
(``masks/tissue``). Side by side in one run, each row in its own process with 2 DataLoader
workers, ``--patches`` patches of ``--patch``^2 after the untimed warm-up batches
(:data:`~benchmarks.patch_peers.WARMUP_BATCHES`):

* ``chunkio``: ``PatchDataset(slide, (p, p), mask="masks/tissue")`` with a shuffled
  ``GridSampler`` (the chunk-aligned grid zarrdataset draws) and a ``RandomPatchSampler``,
  ``DataLoader(ds, sampler=ds.sampler, ..., collate_fn=chunkio.collate)``, and the grid
  again through ``chunkio.make_loader(ds, batch, num_workers=2)`` (the shared-memory ring);
* ``zarrdataset``: ``ZarrDataset([ImagesDatasetSpecs(source_axes="CYX"),
  MasksDatasetSpecs(source_axes="YX")], PatchSampler(p, spatial_axes="YX"), shuffle=True)``
  as its whole-slide example, in its own venv (see :mod:`benchmarks.patch_peers`).

Reported as :mod:`benchmarks.bench_patch_peers` reports (its table): patches/s, per
CPU-second of the process tree, read amplification (chunkio's count; zarrdataset's chunks
touched per patch, an upper bound).

    python -m benchmarks.bench_patch_slide [--quick] [--size 20480] [--chunk 512] [--patch 256]
                                           [--patches 512] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_patch_peers import WORKERS, _ours, _peer, _rates, table
from benchmarks.patch_peers import WARMUP_BATCHES, measure

__all__ = ["make_slide", "run", "run_row"]

#: the tissue mask's downsampling factor (one mask pixel per MASK_STEP^2 slide pixels)
MASK_STEP = 64
BATCH = 16
QUICK = {"size": 1024, "chunk": 128, "patch": 64, "patches": 64}


def tissue_mask(size: int, seed: int = 0) -> np.ndarray:
    """``(size // MASK_STEP)^2`` bool: a few elliptical blobs, about a third of the slide."""
    s = size // MASK_STEP
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:s, 0:s] / s
    mask = np.zeros((s, s), bool)
    for cy, cx, ry, rx in rng.uniform((0.25, 0.25, 0.12, 0.12), (0.75, 0.75, 0.25, 0.25), (4, 4)):
        mask |= ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 < 1
    return mask


def make_slide(path: Path, *, size: int, chunk: int, seed: int = 0) -> dict[str, Any]:
    """Write the slide chunk row by chunk row (never whole in memory); its path and bytes."""
    import zarr

    if size % chunk or chunk % MASK_STEP:
        raise ValueError(f"size must be a multiple of chunk, chunk of {MASK_STEP}")
    mask = tissue_mask(size, seed)
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    axes = [{"name": "c", "type": "channel"}] + [
        {"name": a, "type": "space", "unit": "micrometer"} for a in "yx"
    ]
    level = {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}
    root.attrs["multiscales"] = [
        {"version": "0.4", "name": "slide", "axes": axes, "datasets": [level]}
    ]
    image = root.create_array("0", shape=(3, size, size), dtype="uint8",
                              chunks=(3, chunk, chunk))  # fmt: skip
    rng = np.random.default_rng(seed)
    colour = np.array([200, 120, 170], np.int16)[:, None, None]  # H&E-ish pink
    for top in range(0, size, chunk):
        rows = mask[top // MASK_STEP : (top + chunk) // MASK_STEP]
        inside = np.repeat(np.repeat(rows, MASK_STEP, 0), MASK_STEP, 1)
        texture = rng.integers(-40, 40, (3, chunk, size), dtype=np.int16)
        stripe = np.where(inside, colour + texture, 255).astype(np.uint8)
        image[:, top : top + chunk] = stripe
    root.create_group("masks").create_array("tissue", data=mask.astype(np.uint8))
    stored = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"ome_stores": [str(path)], "stored_bytes": stored, "tissue": float(mask.mean())}


def run_row(spec: dict[str, Any]) -> dict[str, Any]:
    """chunkio's row on the slide, in this process and its 2 workers."""
    import torch
    from torch.utils.data import DataLoader

    import chunkio
    from benchmarks.bench_patch_peers import _amplification, _timed
    from chunkio.patches import GridSampler, PatchDataset, RandomPatchSampler

    torch.set_num_threads(1)
    n = spec["patches"] + BATCH * (WARMUP_BATCHES + 4)  # warm-up and a margin

    def dataset() -> Any:
        grid = spec["sampler"] == "grid"
        sampler = GridSampler(shuffle=True, seed=0) if grid else RandomPatchSampler(n, seed=0)
        return PatchDataset(spec["ome_stores"][0], (spec["patch"],) * 2, sampler=sampler,
                            mask="masks/tissue")  # fmt: skip

    ds = dataset()
    # before the pass (keys() is what remains): the warm-up's and the timed ones, in order
    keys = ds.sampler.keys()[: BATCH * WARMUP_BATCHES + spec["patches"]]
    if spec.get("route") == "make_loader":  # the ring: workers read into shared memory
        loader: Any = chunkio.make_loader(ds, BATCH, num_workers=WORKERS)
    else:
        loader = DataLoader(ds, sampler=ds.sampler, batch_size=BATCH, num_workers=WORKERS,
                            collate_fn=chunkio.collate, persistent_workers=True)  # fmt: skip
    result = measure(loader, spec["patches"], lambda b: len(b["image"]))
    if callable(getattr(loader, "close", None)):
        loader.close()
    result["read_amplification"] = _amplification(dataset(), _timed(keys, BATCH), batch=BATCH)
    return result


def run(*, size: int = 20480, chunk: int = 512, patch: int = 256, patches: int = 512,
        peers: bool = True, root: str | Path | None = None,
        timeout_s: float = 900) -> dict[str, Any]:  # fmt: skip
    """chunkio's rows and zarrdataset's on one slide (``peers=False``: chunkio's only)."""
    base = Path(root) if root else Path(tempfile.mkdtemp(prefix="chunkio-slide-"))
    try:
        started = time.perf_counter()
        data = make_slide(base / "slide.ome.zarr", size=size, chunk=chunk)
        config = {"size": size, "chunk": chunk, "patch": patch, "patches": patches,
                  "batch": BATCH, "workers": WORKERS, "dtype": "uint8 RGB",
                  "stored_mib": data["stored_bytes"] / 2**20, "tissue": data["tissue"],
                  "data_s": time.perf_counter() - started}  # fmt: skip
        common = {**data, "patch": patch, "chunk": chunk, "patches": patches, "batch": BATCH,
                  "workers": WORKERS, "size": size, "space": "YX"}  # fmt: skip
        rows = []
        for sampler, route in (("grid", ""), ("random", ""), ("grid", "make_loader")):
            r = _ours({**common, "kind": "slide", "sampler": sampler, "route": route},
                      timeout_s, module="benchmarks.bench_patch_slide")  # fmt: skip
            name = f"chunkio OME-Zarr slide, mask, {sampler}" + (f", {route}" if route else "")
            rows.append({"reader": name, "group": "slide", **_rates(r)})
            print(rows[-1], file=sys.stderr)
        if peers:
            r = _peer({**common, "peer": "zarrdataset"}, timeout_s)
            rows.append({"reader": "zarrdataset (WSI, same slide and mask)", "group": "slide",
                         **_rates(r)})  # fmt: skip
            print(rows[-1], file=sys.stderr)
        return {"config": config, "results": rows}
    finally:
        if not root:
            shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--no-peers", action="store_true", help="chunkio's rows only")
    for name, default in (("size", 20480), ("chunk", 512), ("patch", 256), ("patches", 512)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_row(json.loads(args.child))))
        return
    sizes = {k: getattr(args, k) for k in ("size", "chunk", "patch", "patches")}
    result = run(**(QUICK if args.quick else sizes), peers=not args.no_peers)
    print(json.dumps(result["config"]))
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
