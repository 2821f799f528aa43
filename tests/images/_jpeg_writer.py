"""A small baseline JPEG writer for tests: any sampling factors, restart intervals, gray.

Pillow, simplejpeg and imagecodecs write 4:4:4, 4:2:2, 4:2:0, 4:4:0 and 4:1:1 only; the
region decoder must also be checked on 4x2, 2x4, 1x4, 3x1 and the like, which libjpeg reads
(any factor 1..4) but no encoder in the venv writes. This one writes them: an 8x8 DCT in
floating point, a quality-50 table scaled like libjpeg's, and Huffman tables of fixed code
lengths (every DC category 4 bits, every AC symbol 8 bits): valid, just not small.

    encode(pixels, sampling=((4, 2), (1, 1), (1, 1)), restart=3)
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

#: the zig-zag order of an 8x8 block's 64 coefficients (row-major index per position)
_ZIGZAG = np.array(
    sorted(range(64), key=lambda k: (k // 8 + k % 8, k // 8 if (k // 8 + k % 8) % 2 else k % 8))
)
_BASE_Q = np.array(
    [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
     14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
     18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
     49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99],
    np.int64,
).reshape(8, 8)  # fmt: skip
_DCT = np.array(
    [
        [(np.sqrt(0.5) if u == 0 else 1.0) * 0.5 * np.cos((2 * x + 1) * u * np.pi / 16)
         for x in range(8)]
        for u in range(8)
    ]
)  # fmt: skip
#: DC categories 0..11 with 4-bit codes; AC symbols (EOB, ZRL, run/size) with 8-bit codes
_DC_SYMBOLS = list(range(12))
_AC_SYMBOLS = [0x00, 0xF0] + [(run << 4) | size for run in range(16) for size in range(1, 11)]
_DC_CODE = {s: (k, 4) for k, s in enumerate(_DC_SYMBOLS)}
_AC_CODE = {s: (k, 8) for k, s in enumerate(_AC_SYMBOLS)}


def _category(v: int) -> tuple[int, int]:
    """(size, bits) of a coefficient's magnitude category, as JPEG codes it."""
    size = abs(v).bit_length()
    return size, (v if v >= 0 else v + (1 << size) - 1)


def _blocks(plane: npt.NDArray[np.float64], quant: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Quantized zig-zag coefficients of every 8x8 block: (rows, cols, 64)."""
    h, w = plane.shape
    b = (plane - 128.0).reshape(h // 8, 8, w // 8, 8).transpose(0, 2, 1, 3)
    coef = _DCT @ b @ _DCT.T
    q = np.rint(coef / quant).astype(np.int64)
    return q.reshape(h // 8, w // 8, 64)[:, :, _ZIGZAG]


class _Bits:
    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, code: int, length: int) -> None:
        self.acc = (self.acc << length) | (code & ((1 << length) - 1))
        self.n += length
        while self.n >= 8:
            byte = (self.acc >> (self.n - 8)) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
            self.n -= 8
        self.acc &= (1 << self.n) - 1

    def flush(self) -> None:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def _dht(cls: int, ident: int, symbols: list[int], length: int) -> bytes:
    counts = [0] * 16
    counts[length - 1] = len(symbols)
    return bytes([cls << 4 | ident, *counts, *symbols])


def encode(
    pixels: npt.NDArray[np.uint8],
    *,
    sampling: tuple[tuple[int, int], ...] = ((2, 2), (1, 1), (1, 1)),
    quality: int = 85,
    restart: int = 0,
) -> bytes:
    """Baseline JPEG of uint8 ``(H, W)`` gray or ``(H, W, 3)`` RGB pixels.

    ``sampling``: ``(h, v)`` factors per component (one for gray, three for colour: Y, Cb,
    Cr, each 1..4); ``restart``: MCUs per restart interval (0: none).
    """
    gray = pixels.ndim == 2
    height, width = pixels.shape[:2]
    if gray:
        planes = [pixels.astype(np.float64)]
        sampling = ((1, 1),)
    else:
        r, g, b = (pixels[..., k].astype(np.float64) for k in range(3))
        planes = [
            0.299 * r + 0.587 * g + 0.114 * b,
            128 - 0.168736 * r - 0.331264 * g + 0.5 * b,
            128 + 0.5 * r - 0.418688 * g - 0.081312 * b,
        ]
    hmax = max(h for h, _ in sampling)
    vmax = max(v for _, v in sampling)
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    quant = np.clip((_BASE_Q * scale + 50) // 100, 1, 255)
    if gray:  # one component: not interleaved, blocks in raster order
        mcu_rows, mcu_cols = -(-height // 8), -(-width // 8)
    else:
        mcu_rows, mcu_cols = -(-height // (8 * vmax)), -(-width // (8 * hmax))
    coefs = []
    for plane, (hs, vs) in zip(planes, sampling, strict=True):
        ch, cw = -(-height * vs // vmax), -(-width * hs // hmax)
        # box-average down to the component's size (any downsampling makes a valid file)
        ys = (np.arange(ch)[:, None] * vmax // vs + np.arange(vmax // vs)[None, :]).clip(
            0, height - 1
        )
        xs = (np.arange(cw)[:, None] * hmax // hs + np.arange(hmax // hs)[None, :]).clip(
            0, width - 1
        )
        small = plane[ys[:, :, None, None], xs[None, None, :, :]].mean(axis=(1, 3))
        rows = mcu_rows * (1 if gray else vs) * 8
        cols = mcu_cols * (1 if gray else hs) * 8
        padded = np.pad(small, ((0, rows - ch), (0, cols - cw)), mode="edge")
        coefs.append(_blocks(padded, quant))
    bits = _Bits()
    pred = [0] * len(planes)
    count = 0
    for my in range(mcu_rows):
        for mx in range(mcu_cols):
            if restart and count and count % restart == 0:
                bits.flush()
                bits.out += bytes([0xFF, 0xD0 + (count // restart - 1) % 8])
                pred = [0] * len(planes)
            count += 1
            for c, (hs, vs) in enumerate(sampling):
                hs, vs = (1, 1) if gray else (hs, vs)
                for by in range(vs):
                    for bx in range(hs):
                        block = coefs[c][my * vs + by, mx * hs + bx].tolist()
                        size, extra = _category(block[0] - pred[c])
                        pred[c] = block[0]
                        bits.put(*_DC_CODE[size])
                        bits.put(extra, size)
                        run = 0
                        for v in block[1:]:
                            if v == 0:
                                run += 1
                                continue
                            while run > 15:
                                bits.put(*_AC_CODE[0xF0])
                                run -= 16
                            size, extra = _category(v)
                            bits.put(*_AC_CODE[(run << 4) | size])
                            bits.put(extra, size)
                            run = 0
                        if run:
                            bits.put(*_AC_CODE[0x00])
    bits.flush()
    ncomp = len(planes)
    sof = struct.pack(">BHHB", 8, height, width, ncomp) + b"".join(
        bytes([c + 1, hs << 4 | vs, 0]) for c, (hs, vs) in enumerate(sampling)
    )
    sos = bytes([ncomp]) + b"".join(bytes([c + 1, 0x00]) for c in range(ncomp)) + b"\x00\x3f\x00"
    head = (
        b"\xff\xd8"
        + _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
        + _segment(0xDB, bytes([0, *quant.ravel()[_ZIGZAG].tolist()]))
        + _segment(0xC0, sof)
        + _segment(0xC4, _dht(0, 0, _DC_SYMBOLS, 4) + _dht(1, 0, _AC_SYMBOLS, 8))
        + (_segment(0xDD, struct.pack(">H", restart)) if restart else b"")
        + _segment(0xDA, sos)
    )
    return head + bytes(bits.out) + b"\xff\xd9"
