"""The fast path for plain JPEGs: headers parsed here, pixels decoded by libjpeg-turbo directly.

Most image folders are plain JPEGs: one frame, 8-bit gray or YCbCr, no EXIF rotation. For
them, Pillow's way through a file (``Image.open``, its marker parser, its decoder objects,
``np.asarray``'s copy) costs about as much again as the decode itself. This module reads
such a file with two system calls and hands the bytes to simplejpeg (libjpeg-turbo, the
library Pillow wraps):

:func:`read_header`
    The facts :func:`~chunkio.images.pillow.probe_image` needs (size, components, EXIF
    orientation, whether the file ends with its end-of-image marker), in ~10 us instead of
    Pillow's ~100 us. Anything it is not sure to read exactly as Pillow does (CMYK, Adobe or
    multi-picture segments, XMP, unusual EXIF, lossless or arithmetic coding, a header past the
    first 64 KiB) gives ``None``, and the caller asks Pillow.
:func:`decode_plain`
    The pixels of a plain JPEG, bit-exact with Pillow's decode. Bit-exact is checked, not
    assumed: the first image of each coding kind (SOF type, sampling factors) that a process
    decodes is decoded by Pillow too, and a kind whose pixels differ (another libjpeg-turbo
    build, say) goes to Pillow from then on. A file simplejpeg refuses also goes to Pillow,
    which decides whether it is an error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["JpegHeader", "decode_plain", "parse_header", "read_header"]

#: bytes read for the headers; a header that runs past them is left to Pillow
HEAD_BYTES = 64 << 10
_SOI = b"\xff\xd8\xff"
_EOI = b"\xff\xd9"
#: baseline, extended sequential, progressive (Huffman): what Pillow and simplejpeg both decode
_SOF = frozenset({0xC0, 0xC1, 0xC2})
#: markers after which the headers cannot be read here (other SOFs, Adobe, multi-picture, XMP)
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_EXIF = b"Exif\x00\x00"
_XMP = b"http://ns.adobe.com/xap/1.0/"
_ORIENTATION = 0x0112


@dataclass(frozen=True)
class JpegHeader:
    """What the headers of a JPEG say, read the way Pillow reads them."""

    height: int
    width: int
    #: Pillow's mode: "L" (1 component) or "RGB" (3)
    mode: str
    #: EXIF orientation (1 when absent)
    orientation: int
    #: (SOF marker, sampling factors): images of one kind decode through the same code
    kind: tuple[int, bytes]
    #: whether the file's last two bytes are the end-of-image marker
    ends_with_eoi: bool


def read_header(path: str) -> JpegHeader | None:
    """The headers of the JPEG at ``path``, or ``None`` for anything left to Pillow."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        if len(head) < HEAD_BYTES:
            tail = head[-2:]
        else:
            fh.seek(-2, 2)
            tail = fh.read(2)
    return parse_header(head, ends_with_eoi=tail == _EOI)


def parse_header(data: bytes, *, ends_with_eoi: bool) -> JpegHeader | None:
    """:func:`read_header` of bytes ``data`` (the start of a file); ``None`` if unsure."""
    if not data.startswith(_SOI):
        return None
    pos, size, orientation = 2, len(data), 1
    sof: JpegHeader | None = None
    seen_exif = False
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        end = pos + 2 + length
        if length < 2 or end > size:
            return None
        segment = data[pos + 4 : end]
        if marker == 0xDA:  # start of scan: the headers are over
            if sof is None:
                return None
            return replace(sof, orientation=orientation, ends_with_eoi=ends_with_eoi)
        if marker in _SOF:
            if sof is not None:
                return None
            sof = _frame(marker, segment)
            if sof is None:
                return None
        elif 0xC3 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return None  # lossless, hierarchical or arithmetic-coded
        elif marker == 0xE1 and segment.startswith(_EXIF):
            if seen_exif:
                return None
            seen_exif = True
            found = _exif_orientation(segment[len(_EXIF) :])
            if found is None:
                return None
            orientation = found
        elif marker == 0xE1 and segment.startswith(_XMP):
            return None  # Pillow reads an orientation from XMP when EXIF has none
        elif marker == 0xE2 and segment.startswith(b"MPF\x00"):
            return None  # Pillow opens multi-picture files as MPO
        elif marker == 0xEE:
            return None  # Adobe: colour transform flags
        elif marker == 0xD9:
            return None
        pos = end
    return None


def _frame(marker: int, segment: bytes) -> JpegHeader | None:
    if len(segment) < 6:
        return None
    precision, height, width, ncomp = struct.unpack_from(">BHHB", segment)
    if precision != 8 or height == 0 or width == 0 or ncomp not in (1, 3):
        return None
    if len(segment) < 6 + 3 * ncomp:
        return None
    sampling = bytes(segment[7 + 3 * k] for k in range(ncomp))
    mode = "L" if ncomp == 1 else "RGB"
    return JpegHeader(height, width, mode, 1, (marker, sampling), False)


def _exif_orientation(tiff: bytes) -> int | None:
    """The Orientation tag of IFD0 (1 when absent); ``None`` when the EXIF is unusual."""
    if len(tiff) < 8:
        return None
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    if order is None:
        return None
    magic, ifd = struct.unpack_from(order + "HI", tiff, 2)
    if magic != 42 or ifd < 8 or ifd + 2 > len(tiff):
        return None
    (count,) = struct.unpack_from(order + "H", tiff, ifd)
    if ifd + 2 + 12 * count > len(tiff):
        return None
    found = [
        struct.unpack_from(order + "HHIH", tiff, ifd + 2 + 12 * k)
        for k in range(count)
        if struct.unpack_from(order + "H", tiff, ifd + 2 + 12 * k)[0] == _ORIENTATION
    ]
    if not found:
        return 1
    if len(found) > 1:
        return None
    _, kind, n, value = found[0]
    return value if kind == 3 and n == 1 else None


#: per process: coding kind -> whether simplejpeg's pixels equal Pillow's for it
_kind_exact: dict[tuple[int, bytes], bool] = {}


def decode_plain(
    data: bytes, header: JpegHeader, pillow: Callable[[], npt.NDArray[Any]]
) -> npt.NDArray[Any] | None:
    """The ``(H, W)`` or ``(H, W, 3)`` pixels of plain JPEG bytes, as Pillow decodes them.

    ``header`` is :func:`parse_header` of ``data``; ``pillow`` decodes the same file by the
    Pillow policy (called for the first image of a kind, to compare). ``None``: use Pillow for
    this file (a kind whose pixels differ, or data simplejpeg refuses, which Pillow then
    judges).
    """
    if not _kind_exact.get(header.kind, True):
        return None
    import simplejpeg

    gray = header.mode == "L"
    try:
        pixels: npt.NDArray[Any] = simplejpeg.decode_jpeg(
            data, colorspace="GRAY" if gray else "RGB", strict=True
        )
    except ValueError:
        return None
    if gray:
        pixels = pixels[:, :, 0]
    if header.kind not in _kind_exact:
        reference = pillow()
        _kind_exact[header.kind] = bool(
            reference.shape == pixels.shape and np.array_equal(reference, pixels)
        )
        return reference
    return pixels
