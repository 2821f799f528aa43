"""The ``yuv420`` encoding (:mod:`chunkio.images.yuv`): its colour conversion against its
references, crops against whole decodes, the C conversion against numpy's, bad bytes, and a
loader reading crops of a converted folder.

References: libjpeg-turbo's decode of a 4:2:0 JPEG with the same planes (bit-exact: planes
constant over each 8x8 block survive a q100 JPEG exactly), and the JFIF / BT.601 full-range
formulas in floating point (within 1.39: libjpeg rounds the upsampled chroma first).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import chunkio
from chunkio.backends.codec_table import lz4_block
from chunkio.errors import CorruptChunkError
from chunkio.images import yuv
from chunkio.images.decoders import image_decoder
from chunkio.images.encoding import decoded_shape, encode_image
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, Resize


def photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([x * 3 + y, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 40, (h, w, 3))).clip(0, 255).astype(np.uint8)


def from_planes(planes: tuple[np.ndarray, ...], band: int = yuv.BAND) -> bytes:
    """``yuv420`` bytes of given Y, Cb, Cr planes (the layout the module docstring gives)."""
    h, w = planes[0].shape
    bands = []
    for i in range(-(-h // band)):
        a, b = i * band, min(h, (i + 1) * band)
        rows = [planes[0][a:b]] + [p[a // 2 : (b + 1) // 2] for p in planes[1:]]
        bands.append(lz4_block(np.concatenate([r.ravel() for r in rows])))
    offsets = np.cumsum([0, *map(len, bands)]).astype("<u4")
    head = yuv._HEAD.pack(yuv.MAGIC, h, w, len(planes), 1, band)
    return head + offsets.tobytes() + b"".join(bands)


def block_planes(h: int, w: int, seed: int) -> tuple[np.ndarray, ...]:
    """Random planes constant over each 8x8 block (of the plane): a q100 JPEG keeps them."""
    rng = np.random.default_rng(seed)

    def plane(ph: int, pw: int) -> np.ndarray:
        b = rng.integers(0, 256, (-(-ph // 8), -(-pw // 8)), dtype=np.uint8)
        return np.ascontiguousarray(np.repeat(np.repeat(b, 8, 0), 8, 1)[:ph, :pw])

    return plane(h, w), plane(h // 2, w // 2), plane(h // 2, w // 2)


@pytest.mark.parametrize("size", [(16, 16), (64, 64), (48, 80), (144, 96), (32, 208)])
def test_equals_libjpeg_turbo_decoding_the_same_planes(size: tuple[int, int]) -> None:
    """Whole 4:2:0 MCUs (16x16): the JPEG's decoded planes are exactly the ones stored."""
    h, w = size
    for seed in range(3):
        planes = block_planes(h, w, seed)
        reference = simplejpeg.decode_jpeg(
            simplejpeg.encode_jpeg_yuv_planes(*planes, quality=100), colorspace="RGB"
        )
        data = from_planes(planes, band=16)
        np.testing.assert_array_equal(
            yuv.decode_box(data, np.empty((h, w, 3), np.uint8)), reference
        )
        box = np.empty((h // 2, w // 3, 3), np.uint8)
        yuv.decode_box(data, box, top=h // 4, left=w // 5)
        np.testing.assert_array_equal(
            box, reference[h // 4 : h // 4 + h // 2, w // 5 :][:, : w // 3]
        )


def float_reference(planes: tuple[np.ndarray, ...]) -> np.ndarray:
    """JFIF YCbCr -> RGB in float64, chroma upsampled by the same triangle filter."""
    luma, cb, cr = (p.astype(np.float64) for p in planes)
    h, w = luma.shape

    def up(c: np.ndarray) -> np.ndarray:
        ys = np.arange(h)
        far = np.clip(np.where(ys % 2, ys // 2 + 1, ys // 2 - 1), 0, c.shape[0] - 1)
        rows = 0.75 * c[ys // 2] + 0.25 * c[far]
        xs = np.arange(w)
        other = np.clip(np.where(xs % 2, xs // 2 + 1, xs // 2 - 1), 0, c.shape[1] - 1)
        return 0.75 * rows[:, xs // 2] + 0.25 * rows[:, other]

    u, v = up(cb) - 128, up(cr) - 128
    rgb = np.stack([luma + 1.402 * v, luma - 0.344136 * u - 0.714136 * v, luma + 1.772 * u], -1)
    return np.clip(rgb, 0, 255)


@st.composite
def boxes(draw: st.DrawFn) -> tuple[int, int, int, int, int, int, int]:
    h, w = draw(st.integers(1, 90)), draw(st.integers(1, 90))
    top, left = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
    oh, ow = draw(st.integers(1, h - top)), draw(st.integers(1, w - left))
    return h, w, top, left, oh, ow, draw(st.sampled_from([2, 4, 6, 64]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxes(), st.integers(0, 2**16))
def test_crops_equal_the_whole_decode_cut_and_the_float_formulas(
    case: tuple[int, ...], seed: int
) -> None:
    h, w, top, left, oh, ow, band = case
    rng = np.random.default_rng(seed)
    cw, ch = -(-w // 2), -(-h // 2)
    planes = tuple(rng.integers(0, 256, s, dtype=np.uint8) for s in [(h, w), (ch, cw), (ch, cw)])
    data = from_planes(planes, band)
    whole = yuv.decode_box(data, np.empty((h, w, 3), np.uint8))
    # libjpeg rounds the upsampled chroma to 8 bits (0.5 x 1.772 at most), then the pixel (0.5)
    assert np.abs(whole.astype(np.float64) - float_reference(planes)).max() <= 1.39
    crop = yuv.decode_box(data, np.empty((oh, ow, 3), np.uint8), top=top, left=left)
    np.testing.assert_array_equal(crop, whole[top : top + oh, left : left + ow])
    # the numpy fallback (a strided out goes to it) computes the same integers
    strided = np.empty((oh, 2 * ow, 3), np.uint8)[:, ::2]
    np.testing.assert_array_equal(yuv.decode_box(data, strided, top=top, left=left), crop)


def test_round_trip_gray_exact_and_colour_close() -> None:
    rgb = photo(333, 500, 0)
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    for image in (gray, gray[:, :, None]):
        data = encode_image(image, "yuv420")
        assert decoded_shape(data, "yuv420") == (333, 500)
        np.testing.assert_array_equal(image_decoder("yuv420").decode(data), gray)
    data = encode_image(rgb, "yuv420")
    assert decoded_shape(data, "yuv420") == (333, 500, 3)
    assert len(data) < rgb.nbytes  # 1.5 bytes per pixel before LZ4
    back = image_decoder("yuv420").decode(data).astype(np.float64)
    jpeg = image_decoder("jpeg").decode(encode_image(rgb, "jpeg", 90)).astype(np.float64)
    # the chroma subsampling's loss only: less than JPEG q90's (4:2:0 too, and quantised)
    assert np.mean((back - rgb) ** 2) < np.mean((jpeg - rgb) ** 2)
    box = np.empty((100, 7, 3), np.uint8)
    yuv.decode_box(data, box, top=233, left=493)  # the bottom-right corner
    np.testing.assert_array_equal(box, back[233:, 493:].astype(np.uint8))


def test_bad_input_is_a_typed_error() -> None:
    data = encode_image(photo(100, 80, 1), "yuv420")
    out = np.empty((100, 80, 3), np.uint8)
    with pytest.raises(CorruptChunkError, match="magic"):
        yuv.decode_box(b"JUNK" + data[4:], out)
    with pytest.raises(CorruptChunkError, match="truncated"):
        yuv.decode_box(data[:-10], out)
    with pytest.raises(CorruptChunkError, match="shorter than its header"):
        yuv.decode_box(data[:5], out)
    with pytest.raises(CorruptChunkError, match="stored shape"):
        yuv.decode_box(data, out, size=(80, 100))
    with pytest.raises(ValueError, match="channel"):
        yuv.decode_box(data, np.empty((100, 80), np.uint8))
    with pytest.raises(ValueError, match="not inside"):
        yuv.decode_box(data, np.empty((10, 10, 3), np.uint8), top=95)
    with pytest.raises(ValueError, match="RGB"):
        encode_image(np.zeros((4, 4, 4), np.uint8), "yuv420")
    with pytest.raises(ValueError, match="uint8"):
        encode_image(np.zeros((4, 4, 3), np.uint16), "yuv420")


def test_mutated_bytes_raise_or_decode_never_crash() -> None:
    """In a subprocess: a crash in compiled code fails the test, not the run."""
    code = (
        "import numpy as np\n"
        "from chunkio.errors import CorruptChunkError\n"
        "from chunkio.images import yuv\n"
        "rng = np.random.default_rng(0)\n"
        "img = rng.integers(0, 256, (70, 90, 3), dtype=np.uint8)\n"
        "good = bytearray(yuv.encode(img, band=8))\n"
    )
    _fuzz(code, "yuv.decode_box(bytes(data), np.empty((30, 40, 3), np.uint8), top=20, left=30)")


# -- converted and read ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def yuv_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("yuv")
    out = {}
    for mode in ("RGB", "L"):
        src = root / f"src-{mode}"
        for i in range(16):
            h, w = [(333, 500), (500, 375), (57, 61), (1, 1)][i % 4]
            im = Image.fromarray(photo(h, w, i))
            (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
            (im if mode == "RGB" else im.convert("L")).save(src / f"c{i % 2}/{i}.png")
        dst = root / f"{mode}.zarr"
        chunkio.convert_images(
            src,
            dst,
            images=chunkio.ImageOptions(encoding="yuv420", mode=mode),  # type: ignore[arg-type]
            execution=chunkio.Execution(workers=1, progress=False),
        )
        out[mode] = dst
    return out


def _batches(path: Path, transform: Compose) -> list[torch.Tensor]:
    with chunkio.make_loader(
        str(path), batch_size=4, num_workers=0, fields=("image",), transform=transform, seed=5
    ) as loader:
        return [b[0].clone() for b in loader]


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize(
    "ops",
    [
        [RandomResizedCrop(224), RandomHorizontalFlip()],
        [RandomResizedCrop(32, scale=(0.01, 0.1))],
        [Resize((64, 64), interpolation="nearest")],
    ],
)
def test_loader_crops_equal_whole_decodes_then_the_transform(
    yuv_datasets: dict[str, Path], monkeypatch: pytest.MonkeyPatch, mode: str, ops: list[object]
) -> None:
    transform = Compose(ops)  # type: ignore[arg-type]
    crops = _batches(yuv_datasets[mode], transform)
    monkeypatch.setattr(Compose, "crop_box", None)  # the reader then decodes whole images
    whole = _batches(yuv_datasets[mode], transform)
    assert len(crops) == len(whole) == 4
    for a, b in zip(crops, whole, strict=True):
        assert torch.equal(a, b)
    assert crops[0].shape[1] == (3 if mode == "RGB" else 1)


def test_loader_without_transform_gives_the_decoded_images(yuv_datasets: dict[str, Path]) -> None:
    ds = chunkio.ChunkDataset(str(yuv_datasets["RGB"]), fields=("image",))
    sample = ds[0][0] if isinstance(ds[0], tuple) else ds[0]
    image = np.asarray(sample)
    assert image.shape[0] == 3 and image.dtype == np.uint8


def test_without_the_c_conversion_numpy_gives_the_same_pixels(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['chunkio.images._yuv'] = None\n"
        "import numpy as np\n"
        "from chunkio.images import yuv\n"
        "assert not yuv.COMPILED\n"
        "img = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)\n"
        "out = yuv.decode_box(yuv.encode(img), np.empty((20, 30, 3), np.uint8), top=9, left=11)\n"
        f"np.save({str(tmp_path / 'numpy.npy')!r}, out)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    img = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    expected = yuv.decode_box(yuv.encode(img), np.empty((20, 30, 3), np.uint8), top=9, left=11)
    np.testing.assert_array_equal(np.load(tmp_path / "numpy.npy"), expected)


# -- the loader's way: RGBX crops, the extension's own LZ4, the copy into the batch row ------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxes(), st.integers(0, 2**16))
def test_rgbx_crops_equal_rgb_crops(case: tuple[int, ...], seed: int) -> None:
    h, w, top, left, oh, ow, band = case
    rng = np.random.default_rng(seed)
    cw, ch = -(-w // 2), -(-h // 2)
    planes = tuple(rng.integers(0, 256, s, dtype=np.uint8) for s in [(h, w), (ch, cw), (ch, cw)])
    data = from_planes(planes, band)
    rgb = yuv.decode_box(data, np.empty((oh, ow, 3), np.uint8), top=top, left=left)
    rgbx = yuv.decode_box_rgbx(
        data, np.empty((oh, ow, 4), np.uint8), top=top, left=left, size=(h, w)
    )
    np.testing.assert_array_equal(rgbx[..., :3], rgb)
    assert (rgbx[..., 3] == 255).all()


def test_the_extensions_own_lz4_decodes_the_same_and_never_crashes() -> None:
    """lz4's LZ4_decompress_safe (numcodecs') when found, else the extension's own decoder:
    the same pixels, and mutated bytes raise (in a subprocess: a crash fails the test)."""
    if not yuv.COMPILED:
        pytest.skip("the yuv420 extension is not built")
    # numcodecs exports it: the fast way is the one the tests above check
    assert yuv.lz4_decompress_address() != 0
    code = (
        "import numpy as np\n"
        "from chunkio.errors import CorruptChunkError\n"
        "from chunkio.images import yuv\n"
        "rng = np.random.default_rng(0)\n"
        "y, x = np.mgrid[:150, :170]\n"
        "img = (np.stack([x, y, x + y], -1) + rng.integers(0, 9, (150, 170, 3))).astype(np.uint8)\n"
        "good = yuv.encode(img, band=16)\n"
        "out = np.empty((100, 120, 4), np.uint8)\n"
        "args = dict(top=30, left=41, size=(150, 170))\n"
        "fast = yuv.decode_box_rgbx(good, out, **args).copy()\n"
        "yuv._yuv.set_lz4(0)\n"
        "assert np.array_equal(yuv.decode_box_rgbx(good, out, **args), fast)\n"
    )
    _fuzz(code, "yuv.decode_box_rgbx(bytes(data), out, **args)")


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("width", [1, 2, 5, 6, 7, 224])
def test_rgbx_into_channels_first_and_channels_last_rows(flip: bool, width: int) -> None:
    pixels = np.random.default_rng(width).integers(0, 256, (3, width, 4), dtype=np.uint8)
    expected = (pixels[:, ::-1] if flip else pixels)[..., :3].transpose(2, 0, 1)
    planar = np.zeros((2, 3, 3, width), np.uint8)
    assert yuv.rgbx_into(pixels, planar[1], flip)
    np.testing.assert_array_equal(planar[1], expected)
    assert not planar[0].any()
    last = np.zeros((2, 3, width, 3), np.uint8)  # a channels-last batch, rows seen as (C, H, W)
    assert yuv.rgbx_into(pixels, last[1].transpose(2, 0, 1), flip)
    np.testing.assert_array_equal(last[1].transpose(2, 0, 1), expected)
    assert not last[0].any()
    assert not yuv.rgbx_into(pixels, np.zeros((3, 6, width), np.uint8)[:, ::2], flip)


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_resizing_rgbx_gives_the_rgb_resize(interpolation: str) -> None:
    """torch resizes each channel on its own: RGBX's first three equal the RGB resize."""
    rng = np.random.default_rng(0)
    transform = Compose([RandomResizedCrop(37, interpolation=interpolation)])  # type: ignore[arg-type]
    for k in range(60):
        h, w = (int(v) for v in rng.integers(1, 120, 2))
        plan = transform.plan((0, 0, k), h, w)
        left, top, right, bottom = transform.crop_box(plan, h, w)
        crop = rng.integers(0, 256, (bottom - top, right - left, 3), dtype=np.uint8)
        rgb = np.empty((37, 37, 3), np.uint8)
        transform.render_crop(crop, plan, rgb)
        rgbx = np.concatenate([crop, np.full((*crop.shape[:2], 1), 255, np.uint8)], axis=2)
        np.testing.assert_array_equal(transform.resize_crop(rgbx, plan)[..., :3], rgb)


def test_read_batch_rows_channels_first_equal_the_whole_path(
    yuv_datasets: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``out`` a batch is channels-first in memory: the RGBX crops are packed into
    planes (the loader's batches are channels-last, checked above)."""
    transform = Compose([RandomResizedCrop(48), RandomHorizontalFlip()])
    path = str(yuv_datasets["RGB"])
    crops = chunkio.ChunkDataset(path, fields=("image",), transform=transform).read_batch(
        np.arange(16), epoch=3
    )["image"]
    assert crops.flags.c_contiguous and crops.shape == (16, 3, 48, 48)
    monkeypatch.setattr(Compose, "crop_box", None)  # the reader then decodes whole images
    whole = chunkio.ChunkDataset(path, fields=("image",), transform=transform).read_batch(
        np.arange(16), epoch=3
    )["image"]
    np.testing.assert_array_equal(crops, whole)


def _fuzz(setup: str, decode: str) -> None:
    """In a fresh process (a crash fails the test, not pytest): after ``setup`` (which defines
    ``good`` bytes and ``rng``), 3,000 copies of ``good`` with 1-3 bytes changed (every 7th
    also cut short) go through ``decode``; each decodes or raises ``CorruptChunkError``."""
    code = setup + (
        "for k in range(3000):\n"
        "    data = bytearray(good)\n"
        "    for _ in range(int(rng.integers(1, 4))):\n"
        "        data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))\n"
        "    if k % 7 == 0:\n"
        "        data = data[: int(rng.integers(0, len(data)))]\n"
        "    try:\n"
        f"        {decode}\n"
        "    except CorruptChunkError:\n"
        "        pass\n"
        "print('examples', k + 1)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "examples 3000" in run.stdout
