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

__all__ = [
    "Box",
    "TORCH_MODES",
    "crop_span",
    "pixel_span",
    "resample_into",
    "resize_into",
    "resized",
]

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


def crop_span(box: Box, height: int, width: int) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)``: the whole pixels of an ``height`` x ``width`` image that
    :func:`resample_into` crops for ``box`` (1, 3 channels), so that a caller may decode only
    them and hand the crop to :func:`resize_into`.

    >>> crop_span((2.4, -1.0, 7.6, 3.5), 4, 10)
    (2, 0, 8, 4)
    """
    left, right = pixel_span(box[0], box[2], width)
    top, bottom = pixel_span(box[1], box[3], height)
    return left, top, right, bottom


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
    left, top, right, bottom = crop_span(box, *image.shape[:2])
    _resize(image[top:bottom, left:right], size, flip, out, mode)


def resize_into(
    crop: np.ndarray,
    size: tuple[int, int],
    flip: bool,
    out: np.ndarray,
    resample: Image.Resampling,
) -> None:
    """The rest of :func:`resample_into` for an image already cut to :func:`crop_span`'s
    box: one antialiased resize of ``crop`` (uint8, 1 or 3 channels) to ``size``, mirrored
    if ``flip``, into ``out``. A C-contiguous ``crop`` is resized without a copy."""
    _resize(crop, size, flip, out, TORCH_MODES[resample])


def resized(crop: np.ndarray, size: tuple[int, int], resample: Image.Resampling) -> np.ndarray:
    """:func:`resize_into`'s resize alone: ``crop`` (uint8 ``(h, w, c)``, C-contiguous and
    writable) resized to ``size``, as a C-contiguous ``(out_h, out_w, c)`` array (``crop``
    itself where it has that size already). Each channel is resized on its own, so the RGB
    channels of an RGBX crop (4 channels: torch's uint8 kernels take them as they are, and
    repack 3 to 4 first) come out exactly as the RGB crop's."""
    return _resized(torch.from_numpy(crop), size, TORCH_MODES[resample]).numpy()


def _resized(tensor: torch.Tensor, size: tuple[int, int], mode: str) -> torch.Tensor:
    h, w, c = tensor.shape
    out_h, out_w = size
    if (h, w) == (out_h, out_w):
        return tensor  # no resample
    # The HWC pixels as a channels-last NCHW tensor, strides spelled out: permute and
    # unsqueeze leave a batch stride that makes torch take the batch of one for NCHW,
    # and its kernel then runs about 2x slower and returns NCHW (slow to copy back).
    nchw = tensor.as_strided((1, c, h, w), (h * w * c, 1, w * c, c))
    return torch.nn.functional.interpolate(
        nchw,
        size=(out_h, out_w),
        antialias=mode != "nearest-exact",
        mode=mode,
    )[0].permute(1, 2, 0)


def _resize(
    crop: np.ndarray, size: tuple[int, int], flip: bool, out: np.ndarray, mode: str
) -> None:
    h, w = crop.shape[:2]
    pixels = crop.reshape(h, w, -1)
    if not (pixels.flags.c_contiguous and pixels.flags.writeable):
        pixels = np.ascontiguousarray(pixels) if pixels.flags.writeable else pixels.copy()
    result = _resized(torch.from_numpy(pixels), size, mode)  # crop itself: copied into out
    out_h, out_w = size
    if flip and torch.get_num_threads() > 1:
        # In a process with several torch threads (num_workers=0), torch splits a flip this
        # small over its thread pool, which shared with decode threads or other jobs waits
        # for milliseconds; numpy's reversed copy takes ~170 us whatever the load.
        pixels_out = result.numpy().reshape(out_h, out_w, -1)
        np.copyto(out, pixels_out[:, ::-1].reshape(out.shape))
        return
    if flip:  # torch's flip copy on one thread (a worker's), then a plain one: ~16 + ~10 us
        result = result.flip(1)
    np.copyto(out, result.numpy().reshape(out.shape))
