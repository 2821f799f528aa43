"""One verdict from every yuv420 decoder on the same fuzzed bytes (run as a script).

Run by ``test_yuv420_verdicts.py`` in a subprocess, so that a crash in compiled code ends
this process, not the test run. Three decoders read each mutant:

- the C path with lz4's own ``LZ4_decompress_safe`` (numcodecs' build, the default),
- the C path with the extension's fallback LZ4 decoder (``set_lz4(0)``),
- the NumPy path (the extension taken away: numcodecs' LZ4, numpy's conversion),

and must give the same pixels, or all raise the same typed error (CorruptChunkError, or the
ValueError of a box outside a mutated header's size). Two kinds of input: whole images
(header, band offsets and bands mutated), and single-band gray images whose one LZ4 block is
mutated (or drawn as random sequences near the block's end rules), which test the LZ4
decoders against each other byte for byte.

    python tests/images/_fuzz_yuv_verdicts.py [mutants] [seed]
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np


def main(mutants: int, seed: int) -> None:
    from chunkio.backends.codec_table import lz4_block
    from chunkio.errors import CorruptChunkError
    from chunkio.images import yuv

    compiled = yuv._yuv
    assert compiled is not None, "the yuv420 extension is not built"
    address = yuv.lz4_decompress_address()
    assert address != 0, "numcodecs' LZ4_decompress_safe not found"
    rng = np.random.default_rng(seed)

    def verdict(call: Callable[[], np.ndarray]) -> tuple[str, Any]:
        try:
            return "pixels", call().tobytes()
        except CorruptChunkError as err:
            return "corrupt", str(err)
        except ValueError as err:  # a box outside the mutated header's size
            return type(err).__name__, str(err)

    def three(data: bytes, shape: tuple[int, ...], top: int, left: int) -> list[tuple[str, Any]]:
        def run() -> np.ndarray:
            return yuv.decode_box(data, np.empty(shape, np.uint8), top=top, left=left)

        found = [verdict(run)]
        compiled.set_lz4(0)
        try:
            found.append(verdict(run))
        finally:
            compiled.set_lz4(address)
        yuv._yuv = None
        try:
            found.append(verdict(run))
        finally:
            yuv._yuv = compiled
        return found

    y, x = np.mgrid[:90, :70]
    colour = (np.stack([x * 3, y * 2, x + y], -1) + rng.integers(0, 20, (90, 70, 3))).astype(
        np.uint8
    )
    images = [yuv.encode(colour, band=16), yuv.encode(colour[:40, :50, 0], band=8)]

    def mutate(data: bytearray, low: int) -> bytearray:
        for _ in range(int(rng.integers(1, 4))):
            if not data:
                break
            at = int(rng.integers(low if low < len(data) else 0, len(data)))
            kind = int(rng.integers(0, 5))
            if kind == 0:
                data[at] ^= 1 << int(rng.integers(0, 8))
            elif kind == 1:
                data[at] = int(rng.integers(0, 256))
            elif kind == 2:
                del data[at:]
            elif kind == 3:
                data[at:at] = bytes([int(rng.integers(0, 256))])
            else:
                del data[at : at + 1 + int(rng.integers(0, 8))]
        return data

    def single_band(block: bytes, rows: int, width: int) -> bytes:
        head = struct.pack("<4sIIBBH", b"Y420", rows, width, 1, 1, 64)
        body = struct.pack("<I", rows * width) + block
        return head + struct.pack("<II", 0, len(body)) + body

    def random_block(size: int) -> bytes:
        """Sequences of random literal and match lengths, offsets and length bytes."""
        out = bytearray()
        while len(out) < size:
            lit, ml = int(rng.integers(0, 16)), int(rng.integers(0, 16))
            out.append(lit << 4 | ml)
            if lit == 15:
                out += bytes([255] * int(rng.integers(0, 2)) + [int(rng.integers(0, 40))])
            out += bytes(rng.integers(0, 256, lit, dtype=np.uint8))
            out += struct.pack("<H", int(rng.integers(0, 40)))
            if ml == 15:
                out.append(int(rng.integers(0, 30)))
        return bytes(out[:size])

    def length_bytes(n: int) -> bytes:
        return bytes([255] * (n // 255) + [n % 255])

    def parsed_block(cap: int) -> bytes:
        """Sequences that give exactly ``cap`` bytes (offsets within what is written, now
        and then 0), ending in a literal run of 0..12 bytes or in a match: valid for a lax
        decoder, refused by lz4 where they break its end-of-block rules."""
        out, o = bytearray(), 0
        while True:
            left = cap - o
            lit = int(rng.integers(0, min(left, 20) + 1))
            ml = int(rng.integers(4, 24))
            if lit + ml > left or left <= int(rng.integers(0, 13)):
                if rng.random() < 0.8 or left < 4:  # the last literals
                    out.append(min(left, 15) << 4)
                    out += length_bytes(left - 15) if left >= 15 else b""
                    out += bytes(rng.integers(0, 256, left, dtype=np.uint8))
                    return bytes(out)
                lit, ml = 0, left  # or a match to the very end
            out.append(min(lit, 15) << 4 | min(ml - 4, 15))
            out += length_bytes(lit - 15) if lit >= 15 else b""
            out += bytes(rng.integers(0, 256, lit, dtype=np.uint8))
            o += lit
            offset = 0 if o == 0 or rng.random() < 0.05 else int(rng.integers(1, o + 1))
            out += struct.pack("<H", offset)
            out += length_bytes(ml - 19) if ml >= 19 else b""
            o += ml
            if o == cap:
                return bytes(out)

    seen: Counter[str] = Counter()
    for k in range(mutants):
        if k % 3 == 0:  # a whole image: header, offsets and bands
            good = images[k % 2]
            data = bytes(mutate(bytearray(good), 0 if k % 2 else 16))
            colour_image = k % 2 == 0
            shape: tuple[int, ...] = (30, 40, 3) if colour_image else (20, 30)
            top, left = (20, 17) if colour_image else (10, 9)
        else:  # one gray band: its LZ4 block alone
            rows, width = int(rng.integers(1, 9)), int(rng.integers(1, 40 if k % 2 else 200))
            raw = rng.integers(0, 4, rows * width, dtype=np.uint8)
            if k % 6 == 1:
                block = bytes(mutate(bytearray(lz4_block(raw)[4:]), 0))
            elif k % 6 == 2:
                block = random_block(int(rng.integers(1, 3 * rows * width + 8)))
            else:
                block = parsed_block(rows * width)
            data = single_band(block, rows, width)
            shape, top, left = (rows, width), 0, 0
        found = three(data, shape, top, left)
        assert found[0] == found[1] == found[2], (k, data.hex(), found)
        seen[found[0][0]] += 1
    print(f"{mutants} mutants, one verdict from all three decoders: {dict(seen)}")


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 600,
        int(sys.argv[2]) if len(sys.argv) > 2 else 0,
    )
