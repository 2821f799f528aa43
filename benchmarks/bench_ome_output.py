"""OME-Zarr output: what writing one OME-Zarr image per volume costs against chunkio's own volume
layout, and what the stored label index saves when a labelled dataset is opened.

On the synthetic volumes of :mod:`benchmarks.bench_patches` (smooth int16 "tissue" plus noise,
with labels), side by side in one run, one process each:

* ``convert``: ``convert_volumes`` into a chunkio volume dataset (Zarr) and into OME-Zarr images
  (``Output(ome_zarr=True)``: levels until one fits a chunk, the label image, the index),
  seconds (best of 2) and bytes on disk;
* ``open``: ``PatchDataset(images, patch, sampler=LabelBalancedSampler(...))`` on the OME-Zarr
  images with the label index chunkio stored, and on copies without it (every label volume
  read and indexed when the dataset is made), seconds (best of 3);
* ``read``: patches/s of ``read_patches`` in random order from the chunkio dataset and from the
  OME-Zarr images (best of 3).

    python -m benchmarks.bench_ome_output [--volumes 4] [--size 128] [--chunk 32] [--patch 48]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zarr

from benchmarks.bench_patches import make_volumes
from chunkio import Execution, Output, convert_volumes
from chunkio.patches import LabelBalancedSampler, PatchDataset, RandomPatchSampler

__all__ = ["run"]


def _best(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _without_index(images: list[str], root: Path) -> list[str]:
    """Copies of the images whose ``chunkio`` attribute names no label index."""
    out = []
    for image in images:
        copy = root / os.path.basename(image)
        shutil.copytree(image, copy)
        group = zarr.open_group(str(copy), mode="r+")
        meta = dict(group.attrs["chunkio"])
        meta.pop("label_index")
        group.update_attributes({"chunkio": meta})
        out.append(str(copy))
    return out


def run(volumes: int, size: int, chunk: int, patch: int, patches: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        images, labels = make_volumes(root, count=volumes, size=size)
        quiet = Execution(workers=1, progress=False, overwrite=True)
        plain, ome = root / "plain.zarr", root / "ome.zarr"
        results: dict[str, Any] = {}

        def convert(dst: Path, output: Output) -> Callable[[], Any]:
            return lambda: convert_volumes(
                images, str(dst), labels=labels, output=output, execution=quiet
            )

        results["convert_s"] = {
            "chunkio": _best(convert(plain, Output(chunks=chunk)), 2),
            "ome-zarr": _best(convert(ome, Output(chunks=chunk, ome_zarr=True)), 2),
        }
        results["bytes"] = {"chunkio": _bytes(plain), "ome-zarr": _bytes(ome)}
        made = convert_volumes(
            images,
            str(ome),
            labels=labels,
            output=Output(chunks=chunk, ome_zarr=True),
            execution=Execution(workers=1, progress=False),
        )
        bare = _without_index(list(made.images), root / "bare")
        size3 = (patch,) * 3

        def open_ds(paths: list[str]) -> Callable[[], Any]:
            return lambda: PatchDataset(paths, size3, sampler=LabelBalancedSampler(patches))

        results["open_s"] = {
            "stored index": _best(open_ds(list(made.images)), 3),
            "indexed on open": _best(open_ds(bare), 3),
        }
        rates = {}
        for name, where in (("chunkio", str(plain)), ("ome-zarr", list(made.images))):
            ds = PatchDataset(where, size3, sampler=RandomPatchSampler(patches, seed=0))
            keys = ds.sampler.keys()
            rates[name] = patches / _best(lambda ds=ds, keys=keys: ds.read_patches(keys), 3)
        results["patches_per_s"] = rates
        results["config"] = {"volumes": volumes, "size": size, "chunk": chunk, "patch": patch}
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (
        ("volumes", 4),
        ("size", 128),
        ("chunk", 32),
        ("patch", 48),
        ("patches", 256),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    print(json.dumps(run(args.volumes, args.size, args.chunk, args.patch, args.patches), indent=1))


if __name__ == "__main__":
    main()
