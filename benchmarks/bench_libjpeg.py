"""The partial JPEG decoder against each libjpeg-turbo it can run on, and the whole decode.

A ``pip install`` without libjpeg-turbo's headers builds ``chunkio.images._jpegcrop`` against
the vendored headers and binds Pillow's bundled libjpeg-turbo at import
(:mod:`chunkio.images.libjpeg`); with the headers it links the system's. This compares, in
one process, on the same photos and crop boxes (RandomResizedCrop's, DCT-scaled as the reader
scales them for a 224-pixel output), CPU time per image of:

``whole``
    simplejpeg's decode of the whole image (what readers do without the partial decoder);
``region, system``
    the extension built here (``python setup.py build_ext --inplace``), linked to the system's
    libjpeg-turbo (skipped where it was built otherwise);
``region, bound``
    a build with ``CHUNKIO_JPEG=vendored`` made in a temporary folder, bound to the first
    library :func:`chunkio.images.libjpeg.candidates` gives (Pillow's bundled copy).

Each region decode is checked equal to the whole decode cut to the box. Rounds interleave the
three, so load on the machine hits all alike; the figures are medians over rounds.

    python -m benchmarks.bench_libjpeg [--images 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks.data import sample_photos
from chunkio.images import jpeg, libjpeg

ROOT = Path(__file__).resolve().parents[1]


def vendored_build(folder: Path) -> ModuleType:
    """``_jpegcrop`` built with ``CHUNKIO_JPEG=vendored`` into ``folder``, bound to a library."""
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(folder)],
        cwd=ROOT,
        env={**os.environ, "CHUNKIO_JPEG": "vendored"},
        check=True,
        capture_output=True,
    )
    path = next((folder / "chunkio" / "images").glob("_jpegcrop*.so"))
    spec = importlib.util.spec_from_file_location("vendored._jpegcrop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = libjpeg.attach(module)
    if state.problem is not None:
        raise SystemExit(state.problem)
    print(f"bound: {state.library}")
    return module


def cases(n: int, seed: int = 0) -> list[tuple[bytes, tuple[int, int], tuple[int, ...]]]:
    """``n`` JPEGs (quality 90, 4:2:0) of crops of the sample photos, each with a crop box
    (RandomResizedCrop's area and aspect ranges) and the DCT scale a 224 output allows."""
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    found = []
    for i in range(n):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        hh, ww = int(rng.integers(h // 2, h)), int(rng.integers(w // 2, w))
        y, x = int(rng.integers(0, h - hh)), int(rng.integers(0, w - ww))
        data = jpeg.encode(np.ascontiguousarray(photo[y : y + hh, x : x + ww]), 90)
        area = hh * ww * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        ch = min(hh, round(np.sqrt(area / ratio)))
        cw = min(ww, round(np.sqrt(area * ratio)))
        d, sh, sw = jpeg.scaled_size(hh, ww, ceil(hh * 224 / ch), ceil(ww * 224 / cw))
        top = int(rng.integers(0, hh - ch + 1)) * sh // hh
        left = int(rng.integers(0, ww - cw + 1)) * sw // ww
        bh, bw = max(1, min(sh - top, ch * sh // hh)), max(1, min(sw - left, cw * sw // ww))
        found.append((data, (hh, ww), (d, sh, sw, top, left, bh, bw)))
    return found


def ceil(x: float) -> int:
    return int(np.ceil(x))


def run_whole(data: bytes, size: tuple[int, int], box: tuple[int, ...]) -> np.ndarray:
    d, sh, sw, top, left, bh, bw = box
    pixels = jpeg.decode(data, gray=False, scale=(d, sh, sw))
    return pixels[top : top + bh, left : left + bw]


def run_region(module: Any) -> Callable[..., np.ndarray]:
    def run(data: bytes, size: tuple[int, int], box: tuple[int, ...]) -> np.ndarray:
        d, _, _, top, left, bh, bw = box
        out = np.empty((bh, bw, 3), np.uint8)
        module.decode_region(data, out, False, d, size[0], size[1], left, top, bh, bw, False)
        return out

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    work = cases(args.images)
    ways: dict[str, Callable[..., np.ndarray]] = {"whole": run_whole}
    if jpeg.LIBJPEG.problem is None and jpeg.LIBJPEG.headers == "system":
        ways["region, system"] = run_region(jpeg._jpegcrop)
    with tempfile.TemporaryDirectory() as folder:
        ways["region, bound"] = run_region(vendored_build(Path(folder)))
        for way in ways.values():  # the same pixels, every way
            for data, size, box in work:
                np.testing.assert_array_equal(way(data, size, box), run_whole(data, size, box))
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, way in ways.items():
                start = time.process_time()
                for data, size, box in work:
                    way(data, size, box)
                times[name].append((time.process_time() - start) / len(work) * 1e6)
    whole = statistics.median(times["whole"])
    print(f"{len(work)} images, median of {args.rounds} rounds, CPU us per image:")
    for name, found in times.items():
        us = statistics.median(found)
        print(f"  {name:15s} {us:8.0f} us   {us / whole:5.2f}x whole")


if __name__ == "__main__":
    main()
