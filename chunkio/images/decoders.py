"""The decoder libraries of encoded image fields, and :func:`image_decoder`, which picks one.

:func:`image_decoder` returns an :class:`~chunkio.images.encoding.ImageDecoder` whose
:meth:`~chunkio.images.encoding.ImageDecoder.decode_into` writes sample ``i`` of a batch
straight into row ``i`` of a preallocated array, possibly from several threads. The
measurements behind the default library of each encoding are in
:mod:`chunkio.images.encoding`; JPEG is decoded by libjpeg-turbo
(:func:`chunkio.images.jpeg.decode`) unless another library is asked for.
"""

from __future__ import annotations

import io
from typing import Any, ClassVar

import numpy as np

from . import jpeg, yuv
from .encoding import (
    Data,
    Encoding,
    ImageDecoder,
    MissingDecoderError,
    RawDecoder,
    as_buffer,
    check_encoding,
    corrupt,
    jpeg_shape,
    require_end,
)

__all__ = ["ImageDecoder", "MissingDecoderError", "image_decoder"]

#: decoder libraries per encoding, preferred (measured default) first
_LIBRARIES: dict[str, tuple[str, ...]] = {
    "raw": ("numpy",),
    "jpeg": ("simplejpeg", "imagecodecs", "Pillow"),
    "png": ("imagecodecs", "Pillow"),
    "webp": ("imagecodecs", "Pillow"),
    "yuv420": ("chunkio",),
}
#: library name -> (module to import, pip package that provides it)
_PACKAGES = {
    "numpy": ("numpy", "numpy"),
    "simplejpeg": ("simplejpeg", "simplejpeg"),
    "imagecodecs": ("imagecodecs", "imagecodecs"),
    "Pillow": ("PIL.Image", "pillow"),
    "chunkio": ("chunkio", "chunkio"),
}


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


class _YuvDecoder(ImageDecoder):
    """``yuv420``: chunkio's own (:mod:`chunkio.images.yuv`)."""

    library = "chunkio"

    def _decode_into(self, buf: Any, out: np.ndarray) -> None:
        yuv.decode_box(buf, out)


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

        if self.encoding == "jpeg":  # Pillow pads a truncated JPEG where a user set
            require_end(buf, b"\xff\xd9", "jpeg", self.library)  # LOAD_TRUNCATED_IMAGES
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
        require_end(buf, b"\xff\xd9", "jpeg", self.library)
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
    "numpy": RawDecoder,
    "simplejpeg": _SimplejpegDecoder,
    "imagecodecs": _ImagecodecsDecoder,
    "Pillow": _PillowDecoder,
    "chunkio": _YuvDecoder,
}


def image_decoder(encoding: Encoding, library: str | None = None) -> ImageDecoder:
    """Return a decoder for ``encoding``.

    Parameters
    ----------
    encoding
        One of :data:`ENCODINGS`.
    library
        ``"simplejpeg"`` (jpeg), ``"imagecodecs"`` (jpeg, png, webp), ``"Pillow"`` (jpeg, png,
        webp), ``"chunkio"`` (yuv420) or ``"numpy"`` (raw); ``None`` picks the measured
        default among the installed ones (see the module docstring).

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
