"""Conversion throughput: ``convert_images`` against a bare Pillow decode loop, same files.

The data: ``n_images`` JPEGs of 64x64 .. 128x128 pixels (random crops of scikit-learn's two
sample photographs) in 4 class folders under ``/tmp/chunkio-bench-convert``. Both contenders
use ``workers`` processes:

``pillow``
    ``open -> ImageOps.exif_transpose -> convert("RGB") -> np.asarray`` over every file in a
    process pool (pool start-up included): the decode cost alone, the floor for any converter.
``convert_images``
    The full conversion (scan, check pass, decode, compress, checksum, write, fsync, publish)
    into a fresh Zarr dataset; the mixed sizes make ``image`` ragged, so nothing is resized.
    By default it decides itself whether process pools pay off (``POOL_MIN_SECONDS``).
``convert_images_pooled``
    The same with the pools forced on (``POOL_MIN_SECONDS = 0``): ``workers`` processes in
    both passes, whatever the job size.
``check_vs_decode``
    In one process: the check pass per file (JPEG decoded at 1/8 scale) over a full decode.

    python -m benchmarks.bench_convert [--images 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

__all__ = ["make_mixed_jpegs", "run"]

ROOT = Path("/tmp/chunkio-bench-convert")


def make_mixed_jpegs(root: Path, *, n_images: int, seed: int = 0) -> list[str]:
    """Write ``n_images`` JPEGs of 64..128 px per side into ``root/class_k``; reuse if present."""
    stamp = root / ".complete"
    if not (stamp.exists() and stamp.read_text() == f"{n_images} {seed}"):
        from sklearn.datasets import load_sample_images

        shutil.rmtree(root, ignore_errors=True)
        photos = [np.asarray(im) for im in load_sample_images().images]
        rng = np.random.default_rng(seed)
        for i in range(n_images):
            photo = photos[i % len(photos)]
            h, w = (int(v) for v in rng.integers(64, 129, size=2))
            y = int(rng.integers(0, photo.shape[0] - h))
            x = int(rng.integers(0, photo.shape[1] - w))
            folder = root / f"class_{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(photo[y : y + h, x : x + w]).save(folder / f"{i:06d}.jpg", quality=90)
        stamp.write_text(f"{n_images} {seed}")
    return sorted(str(p) for p in root.glob("class_*/*.jpg"))


def _bare_decode(paths: list[str]) -> int:
    pixels = 0
    for path in paths:
        with Image.open(path) as im:
            arr = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        pixels += arr.size
    return pixels


def _pillow_loop(paths: list[str], workers: int) -> float:
    step = max(1, len(paths) // (8 * workers))
    parts = [paths[i : i + step] for i in range(0, len(paths), step)]
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        sum(pool.map(_bare_decode, parts))
    return time.perf_counter() - start


def _convert(root: Path, dst: Path, workers: int, **kw: Any) -> tuple[float, float]:
    from chunkio.convert.images import convert_images

    shutil.rmtree(dst, ignore_errors=True)
    start = time.perf_counter()
    result = convert_images(root, dst, workers=workers, progress=False, **kw)
    total = time.perf_counter() - start
    return total, result.seconds


def _check_vs_decode(paths: list[str]) -> float:
    from chunkio.convert.decode import DecodePolicy, probe_image

    start = time.perf_counter()
    for path in paths:
        probe_image(path, DecodePolicy())
    check = time.perf_counter() - start
    start = time.perf_counter()
    _bare_decode(paths)
    return check / (time.perf_counter() - start)


def run(n_images: int = 2000, workers: int = 2) -> dict[str, Any]:
    """Measure the contenders back to back; return images/s and seconds for each."""
    from chunkio.convert import image_check

    root = ROOT / "images"
    paths = make_mixed_jpegs(root, n_images=n_images)
    n = len(paths)
    pillow_s = _pillow_loop(paths, workers)
    auto_s, auto_write_s = _convert(root, ROOT / "auto.zarr", workers)
    saved = image_check.POOL_MIN_SECONDS
    image_check.POOL_MIN_SECONDS = 0.0
    try:
        pooled_s, pooled_write_s = _convert(root, ROOT / "pooled.zarr", workers)
    finally:
        image_check.POOL_MIN_SECONDS = saved
    ratio = _check_vs_decode(paths[: min(n, 500)])
    return {
        "n_images": n,
        "workers": workers,
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "pillow_images_per_s": round(n / pillow_s, 1),
        "convert_images_per_s": round(n / auto_s, 1),
        "convert_pooled_images_per_s": round(n / pooled_s, 1),
        "pillow_s": round(pillow_s, 3),
        "convert_s": round(auto_s, 3),
        "convert_check_s": round(auto_s - auto_write_s, 3),
        "convert_write_s": round(auto_write_s, 3),
        "convert_pooled_s": round(pooled_s, 3),
        "convert_pooled_check_s": round(pooled_s - pooled_write_s, 3),
        "convert_pooled_write_s": round(pooled_write_s, 3),
        "check_vs_decode": round(ratio, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run(args.images, args.workers), indent=2))


if __name__ == "__main__":
    main()
