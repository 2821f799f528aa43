"""Encode images to JPEG, PNG or WebP bytes and decode them straight into batch rows.

An encoded image field stores each sample as its encoded bytes; a batch read decodes sample
``i`` into row ``i`` of a preallocated batch array, possibly from several threads.
:func:`encode_image` makes the bytes, :func:`decoded_shape` reads a decoded shape from the
header alone, and :func:`image_decoder` returns an :class:`ImageDecoder` whose
:meth:`~ImageDecoder.decode_into` writes into a given ``(H, W[, C])`` array.

Encodings
---------
``jpeg``
    simplejpeg (libjpeg-turbo), RGB or gray uint8 only. Chroma subsampling 4:2:0 below
    quality 95 (the Pillow / OpenCV / FFCV default), 4:4:4 from 95 up, where a user asks for
    near-lossless and subsampled chroma would dominate the error (at q90, 4:4:4 buys a little
    PSNR for about a third more bytes and slower decoding).
``png``
    Pillow, lossless uint8 gray/RGB/RGBA and uint16 gray; uint16 with 3 or 4 channels needs
    imagecodecs (Pillow reads 16-bit colour PNGs as 8-bit). ``compress_level=6`` (Pillow's
    default): nearly level 9's size, decoding as fast as level 1, encoding several times faster
    than level 9.
``webp``
    Pillow, lossy at ``quality`` (``method=4``), lossless at ``quality=100`` (``exact``: colour
    under transparent pixels is kept). WebP has no gray mode: a gray image is stored as RGB with
    equal channels; :meth:`ImageDecoder.decode_into` into a gray row takes its luminance.
``yuv420``
    Pre-decoded pixels (:mod:`chunkio.images.yuv`): JFIF Y'CbCr with 4:2:0 chroma, 1.5 bytes
    per pixel before LZ4, in bands of rows, so that reading a crop is LZ4 and colour
    conversion of its rows only. uint8 gray or RGB; about 5x JPEG q90's size, no quantisation
    loss (only the chroma subsampling's). ``quality`` is ignored.
``raw``
    The array's C-order bytes (no header: the caller keeps shape and dtype).

Default decoders
----------------
Chosen by measurement: ``python -m benchmarks.bench_decoders`` (images/s per library on one
and two threads, bytes and PSNR per encoding) and a GIL probe; the figures of the chunk
encodings above and of the decoders below are in README.md, "Choosing the defaults". The choice
rests on ratios between libraries, not on absolute rates (which move with the machine's load).

- ``jpeg``: **simplejpeg**. As fast as imagecodecs into a row, faster than Pillow; decodes
  straight into the row (``decode_jpeg(buffer=...)``), raises on truncated or corrupt data
  (``strict=True``; imagecodecs returns a gray-padded image for a truncated file, caught here
  by an end-marker check only), scales in the DCT, and is a hard dependency of chunkio.
- ``png``: **imagecodecs** when installed (faster than Pillow, decodes into the row, reads
  16-bit colour), else **Pillow**. Both are lossless: the pixels do not depend on which is present.
- ``webp``: **imagecodecs** when installed (a little faster than Pillow, decodes into the
  row), else **Pillow**; both use libwebp and give identical pixels.
- ``yuv420``: **chunkio** itself (numcodecs' LZ4, then its C conversion, else numpy's).

``ImageDecoder.releases_gil`` is True for every decoder here (all release the GIL for most of
the decode).
"""

from __future__ import annotations

import io
import struct
from typing import Any, ClassVar, Literal

import numpy as np

from ..errors import CorruptChunkError, OptionalDependencyError
from . import jpeg, yuv

__all__ = [
    "ENCODINGS",
    "Encoding",
    "ImageDecoder",
    "MissingDecoderError",
    "check_encoding",
    "decoded_shape",
    "encode_image",
]

ENCODINGS = ("raw", "jpeg", "png", "webp", "yuv420")
Encoding = Literal["raw", "jpeg", "png", "webp", "yuv420"]

#: zlib level of PNG encoding (see the module docstring for the measurement)
PNG_COMPRESS_LEVEL = 6

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: PNG colour type -> channels (0 gray, 2 RGB, 3 palette -> RGB(A), 4 gray+alpha, 6 RGBA)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}

Data = np.ndarray | bytes | bytearray | memoryview


class MissingDecoderError(OptionalDependencyError):
    """The requested image decoder library is unknown or not installed."""


def check_encoding(encoding: str, quality: int) -> None:
    """Validate an encoding name and quality before anything is written.

    Parameters
    ----------
    encoding
        One of :data:`ENCODINGS`.
    quality
        An int in 1..100 for ``jpeg`` and ``webp`` (100 makes WebP lossless); ignored for
        ``png``, ``yuv420`` and ``raw``.

    Raises
    ------
    ValueError
        The encoding is unknown or the quality is out of range.
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"image encoding must be one of {', '.join(ENCODINGS)}; got {encoding!r}")
    if encoding in ("jpeg", "webp") and (
        isinstance(quality, bool)
        or not isinstance(quality, int | np.integer)
        or not 1 <= quality <= 100
    ):
        raise ValueError(f"{encoding} quality must be an int in 1..100; got {quality!r}")


def _image_mode(image: np.ndarray) -> tuple[np.ndarray, int]:
    """Return ``image`` as 2-D (gray) or 3-D (H, W, C) and its channel count; check its shape."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"image must be a numpy array; got {type(image).__name__}")
    if image.ndim == 2:
        return image, 1
    if image.ndim == 3 and image.shape[2] in (1, 3, 4):
        return (image[:, :, 0] if image.shape[2] == 1 else image), image.shape[2]
    raise ValueError(f"image must be (H, W) or (H, W, C) with C in 1, 3, 4; got {image.shape}")


def encode_image(image: np.ndarray, encoding: Encoding, quality: int = 90) -> bytes:
    """Encode one image.

    Parameters
    ----------
    image
        ``(H, W)`` or ``(H, W, C)`` with C in 1, 3, 4; uint8 (``png`` also uint16, ``raw`` any
        dtype). ``jpeg`` and ``yuv420`` take gray or RGB only.
    encoding
        ``"jpeg"``, ``"png"``, ``"webp"``, ``"yuv420"`` or ``"raw"`` (see the module
        docstring).
    quality
        1..100 for ``jpeg`` and ``webp`` (WebP at 100 is lossless); ignored otherwise.

    Returns
    -------
    bytes
        The encoded image. Gray ``(H, W, 1)`` images decode as ``(H, W)`` unless decoded into an
        ``(H, W, 1)`` array with :meth:`ImageDecoder.decode_into`.

    Raises
    ------
    ValueError
        Bad encoding or quality, or an image the encoding cannot hold.
    """
    check_encoding(encoding, quality)
    if encoding == "raw":
        if not isinstance(image, np.ndarray) or image.ndim not in (2, 3):
            raise ValueError(
                f"image must be a 2-D or 3-D array; got {getattr(image, 'shape', image)}"
            )
        return np.ascontiguousarray(image).tobytes()
    plane, channels = _image_mode(image)
    allowed = ("uint8", "uint16") if encoding == "png" else ("uint8",)
    if image.dtype.name not in allowed:
        raise ValueError(
            f"{encoding} holds {' or '.join(allowed)} images; got {image.dtype}"
            + ("; use png (uint16) or raw" if encoding != "png" else "; use raw")
        )
    if encoding == "jpeg":
        if channels == 4:
            raise ValueError(
                "jpeg holds gray or RGB images; got 4 channels: use png or webp or raw"
            )
        return jpeg.encode(plane, quality)
    if encoding == "yuv420":
        if channels == 4:
            raise ValueError("yuv420 holds gray or RGB images; got 4 channels: use png or raw")
        return yuv.encode(plane)
    if encoding == "png" and plane.dtype == np.uint16 and channels > 1:
        try:
            import imagecodecs
        except ImportError as err:
            raise MissingDecoderError(
                "16-bit PNG with colour channels needs imagecodecs (Pillow writes 16-bit gray "
                "only): pip install imagecodecs"
            ) from err
        return bytes(imagecodecs.png_encode(np.ascontiguousarray(plane), level=PNG_COMPRESS_LEVEL))
    from PIL import Image

    pil = Image.fromarray(np.ascontiguousarray(plane))
    buf = io.BytesIO()
    if encoding == "png":
        pil.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    elif quality == 100:
        pil.save(buf, format="WEBP", lossless=True, exact=True, quality=100)
    else:
        pil.save(buf, format="WEBP", quality=int(quality), method=4)
    return buf.getvalue()


def as_buffer(data: Data) -> Any:
    """Return encoded ``data`` as a contiguous bytes-like object (no copy when already one)."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError(f"encoded image data must be 1-D uint8; got {data.dtype} {data.shape}")
        return data if data.flags.c_contiguous else np.ascontiguousarray(data)
    if isinstance(data, memoryview) and not data.c_contiguous:
        return data.tobytes()
    return data


def corrupt(encoding: str, library: str, err: BaseException) -> CorruptChunkError:
    return CorruptChunkError(f"corrupt {encoding} image: {library}: {err}")


def require_end(data: Any, marker: bytes, encoding: str, library: str) -> None:
    """Raise CorruptChunkError unless ``marker`` (the end-of-image mark) is in the last 1 KiB.

    Catches a truncation that the library would decode without complaint (libjpeg pads a
    truncated JPEG with gray; a PNG cut after its pixel data decodes fully).
    """
    if marker not in bytes(memoryview(data)[-1024:]):
        raise CorruptChunkError(
            f"corrupt {encoding} image: {library}: truncated (no end-of-image marker)"
        )


def jpeg_shape(data: Any) -> tuple[int, int, int]:
    """``(height, width, components)`` of a JPEG (:func:`chunkio.images.jpeg.frame_shape`)."""
    try:
        return jpeg.frame_shape(data)
    except ValueError as err:
        raise corrupt("jpeg", "header", err) from err


def png_header(data: Any) -> tuple[int, int, int, int]:
    """(height, width, channels, bit depth) from a PNG's IHDR."""
    head = bytes(memoryview(data)[:29])
    if len(head) < 29 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise CorruptChunkError("corrupt png image: no PNG signature and IHDR header")
    w, h, depth, colour = struct.unpack(">IIBB", head[16:26])
    if colour not in _PNG_CHANNELS or w == 0 or h == 0:
        raise CorruptChunkError(f"corrupt png image: bad IHDR (colour type {colour}, {w}x{h})")
    return h, w, _PNG_CHANNELS[colour], depth


def _webp_header(data: Any) -> tuple[int, int, int]:
    """(height, width, channels) from a WebP's RIFF header: 4 channels if it has alpha, else 3."""
    head = bytes(memoryview(data)[:30])
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        raise CorruptChunkError("corrupt webp image: no RIFF/WEBP header")
    kind = head[12:16]
    if kind == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy: key frame header
        w, h = struct.unpack("<HH", head[26:30])
        return h & 0x3FFF, w & 0x3FFF, 3
    if kind == b"VP8L" and head[20] == 0x2F:  # lossless: 14-bit sizes - 1, alpha hint
        bits = int.from_bytes(head[21:25], "little")
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1, 4 if bits >> 28 & 1 else 3
    if kind == b"VP8X":  # extended: flags, 24-bit canvas sizes - 1
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return h, w, 4 if head[20] & 0x10 else 3
    raise CorruptChunkError(f"corrupt webp image: unknown WebP chunk {kind!r}")


def decoded_shape(data: Data, encoding: str) -> tuple[int, ...]:
    """Shape an encoded image decodes to, read from its header alone.

    Parameters
    ----------
    data
        The encoded bytes.
    encoding
        ``"jpeg"``, ``"png"``, ``"webp"`` or ``"yuv420"`` (``raw`` bytes have no header).

    Returns
    -------
    tuple of int
        ``(H, W)`` for gray images, ``(H, W, C)`` otherwise. WebP is always 3 or 4 channels.
        Palette PNGs report 3 channels (decoders expand them to RGB; RGBA if transparent).

    Raises
    ------
    chunkio.errors.CorruptChunkError
        The header cannot be parsed.
    ValueError
        ``raw`` or an unknown encoding.
    """
    buf = as_buffer(data)
    if encoding == "jpeg":
        h, w, components = jpeg_shape(buf)
        return (h, w) if components == 1 else (h, w, 3)
    if encoding == "png":
        h, w, c, _ = png_header(buf)
        return (h, w) if c == 1 else (h, w, c)
    if encoding == "webp":
        return _webp_header(buf)
    if encoding == "yuv420":
        h, w, c = yuv.header(buf)
        return (h, w) if c == 1 else (h, w, c)
    if encoding == "raw":
        raise ValueError("raw image bytes carry no shape; the field stores it")
    raise ValueError(f"image encoding must be one of {', '.join(ENCODINGS)}; got {encoding!r}")


def _check_out(out: np.ndarray, shape: tuple[int, ...], dtype: Any, encoding: str) -> None:
    """Raise ValueError unless ``out`` fits an image of ``shape`` and ``dtype``.

    A gray ``(H, W)`` image also fits an ``(H, W, 1)`` array.
    """
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array; got {type(out).__name__}")
    fits = out.shape == shape or (len(shape) == 2 and out.shape == (*shape, 1))
    if not fits or out.dtype != np.dtype(dtype):
        raise ValueError(
            f"{encoding} image decodes to {shape} {np.dtype(dtype)}; out is {out.shape} {out.dtype}"
        )
    if not out.flags.writeable:
        raise ValueError("out is read-only")


def _luminance(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma of uint8 RGB, rounded exactly like Pillow's ``convert("L")``."""
    r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)


class ImageDecoder:
    """Decodes one encoding with one library; picklable, safe to share between threads.

    Attributes
    ----------
    encoding : str
        What it decodes (``"jpeg"``, ``"png"``, ``"webp"``, ``"raw"``).
    library : str
        What decodes it (``"simplejpeg"``, ``"imagecodecs"``, ``"Pillow"``, ``"numpy"``).
    releases_gil : bool
        Whether threads decode in parallel (measured by ``benchmarks/bench_decoders.py``).
    """

    library: ClassVar[str] = ""
    releases_gil: ClassVar[bool] = True

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding

    def __repr__(self) -> str:
        return f"{type(self).__name__}(encoding={self.encoding!r}, library={self.library!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ImageDecoder)
            and type(other) is type(self)
            and other.encoding == self.encoding
        )

    def __hash__(self) -> int:
        return hash((type(self), self.encoding))

    def shape_and_dtype(self, data: Data) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Decoded shape and dtype of ``data`` from its header."""
        buf = as_buffer(data)
        if self.encoding == "png":
            h, w, c, depth = png_header(buf)
            return ((h, w) if c == 1 else (h, w, c)), np.dtype(
                np.uint16 if depth == 16 else np.uint8
            )
        return decoded_shape(buf, self.encoding), np.dtype(np.uint8)

    def decode_into(self, data: Data, out: np.ndarray) -> None:
        """Decode ``data`` into ``out``.

        Parameters
        ----------
        data
            The encoded bytes (often a uint8 view into a larger chunk buffer).
        out
            A writable array of exactly the decoded shape and dtype (a gray image also fits
            ``(H, W, 1)``; a WebP also fits a gray ``(H, W)`` / ``(H, W, 1)`` array, which gets
            its luminance). Written in place: straight from the library where it allows,
            otherwise with one copy.

        Raises
        ------
        ValueError
            ``out`` has another shape or dtype (the message gives both).
        chunkio.errors.CorruptChunkError
            The bytes do not decode (truncated or corrupt).
        """
        buf = as_buffer(data)
        shape, dtype = self.shape_and_dtype(buf)
        if (
            self.encoding == "webp"
            and len(shape) == 3
            and shape[2] == 3
            and out.shape in (shape[:2], (*shape[:2], 1))
        ):
            _check_out(out, shape[:2], dtype, self.encoding)
            rgb = np.empty(shape, np.uint8)
            self._decode_checked(buf, rgb)
            (out[..., 0] if out.ndim == 3 else out)[...] = _luminance(rgb)
            return
        _check_out(out, shape, dtype, self.encoding)
        self._decode_checked(buf, out[..., 0] if out.ndim > len(shape) else out)  # a view

    def decode(self, data: Data) -> np.ndarray:
        """Decode ``data`` into a new array of :func:`decoded_shape` (``(H, W)`` if gray)."""
        buf = as_buffer(data)
        shape, dtype = self.shape_and_dtype(buf)
        out = np.empty(shape, dtype)
        self._decode_checked(buf, out)
        return out

    def decode_scaled(self, data: Data, min_height: int, min_width: int) -> np.ndarray:
        """Decode at the smallest size still at least ``(min_height, min_width)``.

        JPEG decoders use the DCT scale factors 1, 1/2, 1/4, 1/8 where the library can (output
        size ``ceil(H / d)``); other encodings and libraries decode at full size. The caller
        derives the scale from ``result.shape[0]`` and the full height.
        """
        return self.decode(data)

    def _decode_into(self, buf: Any, out: np.ndarray) -> None:
        raise NotImplementedError

    def _decode_checked(self, buf: Any, out: np.ndarray) -> None:
        if self.encoding == "png":
            require_end(buf, b"IEND", "png", self.library)
        self._decode_into(buf, out)


class RawDecoder(ImageDecoder):
    """``raw``: the bytes are the pixels."""

    library = "numpy"

    def decode_into(self, data: Data, out: np.ndarray) -> None:
        buf = np.frombuffer(as_buffer(data), np.uint8)
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array; got {type(out).__name__}")
        if buf.size != out.nbytes:
            raise ValueError(
                f"raw image has {buf.size} bytes; out {out.shape} {out.dtype} needs {out.nbytes}"
            )
        out[...] = buf.view(out.dtype).reshape(out.shape)

    def decode(self, data: Data) -> np.ndarray:
        raise ValueError("raw image bytes carry no shape; use decode_into with the stored shape")

    def decode_scaled(self, data: Data, min_height: int, min_width: int) -> np.ndarray:
        return self.decode(data)
