"""How ``convert_images`` stores each image of an encoded field (``encoding=``).

:func:`choose_encoding` resolves ``"auto"`` and refuses combinations that would lose data;
:func:`stored_as_is` tells which JPEG files are kept byte for byte; :func:`image_bytes` gives
the bytes one image is stored as.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError, SourceError
from ...images.decoders import ImageDecoder, image_decoder
from ...images.encoding import encode_image
from ...images.pillow import UndecodableImage
from ...util.messages import keyword
from ..engine.encoded import image_capacity
from .check import Checked
from .scan import ImageEntry

#: the options the messages below advise (the command spells them --encoding png ...)
_PNG, _RAW, _RGB = keyword("encoding", "png"), keyword("encoding", "raw"), keyword("mode", "RGB")

__all__ = ["choose_encoding", "image_bytes", "stored_as_is"]

_JPEG_SUFFIXES = frozenset({".jpg", ".jpeg", ".jpe", ".jfif"})


def choose_encoding(
    encoding: str, entries: Sequence[ImageEntry], channels: int, dtype: np.dtype[Any]
) -> str:
    """The encoding of the ``image`` field: ``encoding``, or for ``"auto"`` the rule below.

    ``"auto"``: ``"jpeg"`` when every file is a JPEG (by its name) and the stored images
    are 8-bit gray or RGB - they were lossy already, and JPEG q90 is about 10x smaller than
    their pixels and decodes at 4,000-6,000 images/s per core; otherwise ``"raw"``, so that
    lossless sources (PNG, TIFF, 16-bit) stay bit-exact (PNG would be 1.5-2x smaller than
    raw but decodes several times slower than LZ4-compressed pixels).
    """
    if encoding in ("jpeg", "webp") and (dtype != np.uint8 or channels not in (1, 3, 4)):
        raise SourceError(
            f"{keyword('encoding', encoding)} stores 8-bit gray or colour images; these are "
            f"{channels}-channel {dtype}: use {_PNG} (lossless) or {_RAW}"
        )
    if encoding == "yuv420" and (dtype != np.uint8 or channels not in (1, 3)):
        raise SourceError(
            f"{keyword('encoding', 'yuv420')} stores 8-bit gray or RGB images; these are "
            f"{channels}-channel {dtype}: use {_PNG} (lossless) or {_RAW}, or {_RGB}"
        )
    if encoding == "jpeg" and channels == 4:
        raise SourceError(
            f"{keyword('encoding', 'jpeg')} has no alpha channel; these images have 4 "
            f"channels: use {_PNG} or {keyword('encoding', 'webp')}, or {_RGB}"
        )
    if encoding != "auto":
        return encoding
    jpeg = all(os.path.splitext(e.path)[1].lower() in _JPEG_SUFFIXES for e in entries)
    return "jpeg" if jpeg and dtype == np.uint8 and channels in (1, 3) else "raw"


def stored_as_is(
    encoding: str,
    checked: Sequence[Checked],
    shapes: npt.NDArray[np.int64],
    orig_size: npt.NDArray[np.int32],
    dtype: np.dtype[Any],
) -> npt.NDArray[np.bool_]:
    """Which files a JPEG field keeps byte for byte: plain JPEGs (:attr:`Probe.plain_jpeg`)
    that are not resized and fit their share of the bytes (not, say, a tiny image with a
    huge EXIF thumbnail)."""
    if encoding != "jpeg":
        return np.zeros(len(checked), bool)
    unchanged = (shapes[:, 1:] == orig_size).all(axis=1)
    decoded = np.prod(shapes, axis=1, dtype=np.int64) * dtype.itemsize
    fits = np.array([c.size for c in checked], np.int64) <= image_capacity(decoded)
    plain = np.array([c.probe.plain_jpeg for c in checked], bool)
    as_is: npt.NDArray[np.bool_] = plain & unchanged & fits
    return as_is


def image_bytes(
    path: str,
    shape: tuple[int, ...],
    *,
    as_is: bool,
    load: Callable[[], npt.NDArray[Any]],
    encoding: str,
    quality: int,
) -> bytes:
    """The bytes one image (stored shape ``(C, H, W)``) is kept as.

    A JPEG the conversion would not change (``as_is``) is stored as it is, after a decode at
    1/8 scale that checks it: libjpeg-turbo (the library that decodes it when read) still
    Huffman-decodes every coefficient, so truncated or corrupt data raises, at 0.6 of a full
    decode. Its pixels, when read, are bit-exact with the raw conversion's (same library,
    same default IDCT and upsampling): no second lossy generation, and no encode. Every other
    image is decoded by the policy (``load``) and encoded at ``quality``.
    """
    c, h, w = shape
    data = b""
    if as_is:
        try:
            with open(path, "rb") as fh:
                data = fh.read(image_capacity(c * h * w) + 1)
        except OSError as err:
            raise UndecodableImage(f"{path}: {err}", path=path, reason=str(err)) from err
    if not data or len(data) > image_capacity(c * h * w):  # the file grew since its check
        return encode_image(_hwc(load()), encoding, quality)  # type: ignore[arg-type]
    try:
        found = _jpeg().shape_and_dtype(data)[0][:2]
        if found != (h, w):
            raise ValueError(f"its header says {found[0]}x{found[1]}, the check found {h}x{w}")
        _jpeg().decode_scaled(data, 1, 1)
    except (CorruptChunkError, ValueError) as err:
        raise UndecodableImage(f"{path}: {err}", path=path, reason=str(err)) from err
    return data


def _hwc(image: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A stored ``(C, H, W)`` image as encoders take it: ``(H, W, C)``, ``(H, W)`` if gray."""
    return image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0)


_decoder: list[ImageDecoder] = []


def _jpeg() -> ImageDecoder:
    """This process's JPEG decoder (made on first use)."""
    if not _decoder:
        _decoder.append(image_decoder("jpeg"))
    return _decoder[0]
