"""Chunk checksums checked in the reading process: crc32c (Zarr) and HDF5's fletcher32.

Both run over a chunk's stored bytes before they are decoded. crc32c is google_crc32c's
hardware-accelerated C (memory speed). HDF5's Fletcher-32 is summed by chunkio's compiled
``_fletcher`` (16 independent lanes the compiler vectorizes, where HDF5's loop is one chain of
dependent adds: a 64^3 int16 chunk of 512 KiB in about a tenth of numcodecs' time); without it
(no C compiler at install), by whole-array NumPy operations, and buffers up to 768 KiB (patch
volumes' chunks), where those operations cost more in calls and passes than the loop does, by
numcodecs' C port of HDF5's loop.

How: HDF5 sums big-endian 16-bit words ``w_i`` into ``s1 = sum w_i`` and
``s2 = sum (n - i) w_i``, both modulo 65535 (:func:`fletcher32_reference` is the loop). Since
``2**16 = 1 (mod 65535)``, a big-endian word is 256 times its little-endian reading modulo
65535, so native little-endian words do. Viewing the bytes as ``uint64`` (four words each),
masks split them into two 32-bit lanes per element, whose sums cannot overflow for up to 65,536
elements; the weighted sum ``sum i w_i`` comes from the row and column sums of those lanes laid
out as a matrix (``i = row * K + column``). The result equals HDF5's bit for bit, including its
``0xffff`` for a non-zero sum that is a multiple of 65535 (tests compare with HDF5's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import google_crc32c
import numpy as np
import numpy.typing as npt
from numcodecs.fletcher32 import Fletcher32 as _CFletcher32

from ..errors import CorruptChunkError

_compiled_sums: Callable[[Any], tuple[int, int, bool]] | None
try:  # the compiled sums (setup.py builds them where a C compiler is)
    from ._fletcher import sums as _compiled_sums
except ImportError:  # pragma: no cover - a build without a C compiler
    _compiled_sums = None

__all__ = [
    "Fletcher32",
    "crc32c",
    "fletcher32",
    "fletcher32_body",
    "fletcher32_matches",
    "fletcher32_reference",
]

#: buffers up to this size are summed by numcodecs' C port of HDF5's loop: on small chunks
#: (patches' 32**3 and 64**3 chunks) the NumPy sums below cost more in calls and passes than
#: the loop (64 KiB: about 3x numcodecs' time, its copy included; 384-768 KiB: 0.6x-0.9x
#: NumPy's time; 1 MiB: NumPy ahead)
_C_BELOW = 768 << 10
_C_SUM = _CFletcher32()

_P = 65535
_MASK = np.uint64(0x0000FFFF0000FFFF)
_LOW = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)
_16 = np.uint64(16)
#: uint64 elements per matrix row: a row's lane sums stay below 2**32 (< 65,536 elements)
_ROW = 2048
#: rows per block: a column's lane sums stay below 2**32 too
_BLOCK_ROWS = 32768


def crc32c(body: npt.NDArray[np.uint8]) -> int:
    """CRC-32C of ``body`` (a read-only or writable uint8 array)."""
    return int(google_crc32c.value(body))


def _lane_sum(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    return (x & _LOW) + (x >> _32)


class Fletcher32:
    """HDF5's Fletcher-32 of a byte buffer, reusing its scratch memory between calls.

    Keep one per reader: fresh scratch arrays for every chunk would cost a page fault per
    4 KiB, more than the arithmetic. Not thread-safe (one per thread, or a lock around it).

    >>> f = Fletcher32()
    >>> f(b"abcde") == fletcher32_reference(b"abcde"), f(bytes(6)), hex(f(b"\\xff" * 4))
    (True, 0, '0xffffffff')
    """

    def __init__(self) -> None:
        self._even = np.empty(0, np.uint64)
        self._odd = np.empty(0, np.uint64)

    def __call__(self, data: Any) -> int:
        b = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        if b.dtype != np.uint8:  # the sum runs over bytes, whatever the array's items
            b = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
        if _compiled_sums is not None and b.flags.c_contiguous:
            total, weighted, nonzero = _compiled_sums(b)
            return _checksum(b, b.size // 2, total, weighted, nonzero)
        if 0 < b.size <= _C_BELOW:  # the sum is the last 4 bytes of numcodecs' encoding
            return int.from_bytes(_C_SUM.encode(b)[-4:], "little")
        n = b.size // 2  # whole words
        elements = n // 4
        if self._even.size < elements:
            self._even = np.empty(elements, np.uint64)
            self._odd = np.empty(elements, np.uint64)
        total = weighted = 0
        words = b[: 8 * elements].view(np.uint64)
        step = _ROW * _BLOCK_ROWS
        for start in range(0, elements, step):
            stop = min(start + step, elements)
            full = start + (stop - start) // _ROW * _ROW
            for a, z in ((start, full), (full, stop)):
                if z > a:
                    width = _ROW if z == full else z - a
                    s, w = self._sums(words[a:z], a, width)
                    total += s
                    weighted += w
        for i in range(4 * elements, n):  # at most three words left
            w = int(b[2 * i]) | int(b[2 * i + 1]) << 8
            total += w
            weighted += i * w
        return _checksum(b, n, total, weighted, total != 0)

    def _sums(self, words: npt.NDArray[np.uint64], first: int, width: int) -> tuple[int, int]:
        """``(sum w, sum i w)`` (exact; word ``i`` counted from ``4 * first``) of ``words``
        laid out as rows of ``width`` elements."""
        size = words.size
        even = np.bitwise_and(words, _MASK, out=self._even[:size]).reshape(-1, width)
        odd = np.right_shift(words, _16, out=self._odd[:size])
        odd = np.bitwise_and(odd, _MASK, out=odd).reshape(-1, width)
        rows = even.shape[0]
        row_even, row_odd = even.sum(axis=1), odd.sum(axis=1)
        per_row = _lane_sum(row_even) + _lane_sum(row_odd)
        per_col = _lane_sum(even.sum(axis=0)) + _lane_sum(odd.sum(axis=0))
        total = int(per_row.sum())
        # sum over elements k of k * (its four words), then each word's place in its element
        weighted = first * total
        weighted += width * int(np.dot(np.arange(rows, dtype=np.uint64), per_row))
        weighted += int(np.dot(np.arange(width, dtype=np.uint64), per_col))
        w1 = int((row_odd & _LOW).sum())
        w2 = int((row_even >> _32).sum())
        w3 = int((row_odd >> _32).sum())
        return total, 4 * weighted + w1 + 2 * w2 + 3 * w3


def _checksum(b: npt.NDArray[np.uint8], n: int, total: int, weighted: int, nonzero: bool) -> int:
    """HDF5's checksum of ``b`` from the sums over its ``n`` whole little-endian words (exact,
    or modulo 65535): ``sum w_i``, ``sum i w_i`` and whether any is non-zero."""
    # little-endian sums -> big-endian sums, modulo 65535
    s1 = 256 * total % _P
    s2 = 256 * (n * total - weighted) % _P
    if b.size % 2:
        last = int(b[-1]) << 8
        s1 = (s1 + last) % _P
        s2 = (s2 + s1) % _P
        nonzero = nonzero or last != 0
    if not nonzero:
        return 0
    return (((s2 - 1) % _P + 1) << 16) | ((s1 - 1) % _P + 1)


def fletcher32_matches(computed: int, stored: int) -> bool:
    """As HDF5 checks: the checksum, or the byte-pair-swapped one that HDF5 < 1.6.3 wrote.

    >>> fletcher32_matches(0x01020304, 0x02010403), fletcher32_matches(1, 2)
    (True, False)
    """
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)
    return stored in (computed, swapped)


def fletcher32_body(
    raw: npt.NDArray[np.uint8],
    *,
    key: Any,
    offset: int,
    verified: dict[Any, tuple[int, int, int]],
    summer: Fletcher32,
    where: str | Callable[[], str],
) -> npt.NDArray[np.uint8]:
    """An HDF5 chunk's bytes without their trailing fletcher32, checked: once per process for
    each ``(offset, size, checksum)`` of chunk ``key`` (``verified`` remembers them, so a file
    changed in place is checked again); ``CorruptChunkError`` naming ``where`` otherwise
    (``where`` may be a function making the name: only a failure pays for the string)."""
    size = raw.size
    if size < 4:
        raise CorruptChunkError(f"{_name(where)} is truncated ({size} bytes)")
    body = raw[:-4]
    stored = int.from_bytes(raw[-4:].tobytes(), "little")
    if verified.get(key) != (offset, size, stored):
        if not fletcher32_matches(summer(body), stored):
            raise CorruptChunkError(
                f"{_name(where)} fails its fletcher32 checksum (the file is corrupt)"
            )
        verified[key] = (offset, size, stored)
    return body


def _name(where: str | Callable[[], str]) -> str:
    return where if isinstance(where, str) else where()


def fletcher32(data: Any) -> int:
    """HDF5's Fletcher-32 checksum of ``data`` (bytes or a uint8 array), as HDF5 stores it.

    >>> fletcher32(b"abcde") == fletcher32_reference(b"abcde")
    True
    """
    return Fletcher32()(data)


def fletcher32_reference(data: bytes) -> int:
    """HDF5's ``H5_checksum_fletcher32``, word by word (for tests and documentation)."""
    sum1 = sum2 = 0
    n = len(data) // 2
    i = 0
    while n:
        t = min(n, 360)
        n -= t
        for _ in range(t):
            sum1 += (data[i] << 8) | data[i + 1]
            i += 2
            sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if len(data) % 2:
        sum1 += data[i] << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1
