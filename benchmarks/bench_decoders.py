"""Image decoder measurements: pick the default library per encoding of chunkio.images.encoding.

224x224 crops of the scikit-learn sample photos, encoded as JPEG q90, WebP q90 and PNG. For
each library: images/s on one thread, and the speed-up of two threads over one (about 2 on two
cores when the decoder releases the GIL), both for the library's own decode call and for
chunkio's ``ImageDecoder.decode_into`` into a preallocated batch row. Also bytes per image
against raw, and the JPEG round-trip PSNR.

    PYTHONPATH=. python -m benchmarks.bench_decoders [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from benchmarks.data import sample_photos
from chunkio.images.decoders import image_decoder
from chunkio.images.encoding import encode_image

SIZE = 224


def crops(n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` random ``SIZE`` x ``SIZE`` RGB crops of the sample photos (half of them flipped)."""
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    out = []
    for i in range(n):
        photo = photos[i % len(photos)]
        y = int(rng.integers(0, photo.shape[0] - SIZE))
        x = int(rng.integers(0, photo.shape[1] - SIZE))
        crop = photo[y : y + SIZE, x : x + SIZE]
        out.append(np.ascontiguousarray(crop[:, ::-1] if rng.random() < 0.5 else crop))
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def rate(
    fn: Callable[[bytes, int], object], blobs: list[bytes], threads: int, secs: float
) -> float:
    """Images/s of ``fn(blob, slot)`` looped over ``blobs`` by ``threads`` threads for ``secs``."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def work(t: int) -> None:
        start.wait()
        i = t
        while not stop.is_set():
            fn(blobs[i % len(blobs)], t)
            i += 1
            counts[t] += 1

    for b in blobs[:4]:  # warm up (imports, caches)
        fn(b, 0)
    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(secs)
    stop.set()
    for th in pool:
        th.join()
    return sum(counts) / (time.perf_counter() - t0)


def gil_free_ratio(fn: Callable[[], object], repeats: int) -> float:
    """How far a spinning Python thread gets during ``fn`` against during a sleep of equal length.

    The switch interval is raised to 10 s, so the main thread gives up the GIL only where C code
    releases it: a decoder that holds the GIL scores 0 whatever the load on the machine; one
    that releases it scores about 1 with a free core (less on a loaded one).
    """
    stop = threading.Event()
    count = [0]

    def watch() -> None:
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)  # releases the GIL: the main thread never waits 10 s for it

    fn()
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    watcher = threading.Thread(target=watch)
    try:
        watcher.start()
        time.sleep(0.005)
        c0, t0 = count[0], time.perf_counter()
        for _ in range(repeats):
            fn()
        c1, t1 = count[0], time.perf_counter()
        time.sleep(t1 - t0)
        c2, t2 = count[0], time.perf_counter()
    finally:
        stop.set()
        watcher.join()
        sys.setswitchinterval(old)
    return ((c1 - c0) / (t1 - t0)) / max((c2 - c1) / (t2 - t1), 1e-9)


def _gil_figures(quick: bool) -> dict[str, float]:
    """GIL-free ratio of each chunkio decoder's ``decode_into`` on a 1600x1600 photo."""
    photo = sample_photos()[0]
    big = np.ascontiguousarray(np.tile(photo, (4, 3, 1))[:1600, :1600])
    out = np.empty(big.shape, np.uint8)
    figures = {}
    for encoding, libraries in (
        ("jpeg", ("simplejpeg", "imagecodecs", "Pillow")),
        ("png", ("imagecodecs", "Pillow")),
        ("webp", ("imagecodecs", "Pillow")),
    ):
        data = encode_image(big, encoding, 90)  # type: ignore[arg-type]
        for library in libraries:
            dec = image_decoder(encoding, library)  # type: ignore[arg-type]
            figures[f"{encoding} {library}"] = gil_free_ratio(
                lambda d=dec, b=data: d.decode_into(b, out), 1 if quick else 4
            )
    return figures


def _variants(shape: tuple[int, ...]) -> dict[str, dict[str, Callable[[bytes, int], object]]]:
    """Per encoding: label -> decode(blob, thread slot) callable."""
    import imagecodecs
    import simplejpeg

    batch = np.zeros((2, *shape), np.uint8)  # one preallocated row per thread

    def into(encoding: str, library: str) -> Callable[[bytes, int], object]:
        dec = image_decoder(encoding, library)  # type: ignore[arg-type]
        return lambda b, t: dec.decode_into(b, batch[t])

    def pil_asarray(b: bytes, t: int) -> object:
        with Image.open(io.BytesIO(b)) as im:
            return np.asarray(im.convert("RGB"))

    return {
        "jpeg": {
            "simplejpeg decode_jpeg": lambda b, t: simplejpeg.decode_jpeg(b),
            "simplejpeg decode_into": into("jpeg", "simplejpeg"),
            "imagecodecs jpeg8_decode": lambda b, t: imagecodecs.jpeg8_decode(b),
            "imagecodecs decode_into": into("jpeg", "imagecodecs"),
            "Pillow open+asarray": pil_asarray,
            "Pillow decode_into": into("jpeg", "Pillow"),
        },
        "png": {
            "imagecodecs png_decode": lambda b, t: imagecodecs.png_decode(b),
            "imagecodecs decode_into": into("png", "imagecodecs"),
            "imagecodecs spng_decode": lambda b, t: imagecodecs.spng_decode(b),
            "Pillow open+asarray": pil_asarray,
            "Pillow decode_into": into("png", "Pillow"),
        },
        "webp": {
            "imagecodecs webp_decode": lambda b, t: imagecodecs.webp_decode(b),
            "imagecodecs decode_into": into("webp", "imagecodecs"),
            "Pillow open+asarray": pil_asarray,
            "Pillow decode_into": into("webp", "Pillow"),
        },
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Measure; return sizes, PSNR and per-decoder rates (images/s, 1 and 2 threads)."""
    images = crops(8 if quick else 32)
    secs = 0.05 if quick else 0.6
    raw = images[0].nbytes
    blobs: dict[str, list[bytes]] = {}
    encode_ms: dict[str, float] = {}
    for label, enc, q in (("jpeg", "jpeg", 90), ("webp", "webp", 90), ("png", "png", 0)):
        t0 = time.perf_counter()
        blobs[label] = [encode_image(im, enc, q) for im in images]  # type: ignore[arg-type]
        encode_ms[label] = 1e3 * (time.perf_counter() - t0) / len(images)
    jpeg_dec = image_decoder("jpeg", "simplejpeg")
    webp_dec = image_decoder("webp", "Pillow")
    result: dict[str, Any] = {
        "machine_cores": __import__("os").cpu_count(),
        "image_shape": list(images[0].shape),
        "raw_bytes": raw,
        "bytes_per_image": {k: float(np.mean([len(b) for b in v])) for k, v in blobs.items()},
        "encode_ms": encode_ms,
        "jpeg_q90_psnr_db": float(
            np.mean(
                [psnr(jpeg_dec.decode(b), im) for b, im in zip(blobs["jpeg"], images, strict=True)]
            )
        ),
        "webp_q90_psnr_db": float(
            np.mean(
                [psnr(webp_dec.decode(b), im) for b, im in zip(blobs["webp"], images, strict=True)]
            )
        ),
        "decode": {},
    }
    result["ratio_vs_raw"] = {k: raw / v for k, v in result["bytes_per_image"].items()}
    for encoding, variants in _variants(images[0].shape).items():
        rows = result["decode"][encoding] = {}
        for label, fn in variants.items():
            one = rate(fn, blobs[encoding], 1, secs)
            two = rate(fn, blobs[encoding], 2, secs)
            rows[label] = {
                "images_per_s": one,
                "images_per_s_2_threads": two,
                "speedup_2": two / one,
            }
    result["gil_free_ratio_1600px"] = _gil_figures(quick)
    return result


def report(res: dict[str, Any]) -> str:
    lines = [
        f"{res['image_shape']} uint8 crops, raw {res['raw_bytes']} B; {res['machine_cores']} cores",
        f"{'encoding':<6} {'bytes':>8} {'x raw':>7} {'enc ms':>7}",
    ]
    for k, v in res["bytes_per_image"].items():
        lines.append(f"{k:<6} {v:>8.0f} {res['ratio_vs_raw'][k]:>7.1f} {res['encode_ms'][k]:>7.2f}")
    lines.append(
        f"PSNR q90: jpeg {res['jpeg_q90_psnr_db']:.1f} dB, webp {res['webp_q90_psnr_db']:.1f} dB"
    )
    lines.append(f"{'encoding':<6} {'decoder':<26} {'img/s 1 thr':>11} {'2 thr x':>8}")
    for encoding, rows in res["decode"].items():
        for label, r in rows.items():
            lines.append(
                f"{encoding:<6} {label:<26} {r['images_per_s']:>11.0f} {r['speedup_2']:>8.2f}"
            )
    lines.append(
        "GIL-free ratio of decode_into (1600x1600; 0 = holds the GIL): "
        + ", ".join(f"{k} {v:.2f}" for k, v in res["gil_free_ratio_1600px"].items())
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run(quick=args.quick)
    print(report(res))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
