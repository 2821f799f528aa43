"""The framing of the compressed streams chunkio decodes, read without their libraries.

Every compressor chunkio decodes itself (:data:`chunkio.backends.codec_table.DECODED`) frames
its stream with the size it decodes to. The codec table compares that size with the
destination before a decoder runs, because the decoders do not: numcodecs' Blosc, Zstd and
LZ4, handed a destination larger than their stream declares, fill only its start and report
success (the rest keeps whatever the buffer held), and Blosc reads as many input bytes as its
header says whatever the buffer holds. The functions here are those checks' other half: each
reads the sizes a stream declares, in O(1) for the streams zstd, numcodecs and HDF5's filters
write, and raises ValueError where the stream is too short for its own framing.

Nothing here calls a compressor library (that is :mod:`~chunkio.backends.codec_table`'s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

__all__ = [
    "GZIP_MAGIC",
    "Declared",
    "blosc_size",
    "gzip_size",
    "hdf5_lz4_blocks",
    "hdf5_lz4_size",
    "lz4_size",
    "zstd_size",
]

#: ``(stored stream, the size the destination expects)`` -> the decoded size the stream
#: declares, or ``None`` where it declares none (its decoder must then fill exactly the
#: destination or raise); ValueError if the framing is cut short or inconsistent
Declared = Callable[[npt.NDArray[np.uint8], int], int | None]

GZIP_MAGIC = b"\x1f\x8b"


def _le(src: npt.NDArray[np.uint8] | bytes, at: int, n: int) -> int:
    data = src[at : at + n]
    return int.from_bytes(data if isinstance(data, bytes) else data.tobytes(), "little")


def blosc_size(src: npt.NDArray[np.uint8], expected: int) -> int:
    """Blosc 1's 16-byte header: version, versionlz, flags, typesize, then the decoded size,
    the block size and the stored size (4 bytes little-endian each). The stored size must be
    the stream's own: Blosc's decoder takes the header's word for how many bytes it may read.

    >>> header = bytes([2, 1, 1, 1]) + (800).to_bytes(4, "little") + bytes(4)
    >>> blosc_size(np.frombuffer(header + (16).to_bytes(4, "little"), np.uint8), 800)
    800
    """
    if src.size < 16:
        raise ValueError(f"Blosc stream of {src.size} bytes is shorter than its 16-byte header")
    header = src[:16].tobytes()  # one copy of the header: slicing the array costs more
    stored = _le(header, 12, 4)
    if stored != src.size:
        raise ValueError(f"Blosc header declares {stored} stored bytes; the stream has {src.size}")
    return _le(header, 4, 4)


def lz4_size(src: npt.NDArray[np.uint8], expected: int) -> int:
    """numcodecs' LZ4 format: the decoded size (4 bytes little-endian), then one LZ4 block."""
    if src.size < 4:
        raise ValueError(f"LZ4 stream of {src.size} bytes is shorter than its 4-byte size")
    return _le(src, 0, 4)


def gzip_size(src: npt.NDArray[np.uint8], expected: int) -> int | None:
    """A gzip member's trailer: the decoded size modulo 2**32 (its last 4 bytes). A zlib
    stream (no gzip magic) declares no size: ``None``.

    >>> import gzip
    >>> gzip_size(np.frombuffer(gzip.compress(bytes(70)), np.uint8), 70)
    70
    """
    if src[:2].tobytes() != GZIP_MAGIC:
        return None
    if src.size < 18:
        raise ValueError(f"gzip stream of {src.size} bytes is shorter than its header and trailer")
    size = _le(src, src.size - 4, 4)
    return expected if size == expected % 2**32 else size


def hdf5_lz4_size(src: npt.NDArray[np.uint8], expected: int) -> int:
    """The HDF5 LZ4 filter's frame: the decoded size (8 bytes, big-endian) comes first."""
    if src.size < 12:
        raise ValueError(f"LZ4 frame of {src.size} bytes is shorter than its header")
    return int.from_bytes(src[:8].tobytes(), "big")


def hdf5_lz4_blocks(src: npt.NDArray[np.uint8]) -> Iterator[tuple[int, int, int, int]]:
    """The blocks of an HDF5 LZ4 frame: total size (8 bytes, big-endian), block size (4),
    then per block its stored size (4) and the block (stored raw when it would not shrink).

    Yields ``(position of the block's size field, stored size, decoded offset, decoded
    size)`` for each block, having checked that it lies inside the frame; ValueError where the
    frame ends early or holds bytes past its last block.
    """
    total = hdf5_lz4_size(src, 0)
    block = int.from_bytes(src[8:12].tobytes(), "big") or total
    pos, out = 12, 0
    while out < total:
        want = min(block, total - out)
        if pos + 4 > src.size:
            raise ValueError("LZ4 frame ends inside a block header")
        size = int.from_bytes(src[pos : pos + 4].tobytes(), "big")
        if size > src.size - pos - 4:
            raise ValueError(f"LZ4 block of {size} bytes runs past the frame's end")
        yield pos, size, out, want
        pos, out = pos + 4 + size, out + want
    if pos != src.size:
        raise ValueError(f"LZ4 frame of {total} bytes ends at byte {pos} of {src.size}")


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the 16 values 0x184D2A50..0x184D2A5F
_DICT_ID_BYTES = (0, 1, 2, 4)


def zstd_size(src: npt.NDArray[np.uint8], expected: int) -> int | None:
    """The content sizes zstd frame headers declare, summed over the stream's frames
    (``None`` where a frame declares none, as streaming compressors write them).

    O(1) when the first frame declares at least ``expected`` bytes (a later frame could only
    add to it, and the decoder refuses a total past its destination): the stream zstd and
    numcodecs write, one frame with its size. Other streams (several frames, skippable ones)
    are walked frame by frame, block header by block header.
    """
    first, _ = _zstd_frame(src, 0, walk=False)
    if first is None or first >= expected:
        return first
    total, at = 0, 0
    while at < src.size:
        size, at = _zstd_frame(src, at, walk=True)
        if size is None:
            return None
        total += size
    return total


def _zstd_frame(src: npt.NDArray[np.uint8], at: int, *, walk: bool) -> tuple[int | None, int]:
    """The frame starting at byte ``at``: its content size (a skippable frame's is 0), and
    where it ends (``walk``) or where its header ends."""
    if src.size - at < 4:
        raise ValueError(f"zstd stream ends inside a frame's magic number (byte {at})")
    header = src[at : at + 18].tobytes()  # the longest frame header: one copy, parsed as bytes
    magic = _le(header, 0, 4)
    if magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:  # its size (4 bytes), then that many bytes
        end = at + 8 + _le(header, 4, 4)
        if end > src.size:
            raise ValueError(f"zstd skippable frame at byte {at} runs past the stream's end")
        return 0, end
    if magic != _ZSTD_MAGIC:
        raise ValueError(f"no zstd frame at byte {at} (magic number {magic:#010x})")
    if len(header) < 6:  # magic, descriptor, then at least a window or size byte
        raise ValueError(f"zstd stream ends inside the header of the frame at byte {at}")
    descriptor = header[4]
    single = descriptor >> 5 & 1
    pos = 5 + (1 - single) + _DICT_ID_BYTES[descriptor & 3]
    n = (single, 2, 4, 8)[descriptor >> 6]
    if pos + n > len(header):
        raise ValueError(f"zstd stream ends inside the header of the frame at byte {at}")
    size = None if n == 0 else _le(header, pos, n) + (256 if n == 2 else 0)
    pos += at + n
    if not walk:
        return size, pos
    last = 0
    while not last:
        if pos + 3 > src.size:
            raise ValueError(f"zstd frame at byte {at} ends inside a block header (byte {pos})")
        head = _le(src, pos, 3)
        last, kind, length = head & 1, head >> 1 & 3, head >> 3
        if kind == 3:
            raise ValueError(f"zstd block of the reserved type at byte {pos}")
        pos += 3 + (1 if kind == 1 else length)  # an RLE block stores its one byte
    end = pos + 4 * (descriptor >> 2 & 1)  # the content checksum
    if end > src.size:
        raise ValueError(f"zstd frame at byte {at} runs past the stream's end")
    return size, end
