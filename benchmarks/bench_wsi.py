"""A whole-slide image read as 2-D patches: time and peak memory on a 20k x 20k slide.

Writes an OME-Zarr 0.5 slide (Zarr v3, axes ``c, y, x``, 3 x side x side uint8: 1.2 GB at
20,000) with zarr-python, one 512 x 512 chunk at a time (never whole in memory): "tissue"
(a pattern that depends on every voxel's position) inside an ellipse, a constant background
(240) outside, as slides are; a tissue mask at 1/32 of the slide (``masks/tissue``, a plain
array, placed by its shape) and a full-resolution label image ``labels/tissue`` (1 in the
tissue, 2 in a small "tumour" disc; background chunks not written, as Zarr skips fill-value
chunks).

Each measure runs in a fresh process and reports the time to build the
:class:`~chunkio.patches.PatchDataset` and to read its first 100 patches of 256 x 256 (5
batches of 20), and the process's peak RSS (``ru_maxrss``) against its RSS after imports:

* ``random``: ``RandomPatchSampler`` with the tissue mask;
* ``grid``: ``GridSampler`` (no overlap) with the tissue mask;
* ``balanced``: ``LabelBalancedSampler`` on the label image (its label index is built by
  reading the label image a row of chunks at a time);
* ``stitch`` (``--stitch``): every masked grid patch through an identity "model" and
  :func:`~chunkio.patches.stitch` into a Zarr array on disk (all of the tissue read once).

``--check`` compares every patch read with zarr-python's slice of the store (and the
stitched array with the slide, in the tissue). The slide is written under ``--dir`` (a
temporary folder by default) and deleted afterwards.

    python -m benchmarks.bench_wsi [--side 20000] [--measures random grid balanced]
        [--stitch] [--check] [--dir /tmp] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["measure", "slide_block", "write_slide"]

CHUNK = 512
PATCH = (256, 256)
#: mask voxels per slide voxel, per axis
MASK_FACTOR = 32
SPACING = 0.25  # micrometres per pixel, as a 40x scan
MEASURES = ("random", "grid", "balanced")


def _tissue(yy: np.ndarray, xx: np.ndarray, side: int) -> np.ndarray:
    """Whether each position is in the slide's tissue: an ellipse around the centre."""
    c = side / 2
    return ((yy - c) / (0.42 * side)) ** 2 + ((xx - c) / (0.3 * side)) ** 2 <= 1


def slide_block(side: int, y0: int, y1: int, x0: int, x1: int) -> tuple[np.ndarray, np.ndarray]:
    """The slide's ``(3, y1 - y0, x1 - x0)`` pixels there, and its labels."""
    yy, xx = np.meshgrid(np.arange(y0, y1), np.arange(x0, x1), indexing="ij")
    tissue = _tissue(yy, xx, side)
    channel = np.arange(3).reshape(3, 1, 1)
    pattern = (yy // 3 + xx // 5 + 40 * channel + (yy * 7 + xx) % 11) % 200
    image = np.where(tissue, pattern, 240).astype(np.uint8)
    label = tissue.astype(np.uint8)
    tumour = (yy - side * 0.4) ** 2 + (xx - side * 0.45) ** 2 <= (side * 0.04) ** 2
    label[tumour & tissue] = 2
    return image, label


def _multiscale(axes: list[dict[str, str]], scale: list[float]) -> dict[str, Any]:
    return {
        "version": "0.5",
        "multiscales": [
            {
                "axes": axes,
                "datasets": [
                    {"path": "s0", "coordinateTransformations": [{"type": "scale", "scale": scale}]}
                ],
            }
        ],
    }


def write_slide(path: Path, side: int) -> Path:
    """The OME-Zarr slide described in the module docstring, written chunk by chunk."""
    import zarr

    space = [{"name": a, "type": "space", "unit": "micrometer"} for a in "yx"]
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.attrs["ome"] = _multiscale(
        [{"name": "c", "type": "channel"}, *space], [1.0, SPACING, SPACING]
    )
    image = root.create_array("s0", shape=(3, side, side), chunks=(3, CHUNK, CHUNK), dtype="u1")
    labels = root.create_group("labels")
    labels.attrs["ome"] = {"version": "0.5", "labels": ["tissue"]}
    seg = labels.create_group("tissue")
    seg.attrs["ome"] = {**_multiscale(space, [SPACING, SPACING]), "image-label": {}}
    label = seg.create_array("s0", shape=(side, side), chunks=(CHUNK, CHUNK), dtype="u1")
    for y0 in range(0, side, CHUNK):
        for x0 in range(0, side, CHUNK):
            y1, x1 = min(y0 + CHUNK, side), min(x0 + CHUNK, side)
            block, lab = slide_block(side, y0, y1, x0, x1)
            image[:, y0:y1, x0:x1] = block
            if lab.any():  # background chunks stay unwritten: the fill value
                label[y0:y1, x0:x1] = lab
    m = -(-side // MASK_FACTOR)
    centres = (np.arange(m) + 0.5) * side / m
    yy, xx = np.meshgrid(centres, centres, indexing="ij")
    root.create_array("masks/tissue", data=_tissue(yy, xx, side).astype(np.uint8))
    return path


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(slide: Path, name: str, *, check: bool, out_dir: Path) -> dict[str, Any]:
    """One measure (run in a fresh process: the peak RSS is the process's)."""
    import zarr

    from chunkio.patches import (
        GridSampler,
        LabelBalancedSampler,
        PatchDataset,
        RandomPatchSampler,
        stitch,
    )

    base = _rss_mb()
    t0 = time.perf_counter()
    if name == "balanced":
        sampler: Any = LabelBalancedSampler(1000, foreground=0.5, seed=0)
        ds = PatchDataset(slide, PATCH, sampler=sampler)
    else:
        sampler = RandomPatchSampler(1000, seed=0) if name == "random" else GridSampler()
        if name == "stitch":
            sampler = GridSampler()
        ds = PatchDataset(slide, PATCH, mask="masks/tissue", fields=["image"], sampler=sampler)
    built = time.perf_counter() - t0
    keys = ds.sampler.keys()
    image = zarr.open_array(str(slide / "s0"), mode="r")
    checked = 0
    t1 = time.perf_counter()
    if name == "stitch":
        out = zarr.open_array(
            str(out_dir / "stitched.zarr"), mode="w", shape=(1, *image.shape),
            chunks=(1, 3, CHUNK, CHUNK), dtype="u1",
        )  # fmt: skip

        def predictions() -> Any:
            for i in range(0, len(keys), 20):
                got = ds.read_patches(keys[i : i + 20])
                yield got["volume"], got["origin"], got["image"]  # the identity "model"

        stitch(predictions(), out, ds.sampler)
        if check:  # every stitched patch box equals the slide there
            for v, y, x in keys[:: max(1, len(keys) // 200)].tolist():
                box = (slice(None), slice(y, y + PATCH[0]), slice(x, x + PATCH[1]))
                np.testing.assert_array_equal(out[(v, *box)], image[box])
                checked += 1
        n = len(keys)
    else:
        n = min(100, len(keys))
        for i in range(0, n, 20):
            got = ds.read_patches(keys[i : min(i + 20, n)])
            if check:
                for b, (y, x) in enumerate(got["origin"].tolist()):
                    box = (slice(y, y + PATCH[0]), slice(x, x + PATCH[1]))
                    np.testing.assert_array_equal(got["image"][b], image[(slice(None), *box)])
                    checked += 1
    read = time.perf_counter() - t1
    return {
        "measure": name,
        "side": int(image.shape[-1]),
        "keys": len(keys),
        "patches": n,
        "build_s": round(built, 3),
        "read_s": round(read, 3),
        "rss_after_imports_mb": round(base, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
        "checked": checked,
    }


def run(side: int, measures: list[str], *, check: bool, folder: Path) -> list[dict[str, Any]]:
    """Write the slide under ``folder``, run each measure in a fresh process, delete it."""
    slide = folder / "slide.ome.zarr"
    t0 = time.perf_counter()
    write_slide(slide, side)
    print(f"slide {side} x {side} x 3 written in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    try:
        for name in measures:
            cmd = [sys.executable, "-m", "benchmarks.bench_wsi", "--measure", name]
            cmd += ["--slide", str(slide), "--dir", str(folder)] + (["--check"] if check else [])
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"measure {name} failed:\n{done.stderr}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(slide, ignore_errors=True)
        shutil.rmtree(folder / "stitched.zarr", ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", type=int, default=20000)
    p.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES))
    p.add_argument("--stitch", action="store_true", help="also stitch the masked grid")
    p.add_argument("--check", action="store_true", help="compare every patch with zarr's")
    p.add_argument("--dir", type=Path, default=None, help="where the slide is written")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--measure", help=argparse.SUPPRESS)  # one measure, in this process
    p.add_argument("--slide", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        row = measure(args.slide, args.measure, check=args.check, out_dir=args.dir)
        print(json.dumps(row))
        return
    measures = [*args.measures, *(["stitch"] if args.stitch else [])]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-wsi-") as tmp:
        rows = run(args.side, measures, check=args.check, folder=Path(tmp))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
