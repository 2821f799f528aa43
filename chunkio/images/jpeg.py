"""JPEG, in one place: the one header parser and the one libjpeg-turbo (simplejpeg) path.

Header parsing
    :func:`parse_header` (and :func:`read_header` of a file) reads the facts conversion's
    check needs (:func:`~chunkio.images.pillow.probe_image`: size, components, sampling
    factors, EXIF orientation, whether the file ends with its end-of-image marker), in ~10 us
    instead of Pillow's ~100 us. It is strict: anything it is not sure to read exactly as
    Pillow does (CMYK, Adobe or multi-picture segments, XMP, unusual EXIF, lossless or
    arithmetic coding, a header past the first 64 KiB) gives ``None``, and the caller asks
    Pillow. :func:`frame_shape` walks the same markers leniently, to the frame header of any
    JPEG: the decoded shape of a stored image (:func:`chunkio.images.encoding.decoded_shape`).
libjpeg-turbo
    :func:`encode` and :func:`decode` (strict: truncated or corrupt data raises; into a given
    buffer, or DCT-scaled to 1/2, 1/4, 1/8 with :func:`scaled_size`) are the only calls into
    simplejpeg. Conversion's fast path for plain JPEGs (one frame, 8-bit gray or YCbCr, no
    EXIF rotation) reads the file with two system calls and decodes it here, skipping
    Pillow's way through a file (``Image.open``, its marker parser, its decoder objects,
    ``np.asarray``'s copy), which costs about as much again as the decode itself;
    :func:`decode_plain` gives the pixels bit-exact with Pillow's decode. Bit-exact is checked,
    not assumed: the first image of each coding kind (SOF type, sampling factors) that a
    process decodes is decoded by Pillow too, and a kind whose pixels differ (another
    libjpeg-turbo build, say) goes to Pillow from then on. A file libjpeg-turbo refuses also
    goes to Pillow, which decides whether it is an error.
Partial decode
    :func:`decode_region` decodes one box of a JPEG (at full or 1/2, 1/4, 1/8 scale): only
    the iMCU rows and columns that cover it, by chunkio's small extension against libjpeg-turbo
    (``chunkio.images._jpegcrop``, libjpeg's ``jpeg_crop_scanline`` and ``jpeg_skip_scanlines``;
    the system's library, or Pillow's bundled copy: :mod:`chunkio.images.libjpeg`). Its pixels
    equal :func:`decode`'s cut to the box, bit for bit: libjpeg-turbo widens a cropped
    region to iMCU boundaries and upsamples the chroma at the region's edges as if they were
    the image's, so the extension decodes one iMCU more on each side (and from one iMCU row
    above) than the box needs and cuts the box out of that.
    Files of a kind the whole decode may read otherwise are left to it
    (``NotImplementedError``): any but gray or luma sampled 1x1, 2x1, 2x2, 1x2 or 4x1 over
    1x1 chroma (simplejpeg refuses 4x2, 2x4, 3x1, ...; CMYK and YCCK it converts), and so is
    a DCT scale simplejpeg would not pick (:func:`exact_scale`): callers decode those whole.
    One verdict with :func:`decode`: strict like it, and the rows below the box are
    entropy-decoded to the end of the data (no inverse DCT, no colour conversion), so a
    corrupt or truncated file is refused wherever the damage is.
    :data:`REGION_DECODE` is whether the extension is built (and has a library:
    :data:`LIBJPEG`); without it callers decode whole images with :func:`decode` (as with
    ``CHUNKIO_JPEG_REGION=0``), and say so once (:func:`warn_whole_crop`).
Restart markers
    :func:`add_restarts` rewrites a JPEG losslessly (libjpeg-turbo's transcoding, like
    ``jpegtran -restart 1 -optimize``: the same coefficients, so the same pixels) as one
    sequential scan with a restart marker at every iMCU row. With ``CHUNKIO_JPEG_SEEK=1``
    (off by default), :func:`decode_region` of a file laid out so (rewritten, or written with
    ``restart_marker_rows=1``) starts at the marker one iMCU row above the box (a stream of
    the headers and the rows it needs), so the rows above and below are not Huffman-decoded:
    faster, but corruption there goes unseen, where :func:`decode` refuses the file (the
    chunk checksums still catch damage in storage). Conversion does not rewrite files so:
    measured on ImageNet-size photos with
    RandomResizedCrop(224), the markers cost the decode about what seeking saves (region
    decode 561 us per image with both against 554 us for the file as it was).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..util.numeric import ceil_div
from . import libjpeg

try:  # the optional compiled part (setup.py): partial decode against libjpeg-turbo
    from . import _jpegcrop
except ImportError:  # pragma: no cover - a build without a C compiler
    _jpegcrop = None  # type: ignore[assignment]

#: the partial decoder's libjpeg-turbo (linked, or bound now), or why there is none
LIBJPEG = libjpeg.attach(_jpegcrop)
if LIBJPEG.problem is not None:  # built, but no library to bind: decode whole images
    _jpegcrop = None  # type: ignore[assignment]

__all__ = [
    "EOI",
    "JPEG_444_QUALITY",
    "JPEG_SCALE_DENOMINATORS",
    "ORIENTATION_TAG",
    "SOI",
    "Buffer",
    "JpegHeader",
    "LIBJPEG",
    "REGION_DECODE",
    "REGION_RGBX",
    "add_restarts",
    "decode",
    "decode_plain",
    "decode_region",
    "encode",
    "ends_with_eoi",
    "exact_scale",
    "frame_shape",
    "parse_header",
    "read_header",
    "scaled_size",
    "warn_whole_crop",
]

#: encoded bytes (a 1-D uint8 array viewing them, part of a chunk say, serves as well)
Buffer = bytes | bytearray | memoryview

#: bytes read for the headers; a header that runs past them is left to Pillow
HEAD_BYTES = 64 << 10
#: start of image (and the first marker's 0xFF), end of image
SOI = b"\xff\xd8\xff"
EOI = b"\xff\xd9"
#: baseline, extended sequential, progressive (Huffman): what Pillow and simplejpeg both decode
_SOF = frozenset({0xC0, 0xC1, 0xC2})
#: markers without a length field (TEM, RST0-7)
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
#: the other frame markers: lossless, hierarchical, arithmetic-coded (not DHT, JPG, DAC)
_FRAMES = frozenset(range(0xC3, 0xD0)) - {0xC4, 0xC8, 0xCC}
_ANY_SOF = _SOF | _FRAMES
_EXIF = b"Exif\x00\x00"
_XMP = b"http://ns.adobe.com/xap/1.0/"
_MPF = b"MPF\x00"
#: the EXIF tag of the orientation
ORIENTATION_TAG = 0x0112


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
    return parse_header(head, ends_with_eoi=tail == EOI)


def ends_with_eoi(path: str) -> bool:
    """Whether the file's last two bytes are the JPEG end-of-image marker."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() < 2:
            return False
        fh.seek(-2, 2)
        return fh.read(2) == EOI


def parse_header(data: Buffer, *, ends_with_eoi: bool) -> JpegHeader | None:
    """:func:`read_header` of bytes ``data`` (the start of a file); ``None`` if unsure."""
    view = memoryview(data)
    if view[:3] != SOI:
        return None
    orientation = 1
    sof: JpegHeader | None = None
    seen_exif = False
    for marker, start, end in _segments(view):
        segment = view[start:end]
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
        elif marker in _FRAMES:
            return None  # lossless, hierarchical or arithmetic-coded
        elif marker == 0xE1 and segment[: len(_EXIF)] == _EXIF:
            if seen_exif:
                return None
            seen_exif = True
            found = _exif_orientation(bytes(segment[len(_EXIF) :]))
            if found is None:
                return None
            orientation = found
        elif marker == 0xE1 and segment[: len(_XMP)] == _XMP:
            return None  # Pillow reads an orientation from XMP when EXIF has none
        elif marker == 0xE2 and segment[: len(_MPF)] == _MPF:
            return None  # Pillow opens multi-picture files as MPO
        elif marker == 0xEE:
            return None  # Adobe: colour transform flags
        elif marker == 0xD9:
            return None
    return None


def frame_shape(data: Buffer) -> tuple[int, int, int]:
    """``(height, width, components)`` from the frame header of any JPEG (any coding, any
    markers before it): what a stored image decodes to. Reads no further than that header,
    so the start of a file is enough.

    Raises
    ------
    ValueError
        ``data`` does not start with a JPEG frame header.
    """
    view = memoryview(data)
    if view[:3] == SOI:
        for marker, start, end in _segments(view):
            if marker in _ANY_SOF:
                if end - start >= 6:
                    _, height, width, components = struct.unpack_from(">BHHB", view, start)
                    if height and width and components:
                        return height, width, components
                break
            if marker == 0xDA:
                break
    raise ValueError("no JPEG frame header (SOI, then a SOF marker segment)")


def _segments(view: memoryview) -> Iterator[tuple[int, int, int]]:
    """``(marker, start, end)`` of each marker segment after SOI: its payload is
    ``view[start:end]``. Fill bytes and standalone markers are stepped over; the walk ends at
    a byte that is not a marker, or at a segment that runs past the data."""
    pos, size = 2, len(view)
    while pos + 4 <= size:
        if view[pos] != 0xFF:
            return
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", view, pos + 2)
        end = pos + 2 + length
        if length < 2 or end > size:
            return
        yield marker, pos + 4, end
        pos = end


def _frame(marker: int, segment: memoryview) -> JpegHeader | None:
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
        if struct.unpack_from(order + "H", tiff, ifd + 2 + 12 * k)[0] == ORIENTATION_TAG
    ]
    if not found:
        return 1
    if len(found) > 1:
        return None
    _, kind, n, value = found[0]
    return value if kind == 3 and n == 1 else None


#: JPEG quality from which chroma is kept at full resolution (4:4:4); below it 4:2:0
JPEG_444_QUALITY = 95
#: DCT scale denominators libjpeg-turbo decodes fastest, largest output first
JPEG_SCALE_DENOMINATORS = (1, 2, 4, 8)


def encode(image: npt.NDArray[np.uint8], quality: int) -> bytes:
    """libjpeg-turbo's JPEG of a uint8 ``(H, W)`` gray or ``(H, W, 3)`` RGB image.

    Chroma is subsampled 4:2:0 below :data:`JPEG_444_QUALITY`, kept 4:4:4 from it up
    (see :mod:`chunkio.images.encoding` for the measurement).
    """
    import simplejpeg

    if image.ndim == 2:
        gray = np.ascontiguousarray(image)[:, :, None]
        return bytes(simplejpeg.encode_jpeg(gray, quality=int(quality), colorspace="GRAY"))
    sub = "444" if quality >= JPEG_444_QUALITY else "420"
    rgb = np.ascontiguousarray(image)
    return bytes(
        simplejpeg.encode_jpeg(rgb, quality=int(quality), colorspace="RGB", colorsubsampling=sub)
    )


def scaled_size(height: int, width: int, min_height: int, min_width: int) -> tuple[int, int, int]:
    """``(denominator, height, width)`` of the smallest DCT-scaled decode still at least
    ``(min_height, min_width)``: the largest denominator of :data:`JPEG_SCALE_DENOMINATORS`
    whose output ``ceil(size / d)`` keeps to the minima.

    >>> scaled_size(225, 301, 113, 151), scaled_size(225, 301, 200, 10)
    ((2, 113, 151), (1, 225, 301))
    """
    best = (1, height, width)
    for d in JPEG_SCALE_DENOMINATORS:
        sh, sw = ceil_div(height, d), ceil_div(width, d)
        if sh >= min_height and sw >= min_width:
            best = (d, sh, sw)
    return best


def decode(
    data: Buffer,
    *,
    gray: bool,
    out: npt.NDArray[np.uint8] | None = None,
    scale: tuple[int, int, int] | None = None,
) -> npt.NDArray[np.uint8]:
    """libjpeg-turbo's strict decode of JPEG ``data``: the one way JPEG pixels are decoded
    without Pillow, by conversion's fast path and by reads of encoded fields.

    Parameters
    ----------
    gray
        Decode to one channel (``(H, W)``), else to RGB (``(H, W, 3)``).
    out
        A C-contiguous array of the decoded shape to decode into (no copy).
    scale
        :func:`scaled_size`'s ``(denominator, height, width)``: a DCT-scaled decode.

    Raises
    ------
    ValueError
        libjpeg-turbo refuses the data (corrupt or truncated: ``strict``).
    """
    import simplejpeg

    options: dict[str, Any] = {"colorspace": "GRAY" if gray else "RGB", "strict": True}
    if out is not None:
        options["buffer"] = out
    if scale is not None and scale[0] != 1:
        options.update(min_factor=scale[0], min_height=scale[1], min_width=scale[2])
    pixels: npt.NDArray[np.uint8] = simplejpeg.decode_jpeg(data, **options)
    if out is not None:
        return out
    return pixels[:, :, 0] if gray else pixels


def exact_scale(height: int, width: int, denominator: int) -> bool:
    """Whether :func:`decode` with ``scale=(denominator, ceil(height / d), ceil(width / d))``
    surely decodes at exactly ``1 / denominator``: no other of libjpeg-turbo's scaling factors
    (``k / 8``, which simplejpeg chooses among by output size) gives the same size. Only tiny
    images fail it (3/8, 1/2 and 5/8 of a 3-pixel side are all 2 pixels).

    >>> exact_scale(333, 500, 2), exact_scale(1, 3, 2), exact_scale(9, 13, 1)
    (True, False, True)
    """
    if denominator == 1:
        return True
    size = (ceil_div(height, denominator), ceil_div(width, denominator))
    return not any(
        (ceil_div(height * k, 8), ceil_div(width * k, 8)) == size
        for k in range(1, 17)
        if k * denominator != 8
    )


#: whether readers decode JPEG crops by region: the extension is built, and the environment
#: variable ``CHUNKIO_JPEG_REGION`` is not ``0`` (for A/B runs; workers inherit it)
REGION_DECODE = _jpegcrop is not None and os.environ.get("CHUNKIO_JPEG_REGION", "1") != "0"
#: whether :func:`decode_region` writes RGBX into 4-channel buffers (libjpeg-turbo's headers)
REGION_RGBX = _jpegcrop is not None and bool(getattr(_jpegcrop, "RGBX", 0))  # 0: a stale build
#: whether :func:`decode_region` seeks to the restart marker above the box where a file has
#: one at every iMCU row (``CHUNKIO_JPEG_SEEK=1``; off by default: the rows it skips are not
#: checked, so its verdict on a corrupt file may differ from :func:`decode`'s)
SEEK = os.environ.get("CHUNKIO_JPEG_SEEK", "0") == "1"


def warn_whole_crop() -> None:
    """Say, once per process, that a crop is decoded from the whole image because the
    partial decoder is missing (:func:`chunkio.images.libjpeg.warn_whole_crop`)."""
    libjpeg.warn_whole_crop(LIBJPEG)


def add_restarts(data: Buffer) -> bytes | None:
    """JPEG ``data`` losslessly rewritten with a restart marker at every iMCU row (see the
    module docstring), or ``None`` where the extension is not built.

    Raises
    ------
    ValueError
        libjpeg-turbo refuses the data (corrupt or truncated: strict, every coefficient read).
    """
    if _jpegcrop is None:
        return None
    return _jpegcrop.add_restarts(data)


def decode_region(
    data: Buffer | npt.NDArray[np.uint8],
    out: npt.NDArray[np.uint8],
    *,
    size: tuple[int, int],
    left: int,
    top: int,
    denominator: int = 1,
) -> npt.NDArray[np.uint8]:
    """Decode the box of ``out``'s size at ``(left, top)`` of JPEG ``data`` into ``out``.

    The box is in the pixels of the image decoded at scale ``1 / denominator`` (1, 2, 4 or
    8; the scaled size is ``ceil(size / denominator)``, as :func:`scaled_size` says), and the
    result equals :func:`decode` of the whole image at that scale cut to the box.

    Parameters
    ----------
    out
        C-contiguous uint8, ``(h, w)`` or ``(h, w, 1)`` (gray) or ``(h, w, 3)`` (RGB): the
        box's size; or ``(h, w, 4)``: RGBX (the same RGB, then 255; for a colour JPEG,
        where :data:`REGION_RGBX`).
    size
        ``(height, width)`` the header must give (at full scale): a header that says another
        size is corrupt.

    Raises
    ------
    ValueError
        libjpeg-turbo refuses the data (corrupt, truncated), the header's size is not
        ``size``, or the box is not inside the scaled image.
    NotImplementedError
        A file left to :func:`decode` (CMYK, YCCK, sampling factors other than the module
        docstring's): :func:`decode` gives its verdict.
    RuntimeError
        The extension is not built (:data:`REGION_DECODE` is False).
    """
    if _jpegcrop is None:
        raise RuntimeError("chunkio was built without its libjpeg-turbo extension")
    if not (out.flags.c_contiguous and out.flags.writeable and out.dtype == np.uint8):
        raise ValueError("decode_region: out must be a writable C-contiguous uint8 array")
    gray = out.ndim == 2 or out.shape[2] == 1
    h, w = out.shape[:2]
    _jpegcrop.decode_region(data, out, gray, denominator, size[0], size[1], left, top, h, w, SEEK)
    return out


#: per process: coding kind -> whether simplejpeg's pixels equal Pillow's for it
_kind_exact: dict[tuple[int, bytes], bool] = {}


def decode_plain(
    data: bytes, header: JpegHeader, pillow: Callable[[], npt.NDArray[Any]]
) -> npt.NDArray[Any] | None:
    """The ``(H, W)`` or ``(H, W, 3)`` pixels of plain JPEG bytes, as Pillow decodes them.

    ``header`` is :func:`parse_header` of ``data``; ``pillow`` decodes the same file by the
    Pillow policy (called for the first image of a kind, to compare). ``None``: use Pillow for
    this file (a kind whose pixels differ, or data libjpeg-turbo refuses, which Pillow then
    judges).
    """
    if not _kind_exact.get(header.kind, True):
        return None
    try:
        pixels = decode(data, gray=header.mode == "L")
    except ValueError:
        return None
    if header.kind not in _kind_exact:
        reference = pillow()
        _kind_exact[header.kind] = bool(
            reference.shape == pixels.shape and np.array_equal(reference, pixels)
        )
        return reference
    return pixels
