"""Rendering a transform's plan: the one crop-and-resize of a sample into its batch row.

A plan (:class:`chunkio.transforms.image.CropPlan`: a box in source pixels, an output size, a
mirror) is made by :mod:`chunkio.transforms.image` as a pure function of ``(seed, epoch, index)``;
:func:`resample_into` executes one on the decoded pixels. Gray and RGB images are cropped to
the box rounded to whole pixels and resized once by torch's antialiased uint8 kernels (the
ones torchvision's tensor transforms use: 4-7x faster than Pillow's resample on one core);
4-channel images are resampled by Pillow on the exact box (premultiplied alpha).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

__all__ = ["Box", "TORCH_MODES", "pixel_span", "resample_into"]

#: ``(left, top, right, bottom)`` in the pixels of the image being rendered
Box = tuple[float, float, float, float]

#: torch's resampling modes for Pillow's filters ("nearest-exact" is Pillow's pixel centres)
TORCH_MODES = {
    Image.Resampling.NEAREST: "nearest-exact",
    Image.Resampling.BILINEAR: "bilinear",
    Image.Resampling.BICUBIC: "bicubic",
}


def pixel_span(start: float, stop: float, size: int) -> tuple[int, int]:
    """``[start, stop)`` rounded to whole pixels inside ``[0, size)``, at least one wide.

    >>> pixel_span(2.4, 7.6, 10), pixel_span(-0.3, 12.0, 10), pixel_span(9.8, 9.9, 10)
    ((2, 8), (0, 10), (9, 10))
    """
    a = min(max(0, round(start)), size - 1)
    b = min(max(a + 1, round(stop)), size)
    return a, b


def resample_into(
    image: np.ndarray,
    box: Box,
    size: tuple[int, int],
    flip: bool,
    out: np.ndarray,
    resample: Image.Resampling,
) -> None:
    """Resample ``box`` of ``image`` to ``size``, mirror it if ``flip``, and copy it into
    ``out``.

    ``image`` is uint8 ``(h, w)`` or ``(h, w, c)`` with ``c`` in 1, 3, 4 and ``out`` uint8 of
    shape ``size`` plus the image's channel axis (a strided view into a batch serves); the
    caller has checked both (:meth:`chunkio.transforms.image.Compose.render`). ``resample`` is
    Pillow's filter (nearest, bilinear or bicubic).
    """
    channels = 1 if image.ndim == 2 else image.shape[2]
    if channels != 4:  # torch's uint8 kernels (premultiplied alpha needs Pillow's)
        _torch_into(image, box, size, flip, out, TORCH_MODES[resample])
        return
    height, width = image.shape[:2]
    out_h, out_w = size
    left, right = max(0.0, box[0]), min(float(width), box[2])
    top, bottom = max(0.0, box[1]), min(float(height), box[3])
    if (left, top, right, bottom) == (0.0, 0.0, width, height) and (out_h, out_w) == (
        height,
        width,
    ):
        result = np.asarray(image)  # identity resample: copy straight into out
    else:
        resized = Image.fromarray(np.ascontiguousarray(image)).resize(
            (out_w, out_h), resample, box=(left, top, right, bottom)
        )
        result = np.asarray(resized)
    np.copyto(out, result[:, ::-1] if flip else result)


def _torch_into(
    image: np.ndarray, box: Box, size: tuple[int, int], flip: bool, out: np.ndarray, mode: str
) -> None:
    """Crop to the box rounded to whole pixels, then one antialiased resize with torch's
    uint8 kernels (crop-then-resize like torchvision's ``RandomResizedCrop``)."""
    height, width = image.shape[:2]
    left, right = pixel_span(box[0], box[2], width)
    top, bottom = pixel_span(box[1], box[3], height)
    pixels = image[top:bottom, left:right].reshape(bottom - top, right - left, -1)
    if not pixels.flags.writeable:  # torch warns about read-only arrays (never written)
        pixels = pixels.copy()
    crop = torch.from_numpy(pixels)
    out_h, out_w = size
    if (bottom - top, right - left) == (out_h, out_w):
        result = crop  # no resample: copy straight into out
    else:
        nchw = crop.permute(2, 0, 1).unsqueeze(0).contiguous(memory_format=torch.channels_last)
        result = torch.nn.functional.interpolate(
            nchw,
            size=(out_h, out_w),
            antialias=mode != "nearest-exact",
            mode=mode,
        )[0].permute(1, 2, 0)
    if flip:  # torch's flip copy, then a plain one (numpy's reversed copy is slow)
        result = result.flip(1)
    np.copyto(out, result.numpy().reshape(out.shape))
