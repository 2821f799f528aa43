"""The ``yuv420`` image encoding: pre-decoded pixels, so that a read is colour conversion + crop.

A JPEG read spends most of its time in entropy decoding and the inverse DCT; this encoding
stores what comes out of them instead: the image's Y'CbCr planes with chroma at half
resolution both ways (4:2:0, 1.5 bytes per pixel; gray images keep Y only), in bands of
:data:`BAND` rows, each band compressed by LZ4 (numcodecs', through the codec table:
:func:`chunkio.backends.codec_table.lz4_block`). Reading a box decompresses the
bands that cover its rows only, and converts its pixels to RGB.

Colour (the reference)
    JFIF's Y'CbCr (ITU-R BT.601 coefficients, full range 0-255, as libjpeg uses). Encoding:
    ``Y = 0.299 R + 0.587 G + 0.114 B``, ``Cb = 128 - 0.168736 R - 0.331264 G + 0.5 B``,
    ``Cr = 128 + 0.5 R - 0.418688 G - 0.081312 B``, chroma averaged over each 2x2 block (an odd
    last row or column repeated), rounded to the nearest integer. Decoding: libjpeg's
    arithmetic integer for integer (``jdsample.c`` ``h2v2_fancy_upsample``: each pixel takes
    3/4 of its nearer chroma sample and 1/4 of the next one beyond, in each direction, edges
    repeated; ``jdcolor.c`` ``ycc_rgb_convert``: 16-bit fixed point tables), so a pixel equals
    libjpeg-turbo's decode of a 4:2:0 JPEG with the same planes, and lies within 1.39 of the
    same formulas in floating point (``R = Y + 1.402 (Cr - 128)``,
    ``G = Y - 0.344136 (Cb - 128) - 0.714136 (Cr - 128)``, ``B = Y + 1.772 (Cb - 128)``,
    clipped): libjpeg rounds the upsampled chroma to 8 bits (at most 0.5 x 1.772), then the
    pixel. The tests check both.
    The loss against the source pixels is the 4:2:0 chroma subsampling and the rounding of the
    planes: no quantisation, no blocking.
Speed
    A crop is one call into chunkio's small C extension ``chunkio.images._yuv`` (built by
    setup.py with any C compiler; no library needed): header and band checks, LZ4 by lz4's own
    ``LZ4_decompress_safe`` (found in numcodecs' build; the extension's own decoder where it is
    not), and the conversion, into RGB or RGBX (:func:`decode_box_rgbx`: the loader's resize
    input; :func:`rgbx_into` packs the resized pixels into a batch row). Without the extension
    numpy computes the same integers, several times slower.

Layout of one image's bytes (little-endian)::

    b"Y420", height u32, width u32, channels u8 (1 or 3), codec u8 (1: LZ4), band u16,
    (bands + 1) u32 offsets of the compressed bands after the header, the bands.

Each band holds its Y rows, then (colour) its Cb rows, then its Cr rows: ``ceil(rows / 2)``
rows of ``ceil(width / 2)`` samples each.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends.codec_table import LZ4_LIBRARY, lz4_block, lz4_unblock
from ..errors import CorruptChunkError

try:  # the optional compiled part (setup.py): the conversion, ~10x numpy's speed
    from . import _yuv
except ImportError:  # pragma: no cover - a build without a C compiler
    _yuv = None  # type: ignore[assignment]
if _yuv is not None and not hasattr(_yuv, "rgbx_to_rgb"):  # pragma: no cover - a stale build
    _yuv = None  # type: ignore[assignment]  # (rebuild: python setup.py build_ext --inplace)

__all__ = [
    "BAND",
    "COMPILED",
    "MAGIC",
    "decode_box",
    "decode_box_rgbx",
    "encode",
    "head",
    "header",
    "rgbx_into",
    "to_rgb_numpy",
]

MAGIC = b"Y420"
#: luma rows per compressed band: a crop decompresses the bands that cover its rows
BAND = 64
_HEAD = struct.Struct("<4sIIBBH")
_LZ4 = 1
#: the most bytes an LZ4 block gives per byte of it (a match's length grows by at most 255 a
#: byte): a header or band declaring more is corrupt, refused before anything is allocated
LZ4_RATIO = 255
#: whether the C conversion is built (else numpy computes the same integers)
COMPILED = _yuv is not None


def lz4_decompress_address() -> int:
    """The address of lz4's ``LZ4_decompress_safe`` in the library that writes the bands
    (:data:`~chunkio.backends.codec_table.LZ4_LIBRARY`, numcodecs' build), or 0 where it does
    not export it: the extension then decompresses with its own decoder (the same bytes and
    the same refusals as lz4 1.10's, somewhat slower)."""
    import ctypes

    try:
        found = ctypes.CDLL(LZ4_LIBRARY).LZ4_decompress_safe
    except (OSError, AttributeError):  # pragma: no cover - another build of numcodecs
        return 0
    return int(ctypes.cast(found, ctypes.c_void_p).value or 0)


if _yuv is not None:
    # lz4's own decoder (the extension has its own, a little slower, where it is not found)
    _yuv.set_lz4(lz4_decompress_address())


def _fix(x: float) -> int:
    return int(x * 65536 + 0.5)


_I = np.arange(256, dtype=np.int64) - 128
_CR_R = ((_fix(1.40200) * _I + 32768) >> 16).astype(np.int32)
_CB_B = ((_fix(1.77200) * _I + 32768) >> 16).astype(np.int32)
_CR_G = (-_fix(0.71414) * _I).astype(np.int64)
_CB_G = (-_fix(0.34414) * _I + 32768).astype(np.int64)


def _band_rows(height: int, band: int, i: int) -> int:
    return min(band, height - i * band)


def _band_size(height: int, width: int, channels: int, band: int, i: int) -> int:
    rows = _band_rows(height, band, i)
    return rows * width + (2 * ((rows + 1) // 2) * ((width + 1) // 2) if channels == 3 else 0)


def _corrupt(why: str) -> CorruptChunkError:
    return CorruptChunkError(f"corrupt yuv420 image: {why}")


def encode(image: npt.NDArray[np.uint8], band: int = BAND) -> bytes:
    """The ``yuv420`` bytes of a uint8 ``(H, W)`` gray or ``(H, W, 3)`` RGB image.

    >>> rgb = np.full((3, 5, 3), (200, 100, 50), np.uint8)
    >>> header(encode(rgb))
    (3, 5, 3)
    """
    if image.dtype != np.uint8 or not (
        image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (1, 3))
    ):
        raise ValueError(
            f"yuv420 holds uint8 gray (H, W) or RGB (H, W, 3) images; got {image.dtype} "
            f"{image.shape}"
        )
    if band < 2 or band % 2 or band > 0xFFFF:
        raise ValueError(f"band must be an even number of rows in 2..65534; got {band}")
    height, width = image.shape[:2]
    channels = 1 if image.ndim == 2 or image.shape[2] == 1 else 3
    planes = [image.reshape(height, width)] if channels == 1 else list(_rgb_to_planes(image))
    bands = []
    for i in range(-(-height // band)):
        a, b = i * band, min(height, (i + 1) * band)
        parts = [planes[0][a:b]] + [p[a // 2 : (b + 1) // 2] for p in planes[1:]]
        raw = np.concatenate([np.ascontiguousarray(p).ravel() for p in parts])
        bands.append(lz4_block(raw))
    offsets = np.cumsum([0, *map(len, bands)]).astype("<u4")
    head = _HEAD.pack(MAGIC, height, width, channels, _LZ4, band)
    return head + offsets.tobytes() + b"".join(bands)


def _rgb_to_planes(image: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint8], ...]:
    """JFIF Y'CbCr of RGB ``image``, chroma averaged over 2x2 blocks (see the docstring)."""
    rgb = image.astype(np.float32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128.0 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128.0 + 0.5 * r - 0.418688 * g - 0.081312 * b
    height, width = y.shape

    def half(c: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        c = np.pad(c, ((0, height % 2), (0, width % 2)), mode="edge")
        out: npt.NDArray[np.float32] = (c[0::2, 0::2] + c[1::2, 0::2] + c[0::2, 1::2]) + c[
            1::2, 1::2
        ]
        return out * 0.25

    return tuple(np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in (y, half(cb), half(cr)))


def header(data: Any) -> tuple[int, int, int]:
    """``(height, width, channels)`` of ``yuv420`` bytes, from their header.

    Raises
    ------
    chunkio.errors.CorruptChunkError
        No ``yuv420`` header, or one that does not add up.
    """
    return _parse(memoryview(data))[:3]


def head(data: Any) -> tuple[int, int, int]:
    """``(height, width, channels)`` from the header alone (its size checked against the
    bytes there are: :func:`header` checks the bands too).

    Raises
    ------
    chunkio.errors.CorruptChunkError
        No ``yuv420`` header, or one naming more pixels than the bytes can hold.
    """
    return _check_head(memoryview(data).cast("B"))


def _parse(view: memoryview) -> tuple[int, int, int, int, npt.NDArray[np.int64], int]:
    """Height, width, channels, band, the bands' offsets and where they start, every band
    checked (the C path checks the same, in the same order, with the same messages): the
    offsets rise by at least 4 to the end of the data, and each band declares its rows'
    size, no more than LZ4 can give from its bytes."""
    height, width, channels = _check_head(view)
    band = _HEAD.unpack_from(view)[5]
    count = -(-height // band)
    start = _HEAD.size + 4 * (count + 1)
    if len(view) < start:
        raise _corrupt(f"{len(view)} bytes, shorter than the offsets of its {count} bands")
    offsets = np.frombuffer(view, "<u4", count + 1, _HEAD.size).astype(np.int64)
    if offsets[0] != 0 or start + offsets[-1] != len(view):
        raise _corrupt(f"band offsets do not add up to its {len(view)} bytes (truncated?)")
    gaps = np.diff(offsets)
    if (gaps < 4).any():
        raise _corrupt(f"band {int(np.argmax(gaps < 4))}: offsets that do not rise by 4 or more")
    declared = np.frombuffer(view, np.uint8)[start + offsets[:-1, None] + np.arange(4)]
    declared = declared.astype(np.int64) @ (1 << (8 * np.arange(4, dtype=np.int64)))
    sizes = np.array([_band_size(height, width, channels, band, i) for i in range(count)])
    bad = np.flatnonzero((declared != sizes) | (sizes > LZ4_RATIO * (gaps - 4)))
    if bad.size:
        i = int(bad[0])
        raise _corrupt(
            f"band {i} declares {int(declared[i])} bytes in {int(gaps[i]) - 4}; its rows are "
            f"{int(sizes[i])}"
        )
    return height, width, channels, band, offsets, start


def decode_box(
    data: Any,
    out: npt.NDArray[np.uint8],
    *,
    top: int = 0,
    left: int = 0,
    size: tuple[int, int] | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode the box of ``out``'s size at ``(top, left)`` of ``yuv420`` ``data`` into ``out``:
    only the bands that cover the box's rows (and one chroma row around them) are
    decompressed.

    Parameters
    ----------
    out
        uint8 ``(h, w, 3)`` for a colour image, ``(h, w)`` or ``(h, w, 1)`` for a gray one.
    size
        ``(height, width)`` the header must give; ``None`` takes the header's.

    Raises
    ------
    chunkio.errors.CorruptChunkError
        Bad header, a band that does not decompress to its size, or a header that does not
        say ``size``.
    ValueError
        ``out`` does not fit the image's channels, or the box is not inside the image.
    """
    view = memoryview(data).cast("B")
    oh, ow = out.shape[:2]
    want = 1 if out.ndim == 2 or out.shape[2] == 1 else out.shape[2]
    if _yuv is not None and out.flags.c_contiguous and (want == 1 or want == 3):
        height, width, channels = _check_head(view)
        if size is not None and tuple(size) != (height, width):
            raise _corrupt(f"the header says {height}x{width}; the stored shape is {size}")
        _check_out(out, want, channels, top, left, height, width)
        _decode_c(view, out, top, left, oh, ow, want)
        return out
    # the C path's order: header, stored shape, box, then every band
    height, width, channels = _check_head(view)
    if size is not None and tuple(size) != (height, width):
        raise _corrupt(f"the header says {height}x{width}; the stored shape is {size}")
    _check_out(out, want, channels, top, left, height, width)
    band, offsets, start = _parse(view)[3:]
    # chroma context: one chroma row (two luma rows) beyond the box, where the image has one
    first = max(0, top - 2) // band if channels == 3 else top // band
    last = (min(height, top + oh + 2) - 1) // band if channels == 3 else (top + oh - 1) // band
    sizes = [_band_size(height, width, channels, band, i) for i in range(first, last + 1)]
    planes = np.empty(sum(sizes), np.uint8)
    _decompress(view, offsets, start, first, sizes, planes)
    if channels == 1:
        full = planes.reshape(-1, width)
        rows = full[top - first * band : top - first * band + oh, left : left + ow]
        (out if out.ndim == 2 else out[..., 0])[...] = rows
        return out
    out[...] = to_rgb_numpy(planes, height, width, band, first, (top, left, oh, ow))
    return out


def decode_box_rgbx(
    data: Any, out: npt.NDArray[np.uint8], *, top: int, left: int, size: tuple[int, int]
) -> npt.NDArray[np.uint8]:
    """:func:`decode_box` of a colour image into C-contiguous uint8 ``out`` of shape
    ``(h, w, 4)``: R, G, B and 255 a pixel (the resize's input in the loader: torch's uint8
    kernels take 4 channels as they are, and 3 only after repacking them to 4). Needs the
    compiled part (:data:`COMPILED`); raises as :func:`decode_box` does."""
    if _yuv is None:
        raise RuntimeError("chunkio was built without its yuv420 extension")
    view = memoryview(data).cast("B")
    height, width, channels = _check_head(view)
    if tuple(size) != (height, width):
        raise _corrupt(f"the header says {height}x{width}; the stored shape is {size}")
    oh, ow = out.shape[:2]
    if out.ndim != 3 or out.shape[2] != 4 or not out.flags.c_contiguous:
        raise ValueError(f"decode_box_rgbx: out must be C-contiguous (h, w, 4); got {out.shape}")
    _check_out(out[..., :3], 3, channels, top, left, height, width)
    _decode_c(view, out, top, left, oh, ow, 4)
    return out


def rgbx_into(pixels: npt.NDArray[np.uint8], out: npt.NDArray[np.uint8], flip: bool) -> bool:
    """Copy RGBX ``pixels`` ``(h, w, 4)`` into the channels-first row ``out`` ``(3, h, w)``
    (its memory channels-first or channels-last), mirrored left to right if ``flip``; False
    (nothing done) where the compiled part is not built or the memory is laid out otherwise
    (the caller copies another way)."""
    h, w = pixels.shape[:2]
    if _yuv is None or pixels.shape != (h, w, 4) or out.shape != (3, h, w):
        return False
    if not pixels.flags.c_contiguous or pixels.ctypes.data % 4:
        return False
    if out.flags.c_contiguous:
        _yuv.rgbx_to_rgb(pixels, out, h, w, flip, True)
        return True
    rows = out.transpose(1, 2, 0)  # channels-last memory: (h, w, 3) C-contiguous
    if rows.flags.c_contiguous:
        _yuv.rgbx_to_rgb(pixels, rows, h, w, flip, False)
        return True
    return False


_local = threading.local()  # the decompressed bands' buffer, one per decoding thread


def _decode_c(
    view: memoryview, out: npt.NDArray[np.uint8], top: int, left: int, oh: int, ow: int, ch: int
) -> None:
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = np.empty(1 << 16, np.uint8)
    for _ in range(2):
        try:
            need = _yuv.decode_box(view, scratch, out, top, left, oh, ow, ch)
        except _yuv.Corrupt as err:
            raise _corrupt(str(err)) from None
        if need == 0:
            return
        scratch = _local.scratch = np.empty(need, np.uint8)
    raise RuntimeError("yuv420: the bands' buffer was sized to what they need, yet too small")


def _check_head(view: memoryview) -> tuple[int, int, int]:
    """Height, width and channels from a header that adds up (not its band offsets)."""
    if len(view) < _HEAD.size:
        raise _corrupt(f"{len(view)} bytes, shorter than its header")
    magic, height, width, channels, codec, band = _HEAD.unpack_from(view)
    if magic != MAGIC:
        raise _corrupt(f"expected the magic bytes {MAGIC!r}; got {bytes(magic)!r}")
    if not (height and width and channels in (1, 3) and codec == _LZ4 and band >= 2) or band % 2:
        raise _corrupt(
            f"bad header ({height}x{width}, {channels} channels, codec {codec}, band {band})"
        )
    pixels = height * width + (2 * ((height + 1) // 2) * ((width + 1) // 2) if channels == 3 else 0)
    if pixels > LZ4_RATIO * len(view):
        raise _corrupt(
            f"the header says {height}x{width} ({pixels} bytes of planes), more than "
            f"{len(view)} bytes of LZ4 can hold"
        )
    return height, width, channels


def _check_out(
    out: npt.NDArray[np.uint8],
    want: int,
    channels: int,
    top: int,
    left: int,
    height: int,
    width: int,
) -> None:
    oh, ow = out.shape[:2]
    if want != channels or out.dtype != np.uint8 or not out.flags.writeable:
        raise ValueError(f"yuv420 image has {channels} channel(s); out is {out.dtype} {out.shape}")
    if top < 0 or left < 0 or oh < 1 or ow < 1 or top + oh > height or left + ow > width:
        raise ValueError(f"box {oh}x{ow} at ({top}, {left}) is not inside {height}x{width}")


def _decompress(
    view: memoryview,
    offsets: npt.NDArray[np.int64],
    start: int,
    first: int,
    sizes: list[int],
    planes: npt.NDArray[np.uint8],
) -> None:
    at = 0
    for k, n in enumerate(sizes):
        a, b = start + int(offsets[first + k]), start + int(offsets[first + k + 1])
        try:  # each band's declared size was checked by _parse
            lz4_unblock(np.frombuffer(view[a:b], np.uint8), planes[at : at + n])
        except (RuntimeError, ValueError) as err:
            raise _corrupt(
                f"band {first + k}: LZ4 data that does not decompress to its {n} bytes"
            ) from err
        at += n


def to_rgb_numpy(
    planes: npt.NDArray[np.uint8],
    height: int,
    width: int,
    band: int,
    first: int,
    box: tuple[int, int, int, int],
) -> npt.NDArray[np.uint8]:
    """The C conversion's pixels in numpy (the fallback, and its test's reference): the box
    ``(top, left, h, w)`` of the decompressed bands ``first, ...`` in ``planes``."""
    top, left, oh, ow = box
    cw, ch = (width + 1) // 2, (height + 1) // 2
    ys, us, vs = [], [], []
    at = 0
    for i in range(first, first + 1_000_000):
        if at >= planes.size:
            break
        rows = _band_rows(height, band, i)
        crows = (rows + 1) // 2
        ys.append(planes[at : at + rows * width].reshape(rows, width))
        at += rows * width
        us.append(planes[at : at + crows * cw].reshape(crows, cw))
        at += crows * cw
        vs.append(planes[at : at + crows * cw].reshape(crows, cw))
        at += crows * cw
    luma, cb, cr = (np.concatenate(p) for p in (ys, us, vs))
    c_first = first * band // 2
    y_idx = np.arange(top, top + oh)
    near = y_idx // 2
    far = np.clip(np.where(y_idx % 2 == 1, near + 1, near - 1), 0, ch - 1)
    x_idx = np.arange(left, left + ow)
    cx = x_idx // 2
    other = np.clip(np.where(x_idx % 2 == 1, cx + 1, cx - 1), 0, cw - 1)
    bias = np.where(x_idx % 2 == 1, 7, 8)

    def upsample(c: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
        c = c.astype(np.int64)
        sums = 3 * c[near - c_first] + c[far - c_first]
        return np.asarray((3 * sums[:, cx] + sums[:, other] + bias) >> 4, np.int64)

    u, v = upsample(cb), upsample(cr)
    lum = luma[y_idx - first * band][:, x_idx].astype(np.int64)
    rgb = np.stack([lum + _CR_R[v], lum + ((_CB_G[u] + _CR_G[v]) >> 16), lum + _CB_B[u]], axis=-1)
    pixels: npt.NDArray[np.uint8] = np.clip(rgb, 0, 255).astype(np.uint8)
    return pixels
