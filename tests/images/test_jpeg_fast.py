"""The plain-JPEG fast path (:mod:`chunkio.images.jpeg`) gives what Pillow gives.

Every file here is probed and decoded twice: through the fast path, and through Pillow with
the fast path turned off; probes and pixels must be equal. Files the fast path must leave to
Pillow (CMYK, multi-picture, XMP orientation, truncated, odd EXIF) are checked to be left.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chunkio.images import jpeg as jpeg_fast
from chunkio.images import pillow as decode
from chunkio.images.pillow import DecodePolicy, UndecodableImage, load_image, probe_image


def photo(hw: tuple[int, int] = (40, 56), seed: int = 0) -> np.ndarray:
    """Smooth colour gradients plus noise: compresses like a photo, not like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[: hw[0], : hw[1]]
    base = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 24, (*hw, 3))).clip(0, 255).astype(np.uint8)


def jpeg(path: Path, im: Image.Image, **kw: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, format=kw.pop("format", "JPEG"), quality=90, **kw)
    return path


def exif(orientation: int) -> bytes:
    data = Image.Exif()
    data[0x0112] = orientation
    return data.tobytes()


def pillow_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_probe_jpeg", lambda path, policy: None)
    monkeypatch.setattr(decode, "_plain_jpeg", lambda path, policy, stored: None)


def both_ways(monkeypatch: pytest.MonkeyPatch, path: Path, policy: DecodePolicy) -> tuple[Any, Any]:
    """(probe, pixels or the error text), fast path first, then Pillow only."""
    out = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                pillow_only(m)
            probe = probe_image(str(path), policy)
            pixels: Any = None
            if probe.error is None:
                try:
                    pixels = load_image(str(path), policy, stored=probe.stored_mode)
                except UndecodableImage as err:
                    pixels = err.reason
            out.append((probe, pixels))
    return out[0], out[1]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    return bool(a == b)


PLAIN = {
    "rgb 4:2:0": lambda: Image.fromarray(photo()),
    "odd size": lambda: Image.fromarray(photo((17, 9))),
    "one pixel": lambda: Image.fromarray(photo((1, 1))),
    "gray": lambda: Image.fromarray(photo()).convert("L"),
}
PLAIN_OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "4:4:4": {"subsampling": 0},
    "4:2:2": {"subsampling": 1},
    "progressive": {"progressive": True},
    "exif orientation 1": {"exif": exif(1)},
}


@pytest.mark.parametrize("image", sorted(PLAIN))
@pytest.mark.parametrize("options", sorted(PLAIN_OPTIONS))
@pytest.mark.parametrize("mode", ["RGB", "L", "keep"])
def test_plain_jpegs_probe_and_decode_as_pillow_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image: str, options: str, mode: Any
) -> None:
    path = jpeg(tmp_path / "a.jpg", PLAIN[image](), **PLAIN_OPTIONS[options])
    assert jpeg_fast.read_header(str(path)) is not None  # the fast path is what is tested
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy(mode=mode))
    assert fast[0] == pillow[0]
    assert same(fast[1], pillow[1])


@pytest.mark.parametrize("orientation", [0, 2, 3, 4, 5, 6, 7, 8, 9])
def test_exif_orientations_read_as_pillow_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orientation: int
) -> None:
    path = jpeg(tmp_path / "r.jpg", Image.fromarray(photo((24, 40))), exif=exif(orientation))
    header = jpeg_fast.read_header(str(path))
    assert header is not None and header.orientation == orientation
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy())
    assert fast[0] == pillow[0]
    assert not fast[0].plain_jpeg
    assert same(fast[1], pillow[1])


def _with_segment(data: bytes, marker: int, body: bytes) -> bytes:
    """``data`` with an APPn segment inserted after SOI."""
    return data[:2] + struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body + data[2:]


def _encoded(im: Image.Image, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=90, **kw)
    return buf.getvalue()


def left_to_pillow() -> dict[str, bytes]:
    rgb = Image.fromarray(photo())
    plain = _encoded(rgb)
    xmp = b'http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta><rdf:Description tiff:Orientation="6"/>'
    mpo = io.BytesIO()
    rgb.save(mpo, format="MPO", save_all=True, append_images=[rgb.rotate(90)])
    return {
        "cmyk": _encoded(rgb.convert("CMYK")),
        "xmp orientation": _with_segment(plain, 0xE1, xmp),
        "multi-picture": mpo.getvalue(),
        "adobe": _with_segment(plain, 0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01"),
        "truncated": plain[: len(plain) * 2 // 3],
        "bytes appended": plain + b"\x00" * 64,
        "two exif segments": _with_segment(_encoded(rgb, exif=exif(6)), 0xE1, exif(3)),
        "exif orientation as a long": _with_segment(
            plain,
            0xE1,
            b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x01\x00\x12\x01\x04\x00"
            b"\x01\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00\x00",
        ),
        "png named jpg": _png(rgb),
        "not an image": b"hello",
    }


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("case", sorted(left_to_pillow()))
def test_files_the_fast_path_cannot_read_exactly_go_to_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    path = tmp_path / "x.jpg"
    path.write_bytes(left_to_pillow()[case])
    header = jpeg_fast.read_header(str(path))
    assert header is None or not header.ends_with_eoi
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy(mode="keep"))
    assert fast[0] == pillow[0]
    assert same(fast[1], pillow[1])


def test_a_header_past_the_first_64_kib_goes_to_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _encoded(Image.fromarray(photo()))
    for _ in range(3):  # three 30 KB comments before the frame header
        data = _with_segment(data, 0xFE, b"c" * 30_000)
    path = tmp_path / "long.jpg"
    path.write_bytes(data)
    assert jpeg_fast.read_header(str(path)) is None
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy())
    assert fast[0] == pillow[0] and fast[0].height == 40
    assert same(fast[1], pillow[1])


def test_decompression_bombs_get_pillows_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jpeg(tmp_path / "big.jpg", Image.fromarray(photo((64, 64))))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy())
    assert fast[0] == pillow[0]
    assert fast[0].error is not None and "decompression bomb" in fast[0].error


def test_damaged_entropy_data_is_judged_by_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytearray(_encoded(Image.fromarray(photo((64, 64)))))
    sos = data.index(b"\xff\xda")
    for k in range(sos + 40, len(data) - 10, 7):  # garbage in the scan, markers avoided
        data[k] = 0xFF if data[k - 1] != 0xFF else 0x00
    path = tmp_path / "damaged.jpg"
    path.write_bytes(bytes(data))
    fast, pillow = both_ways(monkeypatch, path, DecodePolicy())
    assert fast[0] == pillow[0]
    assert same(fast[1], pillow[1])


def test_a_kind_whose_pixels_differ_from_pillows_is_decoded_by_pillow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another libjpeg-turbo build could round differently: compared once per kind."""
    import simplejpeg

    real = simplejpeg.decode_jpeg
    calls = []

    def off_by_one(data: Any, **kw: Any) -> np.ndarray:
        calls.append(1)
        return real(data, **kw) ^ np.uint8(1)

    monkeypatch.setattr(simplejpeg, "decode_jpeg", off_by_one)
    monkeypatch.setattr(jpeg_fast, "_kind_exact", {})
    paths = [jpeg(tmp_path / f"{i}.jpg", Image.fromarray(photo(seed=i))) for i in range(3)]
    for path in paths:
        got = load_image(str(path), DecodePolicy(), stored="RGB")
        with monkeypatch.context() as m:
            pillow_only(m)
            want = load_image(str(path), DecodePolicy(), stored="RGB")
        np.testing.assert_array_equal(got, want)
    assert len(calls) == 1  # compared on the first file; the kind then went to Pillow
    assert list(jpeg_fast._kind_exact.values()) == [False]


def test_a_matching_kind_is_compared_once_then_decoded_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jpeg_fast, "_kind_exact", {})
    pillow_calls = []
    real = decode._pillow_pixels

    def counted(*args: Any) -> Any:
        pillow_calls.append(1)
        return real(*args)

    monkeypatch.setattr(decode, "_pillow_pixels", counted)
    for i in range(4):
        path = jpeg(tmp_path / f"{i}.jpg", Image.fromarray(photo(seed=i)))
        load_image(str(path), DecodePolicy(), stored="RGB")
    assert len(pillow_calls) == 1
    assert list(jpeg_fast._kind_exact.values()) == [True]


def test_resized_and_shrunk_images_keep_pillows_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = jpeg(tmp_path / "a.jpg", Image.fromarray(photo((40, 56))))
    for policy in (DecodePolicy(size=(20, 20)), DecodePolicy(max_size=30)):
        fast, pillow = both_ways(monkeypatch, path, policy)
        assert fast[0] == pillow[0]
        assert same(fast[1], pillow[1])
    assert decode._plain_jpeg(str(path), DecodePolicy(max_size=30), "RGB") is None
    assert decode._plain_jpeg(str(path), DecodePolicy(max_size=56), "RGB") is not None
