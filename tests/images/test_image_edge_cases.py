"""RELIABILITY rows 15-21: bad, odd and degenerate image inputs.

Each case is a tiny file made here; every expectation is either a typed error naming the file
or the declared conversion, checked pixel by pixel against Pillow.
"""

from __future__ import annotations

import os
import resource
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chunkio import ChunkDataset, Execution, ImageOptions
from chunkio.convert.image.scan import scan_folder
from chunkio.convert.images import convert_images, source_paths
from chunkio.errors import SourceError


def rgb(hw: tuple[int, int] = (16, 20), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*hw, 3), dtype=np.uint8)


def save(path: Path, im: Image.Image, **kw: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, **kw)
    return path


def convert(src: Path, tmp_path: Path, name: str = "o.zarr", mode: Any = "RGB", **kw: Any) -> Any:
    # Listing order (no write-time shuffle): these tests check decoding, file by file.
    kw.setdefault("shuffle", False)
    return convert_images(
        src,
        tmp_path / name,
        **kw,
        images=ImageOptions(mode=mode),
        execution=Execution(workers=1, progress=False),
    )


def read_all(path: Path) -> dict[str, Any]:
    ds = ChunkDataset(path)
    return ds.read_batch(list(range(len(ds))))


def png_bytes(hw: tuple[int, int] = (16, 20), seed: int = 0) -> bytes:
    import io

    buf = io.BytesIO()
    Image.fromarray(rgb(hw, seed)).save(buf, format="PNG")
    return buf.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


# -- row 15: truncated and corrupt files ---------------------------------------------------------


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    save(root / "a_good.jpg", Image.fromarray(rgb(seed=1)))
    jpg = save(root / "b_cut.jpg", Image.fromarray(rgb((32, 32), seed=2)), quality=95)
    jpg.write_bytes(jpg.read_bytes()[: jpg.stat().st_size // 2])
    png = root / "c_cut.png"
    png.write_bytes(png_bytes(seed=3)[:150])
    data = bytearray(png_bytes(seed=4))
    idat = data.find(b"IDAT")
    length = int.from_bytes(data[idat - 4 : idat], "big")
    data[idat + 4 + length] ^= 0xFF  # the IDAT CRC (Pillow itself does not check it)
    (root / "d_crc.png").write_bytes(bytes(data))
    save(root / "e_good.png", Image.fromarray(rgb(seed=5)))
    return root


def test_truncated_and_bad_crc_raise_naming_the_file(damaged: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"b_cut\.jpg: .*truncated.*and 2 more bad files"):
        convert(damaged, tmp_path)
    assert not (tmp_path / "o.zarr").exists()


def test_truncated_and_bad_crc_are_skipped_with_reasons(damaged: Path, tmp_path: Path) -> None:
    result = convert(damaged, tmp_path, on_error="skip")
    reasons = {s.path: s.reason for s in result.skipped}
    assert sorted(reasons) == ["b_cut.jpg", "c_cut.png", "d_crc.png"]
    assert "truncated" in reasons["b_cut.jpg"]
    assert "CRC" in reasons["d_crc.png"]
    data = read_all(tmp_path / "o.zarr")
    assert source_paths(data["path"]) == ["a_good.jpg", "e_good.png"]
    np.testing.assert_array_equal(data["image"][1], rgb(seed=5).transpose(2, 0, 1))
    ds = ChunkDataset(tmp_path / "o.zarr")
    assert [s["path"] for s in ds.layout.extra["skipped"]] == sorted(reasons)


# -- row 16: non-images, hidden files, empty files, directories named like images ---------------


@pytest.fixture
def cluttered(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    save(root / "cls" / "one.png", Image.fromarray(rgb(seed=1)))
    save(root / "cls" / "two.JPG", Image.fromarray(rgb(seed=2)))
    (root / "cls" / "readme.txt").write_text("notes")
    (root / "cls" / ".DS_Store").write_bytes(b"\0" * 10)
    (root / "cls" / "._one.png").write_bytes(b"AppleDouble")
    (root / "cls" / "empty.png").write_bytes(b"")
    (root / "cls" / "x.jpg").mkdir()
    (root / ".git").mkdir()
    return root


def test_clutter_is_ignored_or_reported_exactly(cluttered: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"empty\.png: empty file"):
        convert(cluttered, tmp_path)
    result = convert(cluttered, tmp_path, on_error="skip")
    assert {s.path: s.reason for s in result.skipped} == {
        "cls/empty.png": "empty file (0 bytes)",
        "cls/x.jpg": "is a directory, not an image file",
    }
    assert result.ignored == 4  # readme.txt, .DS_Store, ._one.png, .git
    assert result.num_samples == 2
    assert source_paths(read_all(tmp_path / "o.zarr")["path"]) == ["cls/one.png", "cls/two.JPG"]
    # The same answer on every run.
    again = scan_folder(cluttered, on_error="skip")
    assert [e.rel for e in again.entries] == ["cls/one.png", "cls/two.JPG"]


# -- row 17: modes and bit depths ---------------------------------------------------------------


def test_eight_bit_modes_convert_to_rgb_as_declared(tmp_path: Path) -> None:
    src = tmp_path / "src"
    base = rgb(seed=7)
    alpha = np.random.default_rng(8).integers(0, 256, (16, 20), dtype=np.uint8)
    rgba = Image.fromarray(np.dstack([base, alpha]))
    palette = Image.fromarray(base).quantize(16)
    cases = {
        "a_L.png": Image.fromarray(base[..., 0]),
        "b_LA.png": Image.fromarray(np.dstack([base[..., 0], alpha]), mode="LA"),
        "c_P_trns.png": palette,
        "d_RGBA.png": rgba,
        "e_CMYK.jpg": Image.fromarray(base).convert("CMYK"),
    }
    for name, im in cases.items():
        kw = {"transparency": 3} if name == "c_P_trns.png" else {}
        save(src / name, im, **kw)
    got = read_all(convert(src, tmp_path).path)["image"]
    assert got.shape == (5, 3, 16, 20) and got.dtype == np.uint8

    def expect(name: str, via: str | None = None) -> np.ndarray:
        with Image.open(src / name) as im:
            im = im.convert(via) if via else im
            return np.asarray(im.convert("RGB")).transpose(2, 0, 1)

    np.testing.assert_array_equal(got[0], np.repeat(base[None, ..., 0], 3, axis=0))
    np.testing.assert_array_equal(got[1], np.repeat(base[None, ..., 0], 3, axis=0))  # alpha dropped
    np.testing.assert_array_equal(got[2], expect("c_P_trns.png", via="RGBA"))
    np.testing.assert_array_equal(got[3], base.transpose(2, 0, 1))  # alpha dropped, not composited
    np.testing.assert_array_equal(got[4], expect("e_CMYK.jpg"))


@pytest.fixture
def sixteen_bit(tmp_path: Path) -> tuple[Path, np.ndarray]:
    values = (np.arange(16 * 20, dtype=np.uint32) * 199 % 65536).astype(np.uint16).reshape(16, 20)
    assert values.max() > 255
    src = tmp_path / "src16"
    save(src / "a.png", Image.fromarray(values))
    save(src / "b.tif", Image.fromarray(values[::-1].copy()))
    return src, values


def test_sixteen_bit_png_and_tiff_are_stored_as_uint16(
    sixteen_bit: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    src, values = sixteen_bit
    for mode in ("L", "keep"):
        result = convert(src, tmp_path, name=f"{mode}.h5", mode=mode)
        got = read_all(Path(result.path))["image"]
        assert got.dtype == np.uint16 and got.shape == (2, 1, 16, 20)
        np.testing.assert_array_equal(got[0, 0], values)
        np.testing.assert_array_equal(got[1, 0], values[::-1])


def test_sixteen_bit_is_never_clipped_to_rgb(
    sixteen_bit: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    src, _ = sixteen_bit
    with pytest.raises(SourceError, match=r"a\.png: .*would clip"):
        convert(src, tmp_path)
    save(src / "c.png", Image.fromarray(rgb()).convert("L"))
    with pytest.raises(SourceError, match=r"one stored mode.*I;16.*L \(e\.g\. c\.png\)"):
        convert(src, tmp_path, mode="L")


def test_keep_mode_keeps_native_channels_when_all_agree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    arrays = [np.dstack([rgb(seed=i), np.full((16, 20), 40 * i, np.uint8)]) for i in range(2)]
    for i, arr in enumerate(arrays):
        save(src / f"{i}.png", Image.fromarray(arr))
    got = read_all(convert(src, tmp_path, mode="keep").path)["image"]
    assert got.shape == (2, 4, 16, 20)
    np.testing.assert_array_equal(got[1], arrays[1].transpose(2, 0, 1))
    save(src / "2.png", Image.fromarray(rgb()))
    with pytest.raises(SourceError, match=r"2 x RGBA .*1 x RGB \(e\.g\. 2\.png\)"):
        convert(src, tmp_path, name="x.zarr", mode="keep")


def test_multi_frame_gif_stores_the_first_frame(tmp_path: Path) -> None:
    frames = [Image.fromarray(np.full((8, 8), v, np.uint8)).convert("P") for v in (10, 200, 90)]
    gif = tmp_path / "src" / "anim.gif"
    gif.parent.mkdir()
    frames[0].save(gif, save_all=True, append_images=frames[1:])
    with Image.open(gif) as im:
        assert im.n_frames == 3
        first = np.asarray(im.convert("RGB")).transpose(2, 0, 1)
    result = convert(gif.parent, tmp_path)
    np.testing.assert_array_equal(read_all(Path(result.path))["image"][0], first)
    assert first[0, 0, 0] == 10
    assert ChunkDataset(result.path).layout.extra["source"]["multi_frame_files"] == 1


# -- row 18: EXIF orientation ------------------------------------------------------------------


def test_exif_orientation_6_is_applied(tmp_path: Path) -> None:
    arr = rgb((300, 400), seed=3)  # stored on disk 400 wide, 300 high
    exif = Image.Exif()
    exif[0x0112] = 6
    path = save(tmp_path / "src" / "rotated.jpg", Image.fromarray(arr), exif=exif.tobytes())
    result = convert(path.parent, tmp_path)
    data = read_all(Path(result.path))
    assert data["image"].shape == (1, 3, 400, 300)  # displayed 300 wide, 400 high
    assert data["orig_size"].tolist() == [[400, 300]]
    with Image.open(path) as im:
        decoded = np.asarray(im.convert("RGB"))
    # Orientation 6 means "rotate 90 degrees clockwise to display".
    np.testing.assert_array_equal(data["image"][0], np.rot90(decoded, k=-1).transpose(2, 0, 1))


# -- row 20: decompression bombs ---------------------------------------------------------------


def test_header_claiming_30000_squared_is_refused_without_decoding(tmp_path: Path) -> None:
    src = tmp_path / "src"
    save(src / "ok.png", Image.fromarray(rgb()))
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
    bomb += png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b"")
    (src / "bomb.png").write_bytes(bomb)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SourceError, match=r"bomb\.png: decompression bomb"):
        convert(src, tmp_path)
    result = convert(src, tmp_path, on_error="skip")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 256, f"peak memory grew by {grown_mib:.0f} MiB"  # decoded: 2.5 GiB
    assert [s.path for s in result.skipped] == ["bomb.png"] and result.num_samples == 1


def test_bomb_warning_is_an_error_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(tmp_path / "src" / "big.png", Image.fromarray(rgb((16, 20))))
    # 320 pixels: above the limit (warning range), below twice the limit (Pillow's error).
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 200)
    with pytest.raises(SourceError, match=r"big\.png: decompression bomb"):
        convert(tmp_path / "src", tmp_path)


# -- row 21: degenerate folders -----------------------------------------------------------------


def test_empty_root_and_empty_class_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no images found"):
        convert(tmp_path / "empty", tmp_path)
    save(tmp_path / "src" / "a" / "1.png", Image.fromarray(rgb()))
    (tmp_path / "src" / "b").mkdir()
    (tmp_path / "src" / "b" / "notes.txt").write_text("x")
    with pytest.raises(SourceError, match=r"class 'b' holds no usable images"):
        convert(tmp_path / "src", tmp_path)
    with pytest.raises(SourceError, match="expected a directory"):
        convert(tmp_path / "missing", tmp_path)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_links_loops_and_unicode_names(tmp_path: Path) -> None:
    src = tmp_path / "src"
    save(src / "çà et là" / "photo 1.png", Image.fromarray(rgb(seed=1)))
    save(src / "日本" / "sub" / "画像.png", Image.fromarray(rgb(seed=2)))
    os.symlink(src, src / "日本" / "sub" / "loop")  # back to the root: must not be walked forever
    os.symlink(src / "nowhere.png", src / "日本" / "broken.png")
    with pytest.raises(SourceError, match=r"broken\.png: broken symbolic link"):
        convert(src, tmp_path)
    result = convert(src, tmp_path, on_error="skip")
    assert [(s.path, s.reason.split(" (")[0]) for s in result.skipped] == [
        ("日本/broken.png", "broken symbolic link")
    ]
    data = read_all(Path(result.path))
    assert source_paths(data["path"]) == ["çà et là/photo 1.png", "日本/sub/画像.png"]
    assert data["label"].tolist() == [0, 1]
    assert ChunkDataset(result.path).class_names == ("çà et là", "日本")
    np.testing.assert_array_equal(data["image"][1], rgb(seed=2).transpose(2, 0, 1))
