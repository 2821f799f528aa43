"""Realistic benchmark data made on the spot: natural-image JPEGs in class folders.

scikit-learn ships two photographs (``load_sample_images``); random crops, flips and rescales
of them, saved as JPEG files in class folders, make an ImageFolder-style dataset with real
JPEG decode cost and natural-image compressibility, without downloading anything.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["make_imagenet_folder", "make_jpeg_folder", "make_natural_folder", "sample_photos"]


def sample_photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return [np.asarray(im) for im in load_sample_images().images]


def _relight(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A mild random brightness/contrast change, as photos of one scene differ."""
    gain, offset = rng.uniform(0.8, 1.2), rng.uniform(-20.0, 20.0)
    pixels = np.asarray(image, dtype=np.float32) * gain + offset
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def make_jpeg_folder(
    root: str | Path, *, n_images: int, size: int = 96, n_classes: int = 4, seed: int = 0
) -> Path:
    """Write ``n_images`` ``size``x``size`` JPEGs into ``root/class_k/``; reuse if present."""
    root = Path(root)
    done = root / ".complete"
    if done.exists() and done.read_text() == f"{n_images} {size} {n_classes} {seed}":
        return root
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    for k in range(n_classes):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    for i in range(n_images):
        photo = photos[i % len(photos)]
        h, w = photo.shape[:2]
        side = int(rng.integers(size, min(h, w) // 2))
        y, x = int(rng.integers(0, h - side)), int(rng.integers(0, w - side))
        crop = Image.fromarray(photo[y : y + side, x : x + side]).resize((size, size))
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop.save(root / f"class_{i % n_classes}" / f"img_{i:06d}.jpg", quality=90)
    done.write_text(f"{n_images} {size} {n_classes} {seed}")
    return root


def make_natural_folder(
    root: str | Path,
    *,
    n_images: int,
    n_classes: int = 10,
    size: int = 224,
    seed: int = 0,
    quality: int = 90,
) -> Path:
    """Write ``n_images`` ``size``x``size`` JPEGs (quality ``quality``) into ``root/class_k/``.

    Each is a random square crop of one of the two sample photos (427x640), its side drawn
    log-uniformly between ``size / 2`` and the photo's height, so objects appear at many
    scales as in a photo collection resized to 224 (upscaled crops are soft, downscaled ones
    detailed), resized to ``size`` with Pillow's Lanczos filter, mirrored half the time, with
    a mild random brightness/contrast change. Deterministic by ``seed``; reused if ``root``
    already holds the same set.
    """
    root = Path(root)
    done = root / ".complete"
    stamp = f"natural {n_images} {size} {n_classes} {seed} {quality}"
    if done.exists() and done.read_text() == stamp:
        return root
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    for k in range(n_classes):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    for i in range(n_images):
        photo = photos[int(rng.integers(len(photos)))]
        h, w = photo.shape[:2]
        lo, hi = np.log(min(size / 2, min(h, w))), np.log(min(h, w))
        side = round(float(np.exp(rng.uniform(lo, hi))))
        y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(photo[y : y + side, x : x + side])
        crop = crop.resize((size, size), Image.Resampling.LANCZOS)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop = _relight(crop, rng)
        crop.save(root / f"class_{i % n_classes}" / f"img_{i:06d}.jpg", quality=quality)
    done.write_text(stamp)
    return root


def _imagenet_like(args: tuple[Path, int, int, int, int]) -> None:
    """Write images ``[start, stop)`` of :func:`make_imagenet_folder` (one process's share)."""
    root, start, stop, n_classes, seed = args
    photos = sample_photos()
    for i in range(start, stop):
        rng = np.random.default_rng((seed, i))
        photo = photos[int(rng.integers(len(photos)))]
        h, w = photo.shape[:2]
        # ImageNet's training set: mostly 500 px on the long side, 333-500 on the short one,
        # three in four landscape
        long_side, short_side = 500, int(rng.integers(333, 501))
        out_w, out_h = (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)
        # a random crop of the photo with the output's aspect ratio, at a random scale
        scale = float(rng.uniform(0.35, 1.0))
        crop_w = min(w, round(min(w, h * out_w / out_h) * scale))
        crop_h = min(h, round(crop_w * out_h / out_w))
        y, x = int(rng.integers(0, h - crop_h + 1)), int(rng.integers(0, w - crop_w + 1))
        image = Image.fromarray(photo[y : y + crop_h, x : x + crop_w])
        image = image.resize((out_w, out_h), Image.Resampling.BILINEAR)
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image = _relight(image, rng)
        image.save(root / f"class_{i % n_classes:03d}" / f"img_{i:07d}.jpg", quality=90)


def make_imagenet_folder(
    root: str | Path, *, n_images: int, n_classes: int = 100, seed: int = 0, workers: int = 1
) -> Path:
    """Write ``n_images`` JPEGs (q90) of ImageNet's training-set size mix into
    ``root/class_k/``, on ``workers`` processes; reused if ``root`` already holds the same set.

    Natural photos (random crops of scikit-learn's two sample photos, mildly re-lit) at 500 px
    on the long side and 333-500 on the short side, three in four landscape: the sizes
    RandomResizedCrop(224) meets in ImageNet training. Deterministic by ``seed`` and image
    number, whatever ``workers`` is.
    """
    root = Path(root)
    done = root / ".complete"
    stamp = f"imagenet {n_images} {n_classes} {seed}"
    if done.exists() and done.read_text() == stamp:
        return root
    for k in range(n_classes):
        (root / f"class_{k:03d}").mkdir(parents=True, exist_ok=True)
    step = max(1, -(-n_images // max(1, workers * 4)))
    jobs = [(root, a, min(a + step, n_images), n_classes, seed) for a in range(0, n_images, step)]
    if workers <= 1:
        for job in jobs:
            _imagenet_like(job)
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            pool.map(_imagenet_like, jobs)
    done.write_text(stamp)
    return root
