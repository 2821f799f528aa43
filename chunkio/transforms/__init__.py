"""Per-sample transforms: deterministic image transforms with a known output shape.

:mod:`.image` (the public transforms: :class:`Compose` of :class:`RandomResizedCrop`,
:class:`CenterCrop`, :class:`Resize`, :class:`RandomHorizontalFlip`, planned per sample and
executed as one resample), :mod:`.ops` (those ops: what each does to its input, and the
:class:`CropPlan` a chain of them reduces to), :mod:`.sample` (the protocol of transforms that
declare their output shape, so batches stay preallocated), :mod:`.draws` (counter-based
randomness keyed by ``(seed, epoch, index)``), :mod:`.arguments`, :mod:`.render` (the one
crop-and-resize into a batch row), :mod:`.normalization` (a uint8 batch to normalized floats,
on the device) and :mod:`.stats` (per-channel mean/std of a dataset's fields, and
:class:`Normalize` by them). Modules here may import :mod:`chunkio.util` and
:mod:`chunkio.errors` only. Names are imported on first use (PEP 562), so the read path
importing :mod:`.sample` does not import Pillow or torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_names

if TYPE_CHECKING:
    from .image import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        CenterCrop,
        Compose,
        CropPlan,
        Key,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        normalize,
    )

_LAZY = {
    "CenterCrop": ".image",
    "Compose": ".image",
    "CropPlan": ".image",
    "IMAGENET_MEAN": ".image",
    "IMAGENET_STD": ".image",
    "Key": ".image",
    "RandomHorizontalFlip": ".image",
    "RandomResizedCrop": ".image",
    "Resize": ".image",
    "normalize": ".image",
}

__all__ = [
    "CenterCrop",
    "Compose",
    "CropPlan",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Key",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "normalize",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
