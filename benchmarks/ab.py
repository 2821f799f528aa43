"""A/B: the same workloads under two source trees of chunkio, interleaved, as ratios.

For a refactor that must not slow anything down: each workload runs in a fresh interpreter
whose ``PYTHONPATH`` puts one tree's ``chunkio`` first, alternating A, B, A, B, ...; each side
keeps its best time, and the table gives B/A (above 1: B is faster). Both trees convert their
own copy of the data, so conversion is compared too. Only public API both trees have is used.

    git worktree add /tmp/old <commit>
    python -m benchmarks.ab --a /tmp/old --b . [--rounds 3] [--images 1500]

Workloads: ``convert_images`` of natural-image JPEGs (3x96x96, class folders; ``--size 224``:
bench_images' 224-px natural set) to Zarr, Zarr with JPEG-encoded images, and HDF5;
3 epochs of ``make_loader`` with ``RandomResizedCrop(224) + RandomHorizontalFlip`` (batch 128)
on the JPEG field with 0 and 2 workers;
10 shuffled epochs of ``make_loader`` (batch 256) with 0 and 2 workers on each; passes of
consecutive batches through ``ChunkDataset.read_batch`` with no chunk cache (each pass decodes
every chunk), on the converted data (LZ4) and on a copy written with gzip (h5py's default
filter).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["main", "run"]

#: what one child measures: (name, Python source printing one JSON float, seconds or rate)
_SETUP = """
import json, sys, time
import numpy as np
import chunkio
root, images = sys.argv[1], sys.argv[2]
# the option objects where the tree has them (the keywords they replaced warn), else keywords
if hasattr(chunkio, "Execution"):
    QUIET = {"execution": chunkio.Execution(progress=False, overwrite=True)}
    GZIP = {**QUIET, "output": chunkio.Output(compression="gzip")}
    JPEG = {**QUIET, "images": chunkio.ImageOptions(encoding="jpeg", quality=90)}
else:
    QUIET = {"progress": False, "overwrite": True}
    GZIP = {**QUIET, "compression": "gzip"}
    JPEG = {**QUIET, "encoding": "jpeg", "quality": 90}
"""

WORKLOADS: dict[str, tuple[str, str]] = {
    "convert_images zarr (s)": (
        "lower",
        "t=time.perf_counter(); chunkio.convert_images(images, root+'/d.zarr', **QUIET); "
        "print(json.dumps(time.perf_counter()-t))",
    ),
    "convert_images jpeg zarr (s)": (
        "lower",
        "t=time.perf_counter(); chunkio.convert_images(images, root+'/j.zarr', **JPEG); "
        "print(json.dumps(time.perf_counter()-t))",
    ),
    **{
        f"make_loader jpeg RandomResizedCrop+flip {w} workers (samples/s)": (
            "higher",
            "from chunkio.transforms import Compose, RandomResizedCrop, RandomHorizontalFlip\n"
            "tf=Compose([RandomResizedCrop(224), RandomHorizontalFlip()])\n"
            f"loader=chunkio.make_loader(root+'/j.zarr', 128, fields=['image','label'], "
            f"num_workers={w}, seed=0, transform=tf)\n"
            "n=sum(len(y) for _, y in loader)\n"
            "t=time.perf_counter(); n=sum(len(y) for _ in range(3) for _, y in loader); "
            "print(json.dumps(n/(time.perf_counter()-t)))",
        )
        for w in (0, 2)
    },
    "convert_images hdf5 (s)": (
        "lower",
        "t=time.perf_counter(); chunkio.convert_images(images, root+'/d.h5', **QUIET); "
        "print(json.dumps(time.perf_counter()-t))",
    ),
    **{
        f"make_loader {fmt} {w} workers (samples/s)": (
            "higher",
            f"loader=chunkio.make_loader(root+'/d.{fmt}', 256, fields=['image','label'], "
            f"num_workers={w}, seed=0)\n"
            "n=sum(len(y) for _, y in loader)\n"
            "t=time.perf_counter(); n=sum(len(y) for _ in range(10) for _, y in loader); "
            "print(json.dumps(n/(time.perf_counter()-t)))",
        )
        for fmt in ("zarr", "h5")
        for w in (0, 2)
    },
    **{
        f"read_batch {kind} {fmt} (samples/s)": (
            "higher",
            (
                f"src=chunkio.ChunkDataset(root+'/d.{fmt}', fields=['image'])\n"
                "x=src.read_batch(list(range(len(src))))['image']\n"
                f"chunkio.write_arrays(root+'/g.{fmt}', {{'image': x}}, shuffle=False, **GZIP)\n"
                if kind == "gzip"
                else ""
            )
            + f"ds=chunkio.ChunkDataset(root+'/{'g' if kind == 'gzip' else 'd'}.{fmt}', "
            "fields=['image'], cache_bytes=0)\n"
            "n=len(ds); passes=5\n"
            "ds.read_batch(list(range(min(n, 256))))\n"
            "t=time.perf_counter()\n"
            "for _ in range(passes):\n"
            "    for i in range(0, n, 256): ds.read_batch(list(range(i, min(n, i+256))))\n"
            "print(json.dumps(passes*n/(time.perf_counter()-t)))",
        )
        for kind in ("lz4", "gzip")
        for fmt in ("zarr", "h5")
    },
}


#: the child's last line: where its chunkio came from (checked against the tree)
_WHICH = "\nimport os; print(os.path.dirname(chunkio.__file__))"


def _child(tree: Path, root: Path, images: Path, code: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    out = subprocess.run(
        [sys.executable, "-c", _SETUP + code + _WHICH, str(root), str(images)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=root,  # not the caller's folder: "python -c" puts the cwd before PYTHONPATH
    )
    used = Path(out.stdout.strip().splitlines()[-1])
    if used.resolve() != (tree / "chunkio").resolve():
        raise RuntimeError(f"the child imported chunkio from {used}, not from {tree}")
    return float(json.loads(out.stdout.strip().splitlines()[-2]))


def run(
    a: Path, b: Path, *, rounds: int = 3, images: int = 1500, only: str = "", size: int = 96
) -> list[dict[str, Any]]:
    from benchmarks.data import make_jpeg_folder, make_natural_folder

    with tempfile.TemporaryDirectory() as tmp:
        if size == 96:
            folder = make_jpeg_folder(Path(tmp) / "jpegs", n_images=images)
        else:  # bench_images' natural photos (224: its 224-px set)
            folder = make_natural_folder(Path(tmp) / "jpegs", n_images=images, size=size)
        roots = {"a": Path(tmp) / "a", "b": Path(tmp) / "b"}
        for r in roots.values():
            r.mkdir()
        trees = {"a": a, "b": b}
        rows = []
        for name, (better, code) in WORKLOADS.items():
            if only not in name and not name.startswith("convert"):  # the data comes first
                continue
            got: dict[str, list[float]] = {"a": [], "b": []}
            for _ in range(rounds):
                for side in ("a", "b"):
                    got[side].append(_child(trees[side], roots[side], folder, code))
            pick = min if better == "lower" else max
            best_a, best_b = pick(got["a"]), pick(got["b"])
            ratio = best_a / best_b if better == "lower" else best_b / best_a
            rows.append({"workload": name, "a": best_a, "b": best_b, "b_over_a": ratio})
            print(f"{name}: A {best_a:,.3f}  B {best_b:,.3f}  B/A {ratio:.2f}", flush=True)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--a", type=Path, required=True, help="the reference tree")
    parser.add_argument("--b", type=Path, default=Path("."), help="the tree under test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--only", default="", help="run the workloads whose name contains this")
    parser.add_argument(
        "--size", type=int, default=96, help="image side (96; else bench_images' natural set)"
    )
    args = parser.parse_args()
    rows = run(
        args.a, args.b, rounds=args.rounds, images=args.images, only=args.only, size=args.size
    )
    print("\n| workload | A | B | B/A (above 1: B faster) |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['a']:,.3f} | {r['b']:,.3f} | {r['b_over_a']:.2f} |")


if __name__ == "__main__":
    main()
