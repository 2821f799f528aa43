"""Decoders of encoded image fields: one per encoding and library, writing into batch rows.

:func:`image_decoder` returns an :class:`ImageDecoder` whose :meth:`~ImageDecoder.decode_into`
writes sample ``i`` of a batch straight into row ``i`` of a preallocated array, possibly from
several threads. The measurements behind the default library of each encoding are in
:mod:`chunkio.images.encodings`; JPEG is decoded by libjpeg-turbo
(:func:`chunkio.images.jpeg.decode`) unless another library is asked for.
"""

from __future__ import annotations

import io
from typing import Any, ClassVar

import numpy as np

from . import jpeg
from .encodings import (
    Data,
    Encoding,
    MissingDecoderError,
    as_buffer,
    check_encoding,
    corrupt,
    decoded_shape,
    jpeg_shape,
    png_header,
    require_end,
)

__all__ = ["ImageDecoder", "MissingDecoderError", "image_decoder"]

#: decoder libraries per encoding, preferred (measured default) first
_LIBRARIES: dict[str, tuple[str, ...]] = {
    "raw": ("numpy",),
    "jpeg": ("simplejpeg", "imagecodecs", "Pillow"),
    "png": ("imagecodecs", "Pillow"),
    "webp": ("imagecodecs", "Pillow"),
}
#: library name -> (module to import, pip package that provides it)
_PACKAGES = {
    "numpy": ("numpy", "numpy"),
    "simplejpeg": ("simplejpeg", "simplejpeg"),
    "imagecodecs": ("imagecodecs", "imagecodecs"),
    "Pillow": ("PIL.Image", "pillow"),
}


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


class _RawDecoder(ImageDecoder):
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


class _SimplejpegDecoder(ImageDecoder):
    library = "simplejpeg"

    def __init__(self, encoding: str) -> None:
        import simplejpeg  # noqa: F401  (fail here, not at the first decode)

        super().__init__(encoding)

    def _decode_into(self, buf: Any, out: np.ndarray) -> None:
        target = out if out.flags.c_contiguous else np.empty(out.shape, np.uint8)
        try:
            jpeg.decode(buf, gray=out.ndim == 2, out=target)
        except ValueError as err:
            raise corrupt("jpeg", self.library, err) from err
        if target is not out:
            out[...] = target

    def decode_scaled(self, data: Data, min_height: int, min_width: int) -> np.ndarray:
        buf = as_buffer(data)
        h, w, components = jpeg_shape(buf)
        scale = jpeg.scaled_size(h, w, min_height, min_width)
        if scale[0] == 1:
            return self.decode(buf)
        try:
            return jpeg.decode(buf, gray=components == 1, scale=scale)
        except ValueError as err:
            raise corrupt("jpeg", self.library, err) from err


class _ImagecodecsDecoder(ImageDecoder):
    library = "imagecodecs"

    def __init__(self, encoding: str) -> None:
        import imagecodecs  # noqa: F401

        super().__init__(encoding)

    def _decode_into(self, buf: Any, out: np.ndarray) -> None:
        import imagecodecs

        if self.encoding == "jpeg":
            require_end(buf, b"\xff\xd9", "jpeg", self.library)  # libjpeg pads silently
        decode = {
            "jpeg": imagecodecs.jpeg8_decode,
            "png": imagecodecs.png_decode,
            "webp": imagecodecs.webp_decode,
        }[self.encoding]
        target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
        try:
            decode(buf, out=target)
        except Exception as err:  # imagecodecs raises <Codec>Error (RuntimeError) or ValueError
            raise corrupt(self.encoding, self.library, err) from err
        if target is not out:
            out[...] = target


class _PillowDecoder(ImageDecoder):
    library = "Pillow"
    _FORMATS: ClassVar[dict[str, str]] = {"jpeg": "JPEG", "png": "PNG", "webp": "WEBP"}

    def __init__(self, encoding: str) -> None:
        import PIL.Image  # noqa: F401

        super().__init__(encoding)

    def _decode_into(self, buf: Any, out: np.ndarray) -> None:
        from PIL import Image

        if self.encoding == "png" and out.dtype == np.uint16 and out.ndim == 3:
            # Pillow reads 16-bit colour PNGs as 8-bit: hand over to imagecodecs
            try:
                _ImagecodecsDecoder("png")._decode_into(buf, out)
            except ImportError as err:
                raise MissingDecoderError(
                    "16-bit colour PNG needs imagecodecs (Pillow reads it as 8-bit): "
                    "pip install imagecodecs"
                ) from err
            return
        mode = {2: "L", 3: "RGB", 4: "RGBA"}.get(out.shape[2] if out.ndim == 3 else 1, "L")
        try:
            with Image.open(io.BytesIO(buf), formats=[self._FORMATS[self.encoding]]) as im:
                im.load()
                if out.dtype == np.uint16:
                    arr = np.asarray(im)
                else:
                    if out.ndim == 3 and out.shape[2] == 2:
                        mode = "LA"
                    arr = np.asarray(im if im.mode == mode else im.convert(mode))
        except Exception as err:  # Pillow raises OSError, SyntaxError, ValueError, ...
            raise corrupt(self.encoding, self.library, err) from err
        if arr.shape != out.shape or arr.dtype.itemsize != out.dtype.itemsize:
            raise corrupt(
                self.encoding, self.library, ValueError(f"decoded {arr.shape}, header {out.shape}")
            )
        out[...] = arr

    def decode_scaled(self, data: Data, min_height: int, min_width: int) -> np.ndarray:
        if self.encoding != "jpeg":
            return self.decode(data)
        from PIL import Image

        buf = as_buffer(data)
        h, w, components = jpeg_shape(buf)
        d, sh, sw = jpeg.scaled_size(h, w, min_height, min_width)
        mode = "L" if components == 1 else "RGB"
        try:
            with Image.open(io.BytesIO(buf), formats=["JPEG"]) as im:
                # Pillow scales by the largest of 8, 4, 2, 1 not above w // request_w (and h)
                im.draft(mode, (max(1, w // d), max(1, h // d)))
                im.load()
                arr = np.asarray(im if im.mode == mode else im.convert(mode))
        except Exception as err:
            raise corrupt("jpeg", self.library, err) from err
        if arr.shape[:2] != (sh, sw):
            raise corrupt("jpeg", self.library, ValueError(f"scaled to {arr.shape}, not {sh}x{sw}"))
        return arr


_CLASSES: dict[str, type[ImageDecoder]] = {
    "numpy": _RawDecoder,
    "simplejpeg": _SimplejpegDecoder,
    "imagecodecs": _ImagecodecsDecoder,
    "Pillow": _PillowDecoder,
}


def image_decoder(encoding: Encoding, library: str | None = None) -> ImageDecoder:
    """Return a decoder for ``encoding``.

    Parameters
    ----------
    encoding
        One of :data:`ENCODINGS`.
    library
        ``"simplejpeg"`` (jpeg), ``"imagecodecs"`` (jpeg, png, webp), ``"Pillow"`` (jpeg, png,
        webp) or ``"numpy"`` (raw); ``None`` picks the measured default among the installed
        ones (see the module docstring).

    Raises
    ------
    ValueError
        Unknown encoding.
    MissingDecoderError
        ``library`` is not a decoder of ``encoding``, or is not installed (the message names
        the pip package).
    """
    check_encoding(encoding, 90)
    known = _LIBRARIES[encoding]
    if library is None:
        for name in known:
            try:
                return _CLASSES[name](encoding)
            except ImportError:
                continue
        raise MissingDecoderError(
            f"no {encoding} decoder is installed: pip install {_PACKAGES[known[-1]][1]}"
        )
    if library not in known:
        raise MissingDecoderError(
            f"no {encoding} decoder named {library!r}; choose one of {', '.join(known)}"
        )
    try:
        return _CLASSES[library](encoding)
    except ImportError as err:
        raise MissingDecoderError(
            f"{encoding} decoder {library!r} is not installed: pip install {_PACKAGES[library][1]}"
        ) from err
