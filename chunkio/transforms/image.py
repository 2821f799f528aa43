"""Deterministic per-sample image transforms with a known output shape: image augmentation
(decoding is :mod:`chunkio.images`, converting image folders :mod:`chunkio.convert.images`).

A :class:`Compose` of :class:`RandomResizedCrop`, :class:`CenterCrop`, :class:`Resize` and
:class:`RandomHorizontalFlip` turns into one :class:`CropPlan` per sample: a box in source pixel
coordinates, an output ``(height, width)`` and a horizontal flip. The plan is a pure function of
the input size and a :data:`Key` ``(seed, epoch, sample index)``, so a loader can preallocate a
batch buffer (:meth:`Compose.output_shape`, :attr:`Compose.fixed_size`) and write each
transformed image straight into its row (:meth:`Compose.render`).

How a sequence of ops reduces to one plan: a crop after a resize maps back to source
coordinates, a resize after a crop changes only the output size, and flips toggle (a crop of a
flipped image is the flip of the mirrored crop). The whole sequence is then executed as **one**
crop and **one** resample: the box is rounded to whole pixels, cropped, and resized by torch's
antialiased uint8 kernels (those torchvision's tensor transforms use; within 1-2 levels of
Pillow's crop-then-resize, which torchvision's ``RandomResizedCrop`` does on PIL images, and
several times faster than Pillow's resample on one core; figures in README.md, "Choosing the
defaults"), then mirrored. Results can therefore differ
from torchvision's step-by-step resizes by rounding only. 4-channel images are resampled by
Pillow on the exact box (premultiplied alpha).

Planning is this module's (pure: no pixel is touched); rendering, the one resample into a batch
row, is :mod:`chunkio.transforms.render`'s.

Randomness comes from a counter-based hash (splitmix64 over ``(seed, epoch, index, op number,
draw number)``), not from a generator per sample: a plan costs a few microseconds. The random
ops follow torchvision's algorithms (``RandomResizedCrop.get_params``, ``CenterCrop``'s
offsets, ``Resize``'s shorter-side rule) with uniform draws from this hash.

Images are ``uint8``, ``(H, W)`` or ``(H, W, C)`` with ``C`` in ``{1, 3, 4}``. Pillow resamples
4-channel images with premultiplied alpha (as torchvision's PIL path does).

Examples
--------
>>> import numpy as np
>>> t = Compose([RandomResizedCrop(224), RandomHorizontalFlip()])
>>> t.output_shape((480, 640, 3)), t.fixed_size
((224, 224, 3), (224, 224))
>>> image = np.zeros((480, 640, 3), np.uint8)
>>> batch = np.empty((8, 224, 224, 3), np.uint8)
>>> for i in range(8):
...     t.apply(image, batch[i], key=(0, 3, i))
>>> t.plan((0, 3, 5), 480, 640) == t.plan((0, 3, 5), 480, 640)
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .arguments import (
    CHANNELS,
    INTERPOLATIONS,
    check_interpolation,
    check_range,
    check_size,
    is_int,
    is_real,
    pair,
)
from .draws import GAMMA, M64, Key, epoch_state, fmix, uniform, uniform2
from .normalization import IMAGENET_MEAN, IMAGENET_STD, normalize
from .render import crop_span, resample_into, resize_into, resized

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

# --------------------------------------------------------------------------------------------
# Ops
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Compose
# --------------------------------------------------------------------------------------------


def _hw(input_shape: Sequence[int]) -> tuple[int, int]:
    """``(H, W)`` of an ``(H, W)`` or ``(H, W, C)`` shape (``C`` in 1, 3, 4)."""
    shape = tuple(input_shape)
    ok = len(shape) in (2, 3) and all(is_int(s) and s > 0 for s in shape)
    if not ok or (len(shape) == 3 and shape[2] not in CHANNELS):
        raise ValueError(
            f"image shape must be (H, W) or (H, W, C) with C in {CHANNELS}, got {shape!r}"
        )
    return int(shape[0]), int(shape[1])


class Compose:
    """A sequence of ops on one dataset field, executed as one resample per sample.

    Parameters
    ----------
    ops : sequence of ops
        :class:`RandomResizedCrop`, :class:`CenterCrop`, :class:`Resize`,
        :class:`RandomHorizontalFlip`, applied in order. The single resample uses the
        interpolation of the last :class:`RandomResizedCrop` or :class:`Resize` (bilinear if
        there is none).
    field : str
        The dataset field it transforms.
    seed : int
        The transform's own seed: the readers key each sample's draws by ``(seed, epoch,
        index)`` with it (a loader's ``seed`` sets the order only: another seed here, other
        draws). :meth:`plan` uses only its key.

    Examples
    --------
    >>> import numpy as np
    >>> t = Compose([Resize(256), CenterCrop(224), RandomHorizontalFlip(p=1.0)])
    >>> t.output_shape((427, 640, 3)), t.fixed_size
    ((224, 224, 3), (224, 224))
    >>> plan = t.plan((0, 0, 0), 427, 640)
    >>> plan.size, plan.flip
    ((224, 224), True)
    >>> t(np.zeros((427, 640), np.uint8)).shape
    (224, 224)
    """

    #: the dtype of the images it takes (a dataset refuses a field of another when it is made)
    input_dtype = np.dtype(np.uint8)

    def __init__(self, ops: Sequence[_Op], *, field: str = "image", seed: int = 0) -> None:
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise TypeError(f"Compose: ops must be a sequence of ops, got {ops!r}")
        for i, op in enumerate(ops):
            if not isinstance(op, _OP_TYPES):
                names = ", ".join(t.__name__ for t in _OP_TYPES)
                raise TypeError(f"Compose: ops[{i}] must be one of {names}, got {op!r}")
        if not isinstance(field, str) or not field:
            raise TypeError(f"Compose: field must be a non-empty str, got {field!r}")
        if not is_int(seed):
            raise TypeError(f"Compose: seed must be an int, got {seed!r}")
        self.ops: tuple[_Op, ...] = tuple(ops)
        self.field = field
        self.seed = int(seed)
        # The last op with an interpolation decides the (single) resample's filter.
        resample = Image.Resampling.BILINEAR
        for op in self.ops:
            if isinstance(op, (RandomResizedCrop, Resize)):
                resample = INTERPOLATIONS[op.interpolation]
        self._resample = resample
        self._steps = tuple(op._step for op in self.ops)
        # plan()'s one-entry cache of (seed, epoch, epoch_state(seed, epoch)), swapped whole.
        self._last_epoch: tuple[int, int, int] = (0, 0, epoch_state(0, 0))

    def __repr__(self) -> str:
        return f"Compose({list(self.ops)!r}, field={self.field!r}, seed={self.seed})"

    @property
    def resample(self) -> Image.Resampling:
        """The filter of the one resample (Pillow's enum; the GPU decode maps it to torch's)."""
        return self._resample

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Output shape for an input shape, with the same channel layout.

        Parameters
        ----------
        input_shape : tuple of int
            ``(H, W)`` or ``(H, W, C)`` with ``C`` in ``{1, 3, 4}``.

        Raises
        ------
        ValueError
            For any other shape, or a :class:`CenterCrop` larger than its input.
        """
        height, width = _hw(input_shape)
        h, w = self.plan((0, 0, 0), height, width).size
        return (h, w, *tuple(input_shape)[2:])

    @property
    def fixed_size(self) -> tuple[int, int] | None:
        """Output ``(height, width)`` if it does not depend on the input size, else ``None``.

        Images of several sizes (a ragged raw field, an encoded one) need a fixed size to make
        one batch: a dataset refuses a transform without one on such a field when it is made
        (:class:`~chunkio.errors.TransformError`), rather than returning lists."""
        for op in reversed(self.ops):
            if isinstance(op, RandomHorizontalFlip):
                continue
            if isinstance(op, Resize) and isinstance(op.size, int):
                return None
            return pair(op.size)
        return None

    def plan(self, key: Key, height: int, width: int) -> CropPlan:
        """The sample's plan; pure: the same key and input size always give the same plan.

        A few microseconds: less than creating one ``numpy.random.default_rng`` per sample
        (figures in README.md, "Choosing the defaults").

        Parameters
        ----------
        key : (int, int, int)
            ``(seed, epoch, sample index)``.
        height, width : int
            Input (source) size.
        """
        if height <= 0 or width <= 0:
            raise ValueError(f"Compose.plan: input size must be positive, got {(height, width)}")
        seed, epoch, index = key
        last = self._last_epoch
        if last[0] == seed and last[1] == epoch:
            h = last[2]
        else:
            h = epoch_state(seed, epoch)
            self._last_epoch = (seed, epoch, h)
        state = fmix(((h ^ (index & M64)) + GAMMA) & M64)  # == key_state(key)
        h, w = height, width
        left, top, right, bottom = 0.0, 0.0, float(width), float(height)
        flip = False
        for n, step in enumerate(self._steps):
            crop, new_h, new_w, toggle = step(state, n, h, w)
            if crop is not None:
                x0, y0, x1, y1 = crop
                if flip:
                    x0, x1 = w - x1, w - x0
                sx = (right - left) / w
                sy = (bottom - top) / h
                left, right = left + x0 * sx, left + x1 * sx
                top, bottom = top + y0 * sy, top + y1 * sy
            h, w = new_h, new_w
            flip ^= toggle
        return CropPlan((left, top, right, bottom), (h, w), flip)

    def render(
        self, image: np.ndarray, plan: CropPlan, out: np.ndarray, *, scale: float = 1.0
    ) -> None:
        """Execute a plan: one crop-and-resize resample, an optional mirror, a copy into ``out``.

        Parameters
        ----------
        image : numpy.ndarray
            ``uint8``, ``(h, w)`` or ``(h, w, c)`` with ``c`` in ``{1, 3, 4}``; may be decoded
            at a reduced ``scale`` of the source the plan was made for.
        plan : CropPlan
        out : numpy.ndarray
            ``uint8`` of shape ``plan.size`` plus the image's channel axis; may be a
            non-owning (strided) view into a larger buffer.
        scale : float
            Size of ``image`` relative to the source: the plan's box is multiplied by it
            (and clipped to the image).
        """
        if image.dtype != np.uint8:
            raise TypeError(
                f"Compose.render: image dtype must be uint8, got {image.dtype} "
                f"(supported: uint8 (H, W) or (H, W, C) with C in {CHANNELS})"
            )
        _hw(image.shape)  # checks it
        expected = (*plan.size, *image.shape[2:])
        if out.shape != expected or out.dtype != np.uint8:
            raise ValueError(
                f"Compose.render: out must be uint8 of shape {expected}, "
                f"got {out.dtype} of shape {out.shape}"
            )
        if not (is_real(scale) and 0.0 < scale < math.inf):
            raise ValueError(f"Compose.render: scale must be a positive number, got {scale!r}")
        left, top, right, bottom = plan.box
        if scale != 1.0:
            left, top, right, bottom = left * scale, top * scale, right * scale, bottom * scale
        resample_into(image, (left, top, right, bottom), plan.size, plan.flip, out, self._resample)

    def crop_box(
        self, plan: CropPlan, height: int, width: int, scale: float = 1.0
    ) -> tuple[int, int, int, int]:
        """The whole pixels ``(left, top, right, bottom)`` of an ``height`` x ``width`` image
        (the source decoded at ``scale``) that :meth:`render` crops for ``plan`` (1 or 3
        channels; 4 are resampled on the exact box). A reader may decode only this box and
        give it to :meth:`render_crop`: the result is the same."""
        left, top, right, bottom = plan.box
        return crop_span((left * scale, top * scale, right * scale, bottom * scale), height, width)

    def render_crop(self, crop: np.ndarray, plan: CropPlan, out: np.ndarray) -> None:
        """:meth:`render` of an image already cut to :meth:`crop_box` (1 or 3 channels):
        the one resize, the mirror, the copy into ``out``."""
        expected = (*plan.size, *crop.shape[2:])
        if crop.dtype != np.uint8 or out.shape != expected or out.dtype != np.uint8:
            raise ValueError(
                f"Compose.render_crop: uint8 crop and out of shape {expected} expected, "
                f"got {crop.dtype} crop and {out.dtype} out of shape {out.shape}"
            )
        resize_into(crop, plan.size, plan.flip, out, self._resample)

    def resize_crop(self, crop: np.ndarray, plan: CropPlan) -> np.ndarray:
        """The resize of :meth:`render_crop` alone, not mirrored: ``crop`` (uint8
        ``(h, w, c)``, C-contiguous and writable, ``c`` 1, 3 or 4: RGBX, whose first three
        channels come out exactly as an RGB crop's) resized to ``plan.size``. A reader that
        mirrors and copies the result into its batch row itself gets :meth:`render_crop`'s
        pixels."""
        if crop.dtype != np.uint8 or crop.ndim != 3 or not crop.flags.c_contiguous:
            raise ValueError(
                f"Compose.resize_crop: a C-contiguous uint8 (h, w, c) crop expected, got "
                f"{crop.dtype} of shape {crop.shape}"
            )
        return resized(crop, plan.size, self._resample)

    def apply(self, image: np.ndarray, out: np.ndarray, key: Key) -> None:
        """Transform ``image`` into ``out``: :meth:`render` of :meth:`plan` for ``key``."""
        self.render(image, self.plan(key, *_hw(image.shape)), out)

    def __call__(self, image: np.ndarray, key: Key = (0, 0, 0)) -> np.ndarray:
        """Transform ``image`` into a new array (convenience; allocates)."""
        plan = self.plan(key, *_hw(image.shape))
        out = np.empty((*plan.size, *image.shape[2:]), np.uint8)
        self.render(image, plan, out)
        return out
