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

Planning is this module's (pure: no pixel is touched) from what each op does to its input
(:mod:`chunkio.transforms.ops`, re-exported here); rendering, the one resample into a batch
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

import math
from collections.abc import Sequence

import numpy as np
from PIL import Image

from .arguments import CHANNELS, INTERPOLATIONS, is_int, is_real, pair
from .draws import GAMMA, M64, Key, epoch_state, fmix
from .normalization import IMAGENET_MEAN, IMAGENET_STD, normalize
from .ops import (
    _OP_TYPES,
    CenterCrop,
    CropPlan,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    _Op,
)
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
