"""Argument checks of the transforms (:mod:`chunkio.transforms.image`): typed errors naming the op,
what was expected and what came."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from PIL import Image

__all__ = [
    "CHANNELS",
    "INTERPOLATIONS",
    "check_interpolation",
    "check_range",
    "check_size",
    "is_int",
    "is_real",
    "pair",
]

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
}
CHANNELS = (1, 3, 4)


def is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def check_size(op: str, size: object) -> tuple[int, int] | int:
    """``size`` as a positive int or a ``(height, width)`` pair of positive ints."""
    expected = "a positive int or a (height, width) pair of positive ints"
    if is_int(size):
        value = int(cast(int, size))
        if value <= 0:
            raise ValueError(f"{op}: size must be {expected}, got {size!r}")
        return value
    if isinstance(size, (tuple, list)) and len(size) == 2 and all(is_int(s) for s in size):
        h, w = int(size[0]), int(size[1])
        if h <= 0 or w <= 0:
            raise ValueError(f"{op}: size must be {expected}, got {size!r}")
        return (h, w)
    raise TypeError(f"{op}: size must be {expected}, got {size!r}")


def check_range(op: str, name: str, value: object) -> tuple[float, float]:
    """A ``(min, max)`` pair of finite reals with ``0 < min <= max``."""
    expected = "a (min, max) pair of numbers with 0 < min <= max"
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(map(is_real, value))):
        raise TypeError(f"{op}: {name} must be {expected}, got {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 < lo <= hi):
        raise ValueError(f"{op}: {name} must be {expected}, got {value!r}")
    return (lo, hi)


def check_interpolation(op: str, interpolation: object) -> None:
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"{op}: interpolation must be one of {sorted(INTERPOLATIONS)}, got {interpolation!r}"
        )


def pair(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else size
