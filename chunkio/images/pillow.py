"""How an image file becomes a ``(C, H, W)`` array: the declared Pillow decode policy.

Every image goes through the same steps, in this order:

1. **Open with limits.** :data:`PIL.Image.MAX_IMAGE_PIXELS` is enforced from the header, before
   any pixel is decoded (so memory stays bounded); Pillow's ``DecompressionBombWarning`` is
   turned into an error for that image, not just its ``DecompressionBombError``.
   ``ImageFile.LOAD_TRUNCATED_IMAGES`` is never set: a truncated file is an error, not an image
   padded with grey.
2. **First frame only** of multi-frame files (GIF, APNG, multi-page TIFF).
3. **EXIF orientation** applied with :func:`PIL.ImageOps.exif_transpose`: a 400x300 JPEG with
   Orientation=6 is stored 300x400.
4. **Mode policy** (``mode=``):

   ``"RGB"`` (default)
       3 channels, uint8. L/1 are replicated, CMYK/YCbCr converted by Pillow, palette images
       expanded. **Alpha is dropped, not composited** (LA, RGBA, P/PA with transparency): the
       stored colour is what lies under the alpha, as with torchvision's ``pil_loader``. Images
       with more than 8 bits per sample (``I;16``, ``I``) are refused rather than clipped.
   ``"L"``
       1 channel. 8-bit images become luma (ITU-R 601-2, Pillow's ``convert("L")``, alpha
       dropped); 16-bit images (``I;16``, and ``I`` whose values fit) stay uint16, unscaled.
   ``"keep"``
       The native mode, with palettes expanded (P -> RGB: palette transparency is dropped;
       PA -> RGBA), 1 -> L, 16-bit -> uint16. All images must agree (checked before writing).

   Float images (``F``) and modes Pillow cannot convert are refused. Pillow itself reads
   48/64-bit RGB(A) PNGs as 8-bit RGB(A); that reduction happens before chunkio sees them.
5. **Resize** (``size=(H, W)``) with Pillow's antialiased bilinear filter: ``"shorter-crop"``
   scales so the image covers the target then crops the centre; ``"pad"`` scales so it fits
   then pads with zeros, centred; ``"stretch"`` ignores the aspect ratio.

PNG chunk CRCs are checked here (Pillow does not check them for image data).

Plain JPEGs (one frame, gray or YCbCr, no EXIF rotation, kept at their size) take a shorter
road to the same result: headers read and pixels decoded by libjpeg-turbo without Pillow
(:mod:`chunkio.images.jpeg`), bit-exact with the steps above.
"""

from __future__ import annotations

import struct
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps

from ..errors import SourceError
from .encoding import PNG_SIGNATURE
from .jpeg import (
    EOI,
    ORIENTATION_TAG,
    SOI,
    JpegHeader,
    decode_plain,
    ends_with_eoi,
    parse_header,
    read_header,
)

__all__ = [
    "DecodePolicy",
    "UndecodableImage",
    "ImageMode",
    "Probe",
    "ResizeMode",
    "load_image",
    "probe_image",
    "target_format",
]

ImageMode = Literal["RGB", "L", "keep"]
ResizeMode = Literal["shorter-crop", "pad", "stretch"]

_EIGHT_BIT = frozenset(
    {"1", "L", "P", "PA", "LA", "La", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr"}
)
_SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
#: native mode -> the mode ``mode="keep"`` stores
_KEEP = {
    "1": "L",
    "P": "RGB",
    "PA": "RGBA",
    "La": "LA",
    "RGBa": "RGBA",
    "RGBX": "RGB",
    "I;16L": "I;16",
    "I;16B": "I;16",
    "I;16N": "I;16",
    "I": "I;16",
}
_SWAPS_AXES = frozenset({5, 6, 7, 8})  # EXIF orientations that transpose the image
_JPEG = frozenset({"JPEG", "MPO"})  # Pillow opens multi-picture JPEGs as MPO


@dataclass(frozen=True)
class DecodePolicy:
    """Mode and size policy of a conversion (see the module docstring)."""

    mode: ImageMode = "RGB"
    size: tuple[int, int] | None = None
    resize: ResizeMode = "shorter-crop"
    #: shrink images whose longer side exceeds this (aspect kept, Lanczos); never enlarge
    max_size: int | None = None

    def __post_init__(self) -> None:
        if self.max_size is not None and (
            isinstance(self.max_size, bool)
            or not isinstance(self.max_size, int)
            or self.max_size < 1
        ):
            raise ValueError(f"max_size must be None or an int >= 1; got {self.max_size!r}")
        if self.max_size is not None and self.size is not None:
            raise ValueError(
                f"give size (every image resized to it) or max_size (only larger images "
                f"shrunk), not both; got size {self.size} and max_size {self.max_size}"
            )
        if self.mode not in ("RGB", "L", "keep"):
            raise ValueError(f"mode must be 'RGB', 'L' or 'keep'; got {self.mode!r}")
        if self.resize not in ("shorter-crop", "pad", "stretch"):
            raise ValueError(
                f"resize must be 'shorter-crop', 'pad' or 'stretch'; got {self.resize!r}"
            )
        if self.size is not None and (
            len(self.size) != 2 or not all(isinstance(s, int) and s >= 1 for s in self.size)
        ):
            raise ValueError(f"size must be None, an int or (H, W) ints >= 1; got {self.size!r}")


@dataclass(frozen=True)
class Probe:
    """What the checking pass learned about one file (``error`` set when it is unusable)."""

    height: int = 0
    width: int = 0
    #: the Pillow mode the image is stored in after the policy (e.g. "RGB", "L", "I;16")
    stored_mode: str = ""
    frames: int = 1
    error: str | None = None
    #: a single-frame JPEG with no EXIF rotation whose mode the policy keeps (RGB or L): its
    #: bytes decode to exactly the pixels stored for it when it is not resized
    plain_jpeg: bool = False

    @property
    def channels(self) -> int:
        return Image.getmodebands(self.stored_mode)

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(np.uint16 if self.stored_mode == "I;16" else np.uint8)


def target_format(native: str, mode: ImageMode) -> str:
    """The mode an image of Pillow mode ``native`` is stored in; ``ValueError`` if refused.

    >>> target_format("P", "RGB"), target_format("I;16B", "L"), target_format("CMYK", "keep")
    ('RGB', 'I;16', 'CMYK')
    """
    if native in _SIXTEEN_BIT:
        if mode == "RGB":
            raise ValueError(
                f"{native} images hold more than 8 bits per sample; storing them as 8-bit RGB "
                "would clip. Use mode='L' or mode='keep' to store them as uint16"
            )
        return "I;16"
    if native not in _EIGHT_BIT:
        raise ValueError(f"Pillow mode {native!r} is not supported (float or unusual colour space)")
    if mode == "keep":
        return _KEEP.get(native, native)
    return mode


def _open(path: str) -> Image.Image:
    """Open with the decompression-bomb limit enforced as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
            raise _Bad(f"decompression bomb refused before decoding: {err}") from err


class UndecodableImage(SourceError):
    """A file that cannot be decoded by the policy; ``path`` and ``reason`` say which and why.

    Raised by :func:`load_image`. Both attributes survive pickling (a pool worker's error
    reaches the converting process whole), and default to ``None`` so that code re-raising
    the error with more context (``type(err)(message)``) can still build one.
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.path = path
        self.reason = reason


class _Bad(Exception):
    """A file-level problem; carries the reason only (the path is added by the caller)."""


def _load_first_frame(im: Image.Image, *, draft: bool) -> None:
    if draft and im.format in _JPEG:
        # Decoding at 1/8 scale still reads every byte of the entropy-coded data, so it finds
        # truncation at a fraction of the cost of a full decode.
        im.draft(im.mode, (max(1, im.width // 8), max(1, im.height // 8)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        im.load()


def _check_png_crcs(path: str) -> None:
    """Verify every PNG chunk's CRC (Pillow skips the check for image data)."""
    with open(path, "rb") as fh:
        data = fh.read()
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 8 + length
        if end + 4 > len(data):
            raise _Bad(f"PNG chunk {kind!r} at byte {pos} runs past the end of the file")
        stored = int.from_bytes(data[end : end + 4], "big")
        if zlib.crc32(data[pos + 4 : end]) != stored:
            raise _Bad(f"PNG chunk {kind!r} at byte {pos} fails its CRC check (corrupt file)")
        if kind == b"IEND":
            return
        pos = end + 4
    raise _Bad("PNG file ends before its IEND chunk (truncated)")


def probe_image(path: str, policy: DecodePolicy, *, thorough: bool = False) -> Probe:
    """Screen ``path`` and report its oriented size and stored mode (the plan of its decode).

    By default the screen costs a fraction of a decode: the headers are parsed (size, mode,
    frames, EXIF orientation, the decompression-bomb limit), PNG chunk CRCs are checked, and
    a JPEG that ends with its EOI marker is taken as whole; one that does not (truncated, or
    with bytes appended) is decoded at 1/8 scale (Pillow's ``draft``, which still reads every
    byte of the entropy-coded data) to tell which. Other formats are decoded in full.
    ``thorough=True`` decodes JPEGs at 1/8 scale whatever their last bytes: a damaged
    Huffman table, say, passes the cheap screen and fails only when pixels are decoded.

    Plain JPEGs ending with their end marker are screened from their headers alone
    (:func:`~chunkio.images.jpeg.read_header`, same result, a tenth of the time).

    Never raises for a bad file: the problem is returned in :attr:`Probe.error`.
    """
    if not thorough:
        fast = _probe_jpeg(path, policy)
        if fast is not None:
            return fast
    try:
        with _open(path) as im:
            frames = int(getattr(im, "n_frames", 1))
            stored = target_format(im.mode, policy.mode)
            width, height = im.size  # before draft() shrinks it
            if im.format == "PNG":
                _check_png_crcs(path)
            elif im.format not in _JPEG or thorough or not ends_with_eoi(path):
                _load_first_frame(im, draft=True)
            orientation = im.getexif().get(ORIENTATION_TAG, 1)
            plain = (
                im.format == "JPEG"
                and frames == 1
                and orientation == 1
                and im.mode == stored
                and stored in ("RGB", "L")
            )
    except _Bad as err:
        return Probe(error=str(err))
    except Exception as err:  # Pillow plugins raise many types for malformed files
        return Probe(error=_reason(err))
    if orientation in _SWAPS_AXES:
        width, height = height, width
    return Probe(height, width, stored, frames, plain_jpeg=plain)


def _probe_jpeg(path: str, policy: DecodePolicy) -> Probe | None:
    """:func:`probe_image` of a JPEG from its headers; ``None``: ask Pillow."""
    try:
        header = read_header(path)
    except OSError:
        return None
    if header is None or not header.ends_with_eoi or _bomb(header):
        return None
    stored = target_format(header.mode, policy.mode)
    height, width = header.height, header.width
    if header.orientation in _SWAPS_AXES:
        height, width = width, height
    plain = header.orientation == 1 and header.mode == stored
    return Probe(height, width, stored, 1, plain_jpeg=plain)


def _bomb(header: JpegHeader) -> bool:
    """Whether Pillow would refuse (or warn about) this many pixels: its message is kept."""
    limit = Image.MAX_IMAGE_PIXELS
    return limit is not None and header.height * header.width > limit


def _reason(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return f"cannot decode ({type(err).__name__}: {text})"


def _convert(im: Image.Image, stored: str) -> Image.Image:
    if stored == "I;16":
        if im.mode == "I":
            arr = np.asarray(im)
            if arr.size and (arr.min() < 0 or arr.max() > 0xFFFF):
                raise _Bad(
                    f"32-bit integer image has values in [{arr.min()}, {arr.max()}], outside "
                    "the uint16 range it would be stored in (chunkio never clips)"
                )
            return Image.fromarray(arr.astype(np.uint16))
        return im if im.mode == "I;16" else Image.fromarray(np.asarray(im).astype(np.uint16))
    if im.mode == stored:
        return im
    if im.mode in ("P", "PA") and stored != "RGBA":
        im = im.convert("RGBA")  # Pillow's P->RGB path warns about byte transparency
    return im.convert(stored)


def _resize(
    im: Image.Image, size: tuple[int, int], how: ResizeMode
) -> tuple[Image.Image, tuple[int, int] | None]:
    """Resize to ``size`` by policy; return the image and, for ``"pad"``, its top-left corner."""
    th, tw = size
    w, h = im.size
    if (h, w) == (th, tw):
        return im, None
    bilinear = Image.Resampling.BILINEAR
    if how == "stretch":
        return im.resize((tw, th), bilinear), None
    if how == "shorter-crop":
        scale = max(th / h, tw / w)
        rw, rh = max(tw, round(w * scale)), max(th, round(h * scale))
        left, top = (rw - tw) // 2, (rh - th) // 2
        return im.resize((rw, rh), bilinear).crop((left, top, left + tw, top + th)), None
    scale = min(th / h, tw / w)
    rw, rh = max(1, min(tw, round(w * scale))), max(1, min(th, round(h * scale)))
    return im.resize((rw, rh), bilinear), ((th - rh) // 2, (tw - rw) // 2)


def fitted_size(height: int, width: int, max_size: int | None) -> tuple[int, int]:
    """``(height, width)`` shrunk so that the longer side is at most ``max_size``.

    >>> fitted_size(300, 600, 256), fitted_size(100, 50, 256), fitted_size(7, 5, None)
    ((128, 256), (100, 50), (7, 5))
    """
    longer = max(height, width)
    if max_size is None or longer <= max_size:
        return height, width
    scale = max_size / longer
    return max(1, round(height * scale)), max(1, round(width * scale))


def load_image(path: str, policy: DecodePolicy, *, stored: str) -> npt.NDArray[Any]:
    """Decode ``path`` by ``policy`` into a ``(C, H, W)`` uint8/uint16 array.

    ``stored`` is the mode from the checking pass (:attr:`Probe.stored_mode`).

    Raises
    ------
    UndecodableImage
        The file cannot be decoded; the message names it and says why.
    """
    pixels = _plain_jpeg(path, policy, stored)
    if pixels is not None:
        return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    arr, pad = _pillow_pixels(path, policy, stored)
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if pad is None or policy.size is None:
        return arr
    canvas = np.zeros((arr.shape[0], *policy.size), dtype=arr.dtype)
    top, left = pad
    canvas[:, top : top + arr.shape[1], left : left + arr.shape[2]] = arr
    return canvas


def _plain_jpeg(path: str, policy: DecodePolicy, stored: str) -> npt.NDArray[Any] | None:
    """The pixels of a plain JPEG kept at its size, decoded by libjpeg-turbo directly
    (:func:`~chunkio.images.jpeg.decode_plain`); ``None``: decode with Pillow."""
    if policy.size is not None:
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read(3)
            if data != SOI:  # not a JPEG: not read any further here
                return None
            data += fh.read()
    except OSError:
        return None  # Pillow names the problem
    header = parse_header(data, ends_with_eoi=data.endswith(EOI))
    if header is None or header.orientation != 1 or header.mode != stored or _bomb(header):
        return None
    if fitted_size(header.height, header.width, policy.max_size) != (header.height, header.width):
        return None
    return decode_plain(data, header, lambda: _pillow_pixels(path, policy, stored)[0])


def _pillow_pixels(
    path: str, policy: DecodePolicy, stored: str
) -> tuple[npt.NDArray[Any], tuple[int, int] | None]:
    """Pillow's decode by ``policy``: ``(H, W)`` or ``(H, W, C)`` pixels, and the top-left
    corner of a ``"pad"`` resize (else ``None``)."""
    try:
        with _open(path) as im:
            _load_first_frame(im, draft=False)
            ImageOps.exif_transpose(im, in_place=True)
            out = _convert(im, stored)
            pad = None
            if policy.size is not None:
                out, pad = _resize(out, policy.size, policy.resize)
            elif policy.max_size is not None:
                h, w = fitted_size(out.height, out.width, policy.max_size)
                if (h, w) != (out.height, out.width):
                    out = out.resize((w, h), Image.Resampling.LANCZOS)
            arr = np.asarray(out)
    except _Bad as err:
        raise UndecodableImage(f"{path}: {err}", path=path, reason=str(err)) from err
    except Exception as err:
        reason = _reason(err)
        raise UndecodableImage(f"{path}: {reason}", path=path, reason=reason) from err
    return arr, pad
