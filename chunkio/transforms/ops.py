"""The image ops a :class:`~chunkio.transforms.image.Compose` chains, and the plan they make.

:class:`RandomResizedCrop`, :class:`CenterCrop`, :class:`Resize` and
:class:`RandomHorizontalFlip` each say what they do to the current (virtual) image of a size:
a crop box of it, a new size, a mirror (``_step``: pure, drawn from the counter-based hash of
:mod:`chunkio.transforms.draws`, torchvision's algorithms). :class:`CropPlan` is one sample's
whole chain reduced to one box, one output size and one flip; reducing the chain and rendering
the plan are :class:`~chunkio.transforms.image.Compose`'s.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .arguments import check_interpolation, check_range, check_size, is_real, pair
from .draws import uniform, uniform2

__all__ = [
    "CenterCrop",
    "CropPlan",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
]

# What an op does to the current (virtual) image of size (h, w): crop the rectangle
# (x0, y0, x1, y1) of it (None: no crop), then resample to (new_h, new_w), then mirror if
# `toggle`.
_Step = tuple[tuple[int, int, int, int] | None, int, int, bool]


@dataclass(frozen=True)
class CropPlan:
    """One sample's transform, executed as a single resample.

    Attributes
    ----------
    box : tuple of float
        ``(left, top, right, bottom)`` of the region to resample, in source pixel coordinates.
    size : tuple of int
        Output ``(height, width)``.
    flip : bool
        Mirror horizontally after resampling.
    """

    box: tuple[float, float, float, float]
    size: tuple[int, int]
    flip: bool


@dataclass(frozen=True)
class RandomResizedCrop:
    """Crop a random area and aspect ratio, resize to ``size`` (torchvision's algorithm).

    Up to 10 attempts draw an area ``U(scale) * H * W`` and a log-uniform aspect ratio in
    ``ratio``; ``w = round(sqrt(area * r))``, ``h = round(sqrt(area / r))`` is accepted if it
    fits, at a uniform offset. Otherwise the fallback is a center crop of the whole image with
    its aspect ratio clamped to ``ratio`` (at least one pixel per side).

    Parameters
    ----------
    size : int or (int, int)
        Output ``(height, width)``; an int gives a square.
    scale : (float, float)
        Range of the crop's area as a fraction of the input's.
    ratio : (float, float)
        Range of the crop's aspect ratio (width / height).
    interpolation : {"bilinear", "nearest", "bicubic"}
    """

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    interpolation: str = "bilinear"
    _log_ratio: tuple[float, float] = dataclasses.field(init=False, repr=False, compare=False)
    _out: tuple[int, int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = type(self).__name__
        object.__setattr__(self, "size", check_size(name, self.size))
        object.__setattr__(self, "scale", check_range(name, "scale", self.scale))
        object.__setattr__(self, "ratio", check_range(name, "ratio", self.ratio))
        check_interpolation(name, self.interpolation)
        object.__setattr__(self, "_log_ratio", (math.log(self.ratio[0]), math.log(self.ratio[1])))
        object.__setattr__(self, "_out", pair(self.size))

    def _step(self, state: int, op: int, height: int, width: int) -> _Step:
        top, left, h, w = self._params(state, op, height, width)
        return (left, top, left + w, top + h), self._out[0], self._out[1], False

    def _params(self, state: int, op: int, height: int, width: int) -> tuple[int, int, int, int]:
        """``(top, left, h, w)`` of the crop, as torchvision's ``get_params``."""
        area = height * width
        s_lo, s_hi = self.scale
        lr_lo, lr_hi = self._log_ratio
        for attempt in range(10):
            u_area, u_ratio = uniform2(state, op, attempt)
            target = area * (s_lo + (s_hi - s_lo) * u_area)
            aspect = math.exp(lr_lo + (lr_hi - lr_lo) * u_ratio)
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                u_top, u_left = uniform2(state, op, 10)
                top = min(int(u_top * (height - h + 1)), height - h)
                left = min(int(u_left * (width - w + 1)), width - w)
                return top, left, h, w
        in_ratio = width / height
        r_lo, r_hi = self.ratio
        if in_ratio < r_lo:
            w = width
            h = max(1, min(height, round(w / r_lo)))
        elif in_ratio > r_hi:
            h = height
            w = max(1, min(width, round(h * r_hi)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w


@dataclass(frozen=True)
class CenterCrop:
    """Crop the center ``size`` region (torchvision's offsets: ``int(round((H - h) / 2))``).

    Unlike torchvision, a crop larger than its input raises ``ValueError`` instead of padding.

    Parameters
    ----------
    size : int or (int, int)
        Crop ``(height, width)``; an int gives a square.
    """

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", check_size(type(self).__name__, self.size))

    def _step(self, state: int, op: int, height: int, width: int) -> _Step:
        h, w = pair(self.size)
        if h > height or w > width:
            raise ValueError(
                f"CenterCrop: size {(h, w)} is larger than its input {(height, width)} "
                "(padding is not supported)"
            )
        top = round((height - h) / 2.0)
        left = round((width - w) / 2.0)
        return (left, top, left + w, top + h), h, w, False


@dataclass(frozen=True)
class Resize:
    """Resize to ``size`` (torchvision semantics).

    Parameters
    ----------
    size : int or (int, int)
        An int sets the shorter side, keeping the aspect ratio: the longer side becomes
        ``int(size * long / short)``. A pair is the output ``(height, width)``.
    interpolation : {"bilinear", "nearest", "bicubic"}
    """

    size: int | tuple[int, int]
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        name = type(self).__name__
        object.__setattr__(self, "size", check_size(name, self.size))
        check_interpolation(name, self.interpolation)

    def _step(self, state: int, op: int, height: int, width: int) -> _Step:
        size = self.size
        if not isinstance(size, int):
            return None, size[0], size[1], False
        if width <= height:
            return None, int(size * height / width), size, False
        return None, size, int(size * width / height), False


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror horizontally with probability ``p``.

    Parameters
    ----------
    p : float
        Flip probability, in ``[0, 1]``.
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        if not is_real(self.p):
            raise TypeError(f"RandomHorizontalFlip: p must be a number in [0, 1], got {self.p!r}")
        if not 0.0 <= float(self.p) <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p must be a number in [0, 1], got {self.p!r}")
        object.__setattr__(self, "p", float(self.p))

    def _step(self, state: int, op: int, height: int, width: int) -> _Step:
        return None, height, width, uniform(state, op, 0) < self.p


_Op = RandomResizedCrop | CenterCrop | Resize | RandomHorizontalFlip
_OP_TYPES = (RandomResizedCrop, CenterCrop, Resize, RandomHorizontalFlip)
