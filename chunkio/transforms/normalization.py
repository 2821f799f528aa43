"""The device-side end of an image pipeline: a uint8 batch to normalized floats.

Re-exported by :mod:`chunkio.transforms` (``from chunkio.transforms import normalize``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "normalize"]

#: torchvision's ImageNet statistics, for :func:`normalize`
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(images / 255 - mean) / std`` per channel, as ``dtype``, on the batch's device.

    The device-side end of an image pipeline: batches cross PCIe as uint8 ``(B, C, H, W)``
    (a quarter of float32's bytes), and the conversion runs where the batch already is.

    Examples
    --------
    >>> x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    >>> [round(v, 3) for v in normalize(x, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))[0, :, 0, 0].tolist()]
    [1.0, 1.0, 1.0]
    """
    if images.ndim != 4 or images.dtype != torch.uint8:
        raise ValueError(
            f"normalize takes a uint8 (B, C, H, W) batch; got {images.dtype} of shape "
            f"{tuple(images.shape)}"
        )
    c = images.shape[1]
    if len(mean) != c or len(std) != c or any(s <= 0 for s in std):
        raise ValueError(
            f"normalize: mean and std need one value per channel ({c}), std > 0; got "
            f"mean={tuple(mean)}, std={tuple(std)}"
        )
    m = torch.tensor([v * 255 for v in mean], dtype=dtype, device=images.device)
    s = torch.tensor([v * 255 for v in std], dtype=dtype, device=images.device)
    return images.to(dtype).sub_(m.view(1, c, 1, 1)).div_(s.view(1, c, 1, 1))
