"""yuv420: stored sizes checked before anything is allocated, and one verdict from every
decoder (the C path with lz4's LZ4 or the extension's own, and the NumPy path) on the same
bytes (RELIABILITY rows 34 and 35)."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from chunkio.errors import CorruptChunkError
from chunkio.images import yuv
from chunkio.images.encoding import decoded_shape

needs_c = pytest.mark.skipif(not yuv.COMPILED, reason="the yuv420 extension is not built")


@pytest.fixture(params=["C", "NumPy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test below runs on both paths: the extension's, and numpy's without it."""
    if request.param == "C" and not yuv.COMPILED:
        pytest.skip("the yuv420 extension is not built")
    if request.param == "NumPy":
        monkeypatch.setattr(yuv, "_yuv", None)
    yield request.param


def _header(height: int, width: int, channels: int = 3, band: int = 64) -> bytes:
    return struct.pack("<4sIIBBH", b"Y420", height, width, channels, 1, band)


@pytest.mark.parametrize(
    ("height", "width"), [(2**31, 2**32 - 1), (2**32 - 1, 2**31), (65536, 65536), (10**6, 10**4)]
)
def test_headers_naming_more_pixels_than_the_bytes_hold_are_refused_first(
    path: str, height: int, width: int
) -> None:
    """No allocation sized by the header: a typed error, before the offsets are read."""
    data = _header(height, width) + bytes(4096)
    with pytest.raises(CorruptChunkError, match="more than 4112 bytes of LZ4 can hold"):
        yuv.decode_box(data, np.empty((1, 1, 3), np.uint8), top=0, left=0)
    with pytest.raises(CorruptChunkError, match="can hold"):
        decoded_shape(data, "yuv420")


def test_a_band_declaring_more_than_lz4_can_give_is_refused(path: str) -> None:
    """A band of 1 byte of LZ4 cannot hold 64 rows of 2,000 pixels, however it is declared
    (the next band's bytes make the image's size plausible)."""
    width = 2000
    bands = [struct.pack("<I", 64 * width) + b"\x00", struct.pack("<I", 64 * width) + bytes(1100)]
    offsets = struct.pack("<III", 0, len(bands[0]), len(bands[0]) + len(bands[1]))
    data = _header(128, width, channels=1) + offsets + b"".join(bands)
    with pytest.raises(CorruptChunkError, match="band 0 declares 128000 bytes in 1"):
        yuv.decode_box(data, np.empty((1, 1), np.uint8), top=0, left=0)


def _damaged(which: str) -> tuple[bytes, bytes]:
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (200, 90, 3), dtype=np.uint8)
    good = yuv.encode(image, band=16)
    data = bytearray(good)
    count = -(-200 // 16)
    start = 16 + 4 * (count + 1)
    offsets = struct.unpack_from(f"<{count + 1}I", good, 16)
    if which == "declared size":  # the last band's declared size
        data[start + offsets[-2]] ^= 1
    elif which == "offsets":  # the last band's start moved past its end
        struct.pack_into("<I", data, 16 + 4 * (count - 1), offsets[-1] - 2)
    return good, bytes(data)


@pytest.mark.parametrize("which", ["declared size", "offsets"])
def test_a_bad_band_anywhere_is_refused_wherever_the_box_is(path: str, which: str) -> None:
    """Every band is checked by both paths, not only those the box needs (the box is in the
    first rows; the damage in the last band)."""
    good, data = _damaged(which)
    out = np.empty((10, 10, 3), np.uint8)
    yuv.decode_box(good, out, top=0, left=0)
    with pytest.raises(CorruptChunkError, match="band 12"):
        yuv.decode_box(data, out, top=0, left=0)


@needs_c
def test_every_decoder_gives_one_verdict_on_fuzzed_bytes() -> None:
    """The C path with lz4's decoder and with its own, and the NumPy path, on the same
    seeded mutants (whole images; single LZ4 blocks mutated, drawn at random, or parsed to
    end on lz4's end-of-block rules): the same pixels, or the same typed error. In a
    subprocess, so that a crash in compiled code fails the test instead of the run."""
    script = Path(__file__).with_name("_fuzz_yuv_verdicts.py")
    run = subprocess.run(
        [sys.executable, str(script), "900", "0"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, (
        f"fuzz run ended with {run.returncode} (negative: killed by a signal)\n"
        f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    assert "one verdict from all three decoders" in run.stdout
    assert "'pixels'" in run.stdout and "'corrupt'" in run.stdout  # both kinds were compared
