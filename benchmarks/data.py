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
        gain, offset = rng.uniform(0.8, 1.2), rng.uniform(-20.0, 20.0)
        pixels = np.asarray(crop, dtype=np.float32) * gain + offset
        crop = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        crop.save(root / f"class_{i % n_classes}" / f"img_{i:06d}.jpg", quality=quality)
    done.write_text(stamp)
    return root


def make_imagenet_folder(
    root: str | Path,
    *,
    n_images: int,
    n_classes: int = 10,
    seed: int = 0,
    quality: int = 90,
) -> Path:
    """Write ``n_images`` JPEGs of ImageNet's training size mix into ``root/class_k/``.

    ImageNet's training images are mostly 500 px on the long side and 333-500 on the short:
    each image here is a random crop of one of the two sample photos (427x640) with that
    aspect ratio (landscape three times in four, as in ImageNet), its long side drawn between
    the photo's and 60% of it, resized to a long side of 500 with Pillow's Lanczos filter,
    mirrored half the time, with a mild brightness/contrast change, saved at ``quality``
    (4:2:0, Pillow's default). Deterministic by ``seed``; reused if ``root`` holds the same set.
    """
    root = Path(root)
    done = root / ".complete"
    stamp = f"imagenet {n_images} {n_classes} {seed} {quality}"
    if done.exists() and done.read_text() == stamp:
        return root
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    for k in range(n_classes):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
    for i in range(n_images):
        photo = photos[int(rng.integers(len(photos)))]
        ph, pw = photo.shape[:2]
        short = int(rng.integers(333, 501))
        landscape = rng.random() < 0.75
        out_w, out_h = (500, short) if landscape else (short, 500)
        # the largest crop of this aspect ratio the photo holds, then 60-100% of it
        fit = min(pw / out_w, ph / out_h)
        k_scale = fit * rng.uniform(0.6, 1.0)
        cw, ch = max(1, round(out_w * k_scale)), max(1, round(out_h * k_scale))
        y, x = int(rng.integers(0, ph - ch + 1)), int(rng.integers(0, pw - cw + 1))
        crop = Image.fromarray(photo[y : y + ch, x : x + cw])
        crop = crop.resize((out_w, out_h), Image.Resampling.LANCZOS)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        gain, offset = rng.uniform(0.8, 1.2), rng.uniform(-20.0, 20.0)
        pixels = np.asarray(crop, dtype=np.float32) * gain + offset
        crop = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        crop.save(root / f"class_{i % n_classes}" / f"img_{i:06d}.jpg", quality=quality)
    done.write_text(stamp)
    return root
