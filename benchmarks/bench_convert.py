"""Conversion throughput: ``convert_images`` against a bare Pillow decode loop, same files.

The data: two sets of JPEGs (random crops of scikit-learn's two sample photographs, quality
90) in 4 class folders under ``/tmp/chunkio-bench-convert``:

``realistic``
    ``n_realistic`` JPEGs of 224x224 .. 256x256 pixels: what models are trained on.
``mixed``
    ``n_images`` JPEGs of 64x64 .. 128x128 pixels: the small end, where opening a file costs
    as much as decoding it.

Sizes differ within a set, so ``image`` is ragged and nothing is resized. Every contender
uses ``workers`` processes; they run back to back, ``repeats`` rounds, and each reports its
best round (the machine is shared: the best round is the least disturbed):

``pillow``
    ``open -> ImageOps.exif_transpose -> convert("RGB") -> np.asarray`` over every file in a
    process pool (pool start-up included): the decode alone. The issue's bar is
    ``convert / pillow >= 0.8``.
``turbo``
    The same files decoded by libjpeg-turbo without Pillow (simplejpeg): what chunkio
    decodes plain JPEGs with (:mod:`chunkio.images.jpeg`), bit-exact with Pillow.
``floor``
    The Pillow decode, then the raw pixels written to files of about 1 MiB, each fsync'd:
    the least that any durable conversion decoding with Pillow does (no compression,
    checksum, layout or atomic publish).
``floor_turbo``
    The same with the ``turbo`` decode: the least that a durable raw conversion does here.
    ``floor_turbo / pillow`` is what this disk leaves of the bar for ``encoding="raw"``.
``convert_images``
    The full conversion (scan, check pass, decode, compress, checksum, write, fsync,
    publish) into a fresh Zarr dataset; it decides itself whether a pool pays off.
``convert_images_pooled``
    The same with the pools forced on (``POOL_MIN_SECONDS = 0``).
``convert_images_jpeg``
    The full conversion with ``encoding="jpeg"``: these JPEGs are not resized, so each file
    is checked by a full libjpeg-turbo decode and stored as it is (no Pillow decode, no
    encode, a tenth of the bytes to write).
``check_vs_decode``, ``thorough_check_vs_decode``
    In one process: the check pass per file (default: headers, end marker; thorough: JPEG
    decoded at 1/8 scale) over a full decode.
``write_arrays``
    ``write_mib`` MiB of in-memory NumPy images with ``workers=1`` and ``workers=workers``,
    side by side (the issue: more workers must never be slower).

    python -m benchmarks.bench_convert [--images 2000] [--realistic 3000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from chunkio import Execution, ImageOptions

__all__ = ["make_mixed_jpegs", "run"]

ROOT = Path("/tmp/chunkio-bench-convert")
#: the issue's bar: conversion throughput over bare decode throughput, same cores
TARGET = 0.8


def make_mixed_jpegs(
    root: Path, *, n_images: int, seed: int = 0, sides: tuple[int, int] = (64, 128)
) -> list[str]:
    """Write ``n_images`` JPEGs of ``sides`` px per side into ``root/class_k``; reuse if present."""
    stamp = root / ".complete"
    key = f"{n_images} {seed} {sides[0]} {sides[1]}"
    if not (stamp.exists() and stamp.read_text() == key):
        from sklearn.datasets import load_sample_images

        shutil.rmtree(root, ignore_errors=True)
        photos = [np.asarray(im) for im in load_sample_images().images]
        rng = np.random.default_rng(seed)
        for i in range(n_images):
            photo = photos[i % len(photos)]
            h, w = (int(v) for v in rng.integers(sides[0], sides[1] + 1, size=2))
            y = int(rng.integers(0, photo.shape[0] - h))
            x = int(rng.integers(0, photo.shape[1] - w))
            folder = root / f"class_{i % 4}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(photo[y : y + h, x : x + w]).save(folder / f"{i:06d}.jpg", quality=90)
        stamp.write_text(key)
    return sorted(str(p) for p in root.glob("class_*/*.jpg"))


def _decoded(path: str) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


def _turbo_decoded(path: str) -> np.ndarray:
    """libjpeg-turbo without Pillow (simplejpeg), as chunkio decodes plain JPEGs."""
    import simplejpeg

    with open(path, "rb") as fh:
        return np.asarray(simplejpeg.decode_jpeg(fh.read(), colorspace="RGB"))


def _bare_decode(paths: list[str]) -> int:
    return sum(_decoded(p).size for p in paths)


def _bare_turbo_decode(paths: list[str]) -> int:
    return sum(_turbo_decoded(p).size for p in paths)


def _decode_and_store(job: tuple[str, list[str], bool]) -> int:
    """Decode (Pillow, or libjpeg-turbo directly), then write the pixels to files of about
    1 MiB, each fsync'd."""
    prefix, paths, turbo = job
    decoded = _turbo_decoded if turbo else _decoded
    pending: list[np.ndarray] = []
    files = 0

    def flush() -> None:
        nonlocal files
        with open(f"{prefix}-{files}", "wb") as fh:
            for arr in pending:
                fh.write(arr.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        files += 1
        pending.clear()

    for path in paths:
        pending.append(decoded(path))
        if sum(a.nbytes for a in pending) >= 1 << 20:
            flush()
    if pending:
        flush()
    return files


def _parts(paths: list[str], workers: int) -> list[list[str]]:
    step = max(1, len(paths) // (8 * workers))
    return [paths[i : i + step] for i in range(0, len(paths), step)]


def _pillow_loop(paths: list[str], workers: int, *, turbo: bool = False) -> float:
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        sum(pool.map(_bare_turbo_decode if turbo else _bare_decode, _parts(paths, workers)))
    return time.perf_counter() - start


def _floor_loop(paths: list[str], workers: int, *, turbo: bool = False) -> float:
    out = ROOT / "floor"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    parts = _parts(paths, workers)
    jobs = [(str(out / f"part{k}"), part, turbo) for k, part in enumerate(parts)]
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        sum(pool.map(_decode_and_store, jobs))
    seconds = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def _convert(
    root: Path, dst: Path, workers: int, *, pooled: bool, encoding: str = "raw"
) -> tuple[float, float]:
    """Seconds of the whole conversion, and of its write pass (``result.seconds``)."""
    from chunkio.convert.engine import workers as pool_policy
    from chunkio.convert.images import convert_images

    shutil.rmtree(dst, ignore_errors=True)
    saved = pool_policy.POOL_MIN_SECONDS
    if pooled:
        pool_policy.POOL_MIN_SECONDS = 0.0
    try:
        start = time.perf_counter()
        result = convert_images(
            root,
            dst,
            images=ImageOptions(encoding=encoding),
            execution=Execution(workers=workers, progress=False),
        )
        total = time.perf_counter() - start
    finally:
        pool_policy.POOL_MIN_SECONDS = saved
        shutil.rmtree(dst, ignore_errors=True)
    return total, result.seconds


def _check_vs_decode(paths: list[str], *, thorough: bool) -> float:
    from chunkio.images.pillow import DecodePolicy, probe_image

    policy = DecodePolicy()
    start = time.perf_counter()
    for path in paths:
        probe_image(path, policy, thorough=thorough)
    check = time.perf_counter() - start
    start = time.perf_counter()
    _bare_decode(paths)
    return check / (time.perf_counter() - start)


Timed = tuple[float, float]  # seconds, and a part of them (or 0.0)


def _best(rounds: int, contenders: dict[str, Callable[[], Timed]]) -> dict[str, Timed]:
    """Each contender's fastest of ``rounds`` rounds, the contenders interleaved."""
    best: dict[str, Timed] = {}
    for _ in range(rounds):
        for name, measure in contenders.items():
            got = measure()
            if name not in best or got[0] < best[name][0]:
                best[name] = got
    return best


def _image_set(
    name: str, root: Path, paths: list[str], workers: int, rounds: int
) -> dict[str, Any]:
    n = len(paths)
    best = _best(
        rounds,
        {
            "pillow": lambda: (_pillow_loop(paths, workers), 0.0),
            "turbo": lambda: (_pillow_loop(paths, workers, turbo=True), 0.0),
            "floor": lambda: (_floor_loop(paths, workers), 0.0),
            "floor_turbo": lambda: (_floor_loop(paths, workers, turbo=True), 0.0),
            "convert": lambda: _convert(root, ROOT / f"{name}.zarr", workers, pooled=False),
            "pooled": lambda: _convert(root, ROOT / f"{name}-pooled.zarr", workers, pooled=True),
            "jpeg": lambda: _convert(
                root, ROOT / f"{name}-jpeg.zarr", workers, pooled=False, encoding="jpeg"
            ),
        },
    )
    pillow, floor, floor_turbo = best["pillow"][0], best["floor"][0], best["floor_turbo"][0]
    (convert, convert_write), (pooled, pooled_write) = best["convert"], best["pooled"]
    sample = paths[:: max(1, n // 400)]
    return {
        "set": name,
        "n_images": n,
        "pillow_images_per_s": round(n / pillow, 1),
        "turbo_images_per_s": round(n / best["turbo"][0], 1),
        "turbo_over_bare_decode": round(pillow / best["turbo"][0], 3),
        "floor_images_per_s": round(n / floor, 1),
        "floor_turbo_images_per_s": round(n / floor_turbo, 1),
        "convert_images_per_s": round(n / convert, 1),
        "convert_pooled_images_per_s": round(n / pooled, 1),
        "convert_jpeg_images_per_s": round(n / best["jpeg"][0], 1),
        "convert_jpeg_over_bare_decode": round(pillow / best["jpeg"][0], 3),
        "convert_over_bare_decode": round(pillow / convert, 3),
        "convert_pooled_over_bare_decode": round(pillow / pooled, 3),
        "floor_over_bare_decode": round(pillow / floor, 3),
        "floor_turbo_over_bare_decode": round(pillow / floor_turbo, 3),
        "convert_over_floor": round(floor / convert, 3),
        "convert_over_floor_turbo": round(floor_turbo / convert, 3),
        "convert_check_s": round(convert - convert_write, 3),
        "convert_write_s": round(convert_write, 3),
        "convert_pooled_check_s": round(pooled - pooled_write, 3),
        "check_vs_decode": round(_check_vs_decode(sample, thorough=False), 3),
        "thorough_check_vs_decode": round(_check_vs_decode(sample, thorough=True), 3),
    }


def _write_arrays(mib: int, workers: int, rounds: int) -> dict[str, Any]:
    from chunkio.convert.arrays import write_arrays

    n = (mib << 20) // (3 * 64 * 64)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 16, (n, 3, 64, 64), dtype=np.uint8) + np.arange(64, dtype=np.uint8)
    data = {"image": images, "label": np.arange(n) % 10}

    def timed(w: int) -> float:
        dst = ROOT / f"arrays-{w}.zarr"
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        write_arrays(dst, data, execution=Execution(workers=w))
        seconds = time.perf_counter() - start
        shutil.rmtree(dst, ignore_errors=True)
        return seconds

    best = _best(rounds, {"one": lambda: (timed(1), 0.0), "many": lambda: (timed(workers), 0.0)})
    one, many = best["one"][0], best["many"][0]
    return {
        "write_arrays_mib": mib,
        "write_arrays_1_worker_s": round(one, 3),
        f"write_arrays_{workers}_workers_s": round(many, 3),
        "write_arrays_workers_over_one": round(many / one, 3),
    }


def checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for conversion, on the realistic set."""
    real = next(s for s in result["sets"] if s["set"] == "realistic")
    out = [
        {
            "target": "convert_images / bare decode x cores (224-256 px JPEGs)",
            "measured": real["convert_over_bare_decode"],
            "required": TARGET,
            "passed": real["convert_over_bare_decode"] >= TARGET,
        }
    ]
    out.append(
        {
            "target": "convert_images(encoding='jpeg') / bare decode x cores (224-256 px JPEGs)",
            "measured": real["convert_jpeg_over_bare_decode"],
            "required": TARGET,
            "passed": real["convert_jpeg_over_bare_decode"] >= TARGET,
        }
    )
    ratio = result["write_arrays_workers_over_one"]
    out.append(
        {
            "target": "write_arrays in-memory: time with workers / with 1 (10% noise allowed)",
            "measured": ratio,
            "required": 1.1,
            "passed": ratio <= 1.1,
        }
    )
    return out


def run(
    n_images: int = 2000,
    workers: int = 2,
    *,
    n_realistic: int = 3000,
    repeats: int = 2,
    write_mib: int = 128,
    quick: bool = False,
) -> dict[str, Any]:
    """Measure the contenders side by side; images/s and ratios for each set of JPEGs."""
    if quick:
        n_images, n_realistic, repeats, write_mib = 512, 768, 1, 32
    sets = []
    for name, count, sides in (
        ("realistic", n_realistic, (224, 256)),
        ("mixed", n_images, (64, 128)),
    ):
        root = ROOT / f"images-{name}"
        paths = make_mixed_jpegs(root, n_images=count, sides=sides)
        sets.append(_image_set(name, root, paths, workers, repeats))
    real = sets[0]
    result: dict[str, Any] = {
        "workers": workers,
        "repeats": repeats,
        "cpu_count": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        # the headline: the realistic set
        **{k: v for k, v in real.items() if k not in ("set", "n_images")},
        "n_images": real["n_images"],
        "sets": sets,
        **_write_arrays(write_mib, workers, repeats),
    }
    result["checks"] = checks(result)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="64-128 px JPEGs")
    parser.add_argument("--realistic", type=int, default=3000, help="224-256 px JPEGs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = run(
        args.images,
        args.workers,
        n_realistic=args.realistic,
        repeats=args.repeats,
        quick=args.quick,
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
