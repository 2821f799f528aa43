"""Partial JPEG decode (:func:`chunkio.images.jpeg.decode_region`) equals a full decode cut to
the same box, bit for bit, and a loader reading JPEG crops gives the same batches with and
without it.

Covered: random boxes (Hypothesis) on random sizes, 4:2:0 / 4:2:2 / 4:4:4 / gray files,
baseline, progressive and restart-marker coding, every DCT scale, boxes touching each edge,
1x1 images; CMYK, truncated and corrupt files raise as the full decode does. Fuzzing the
extension with mutated bytes runs in a subprocess (``_fuzz_jpeg_region.py``), so a crash in
compiled code fails the test instead of the test run.

Boxes compared: the default run ~2,900 (150 random, 2,743 at edges and iMCU boundaries: every
cut as a start and an end, a third of the pairs); ``make soak`` over 10,000 (3,500 random,
6,695 edge pairs: every pair), RGB boxes decoded again into RGBX.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import chunkio
from chunkio.images import jpeg
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

pytestmark = pytest.mark.skipif(
    not jpeg.REGION_DECODE, reason="chunkio's libjpeg-turbo extension is not built"
)

#: Pillow's save options per coding kind
CODINGS: dict[str, dict[str, Any]] = {
    "420": {"subsampling": 2},
    "422": {"subsampling": 1},
    "444": {"subsampling": 0},
    "progressive": {"subsampling": 2, "progressive": True},
    "restart": {"subsampling": 2, "restart_marker_blocks": 3},
    "restart-422-rows": {"subsampling": 1, "restart_marker_rows": 1},
    "gray": {},
    "gray-progressive": {"progressive": True},
    # rewritten by jpeg.add_restarts (as conversion stores them): a restart marker at every
    # iMCU row, which decode_region seeks to
    "420-rows": {"subsampling": 2},
    "422-rows": {"subsampling": 1},
    "444-rows": {"subsampling": 0},
    "progressive-rows": {"subsampling": 2, "progressive": True},
    "gray-rows": {},
}


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth colour gradients plus noise: compresses like a photo, not like noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([x * 3 + y, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 40, (h, w, 3))).clip(0, 255).astype(np.uint8)


def encode(h: int, w: int, coding: str, seed: int = 0, quality: int = 90) -> bytes:
    im = Image.fromarray(photo(h, w, seed))
    if coding.startswith("gray"):
        im = im.convert("L")
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality, **CODINGS[coding])
    if coding.endswith("-rows"):
        rewritten = jpeg.add_restarts(buf.getvalue())
        assert rewritten is not None
        return rewritten
    return buf.getvalue()


def denominator(h: int, w: int, d: int) -> int:
    """The scale the loader decodes at when it needs ``1 / d`` of ``(h, w)`` (tiny images
    round to the same size at several scales: the smallest decode, as ``scaled_size``)."""
    if d > 1:
        d = jpeg.scaled_size(h, w, -(-h // d), -(-w // d))[0]
    return d


def full(data: bytes, gray: bool, d: int) -> np.ndarray:
    h, w, _ = jpeg.frame_shape(data)
    assert denominator(h, w, d) == d
    scale = (d, -(-h // d), -(-w // d)) if d > 1 else None
    pixels = jpeg.decode(data, gray=gray, scale=scale)
    return pixels[:, :, None] if gray else pixels


def region(
    data: bytes, gray: bool, d: int, box: tuple[int, int, int, int], *, rgbx: bool = False
) -> np.ndarray:
    """The box decoded by region; ``rgbx``: into 4 channels (the loader's resize input), of
    which the first three are returned once the fourth is checked to be 255."""
    left, top, right, bottom = box
    h, w, _ = jpeg.frame_shape(data)
    out = np.empty((bottom - top, right - left, 1 if gray else 4 if rgbx else 3), np.uint8)
    jpeg.decode_region(data, out, size=(h, w), left=left, top=top, denominator=d)
    if rgbx:
        assert (out[..., 3] == 255).all()
        return out[..., :3]
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[bytes, bool, int, tuple[int, int, int, int]]:
    coding = draw(st.sampled_from(sorted(CODINGS)))
    h = draw(st.integers(1, 120))
    w = draw(st.integers(1, 120))
    data = encode(h, w, coding, seed=draw(st.integers(0, 3)))
    gray = coding.startswith("gray") or draw(st.booleans())
    d = denominator(h, w, draw(st.sampled_from(jpeg.JPEG_SCALE_DENOMINATORS)))
    if not jpeg.exact_scale(h, w, d):  # the loader decodes these whole
        d = 1
    sh, sw = -(-h // d), -(-w // d)
    top = draw(st.integers(0, sh - 1))
    left = draw(st.integers(0, sw - 1))
    bottom = draw(st.integers(top + 1, sh))
    right = draw(st.integers(left + 1, sw))
    return data, gray, d, (left, top, right, bottom)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_region_equals_full_decode_cut(case: tuple[bytes, bool, int, tuple[int, ...]]) -> None:
    _assert_region_equals_full_decode_cut(case)


@pytest.mark.slow
@settings(max_examples=3500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_region_equals_full_decode_cut_on_many_boxes(
    case: tuple[bytes, bool, int, tuple[int, ...]],
) -> None:
    _assert_region_equals_full_decode_cut(case)


def _assert_region_equals_full_decode_cut(case: tuple[bytes, bool, int, tuple[int, ...]]) -> None:
    data, gray, d, box = case
    left, top, right, bottom = box
    expected = full(data, gray, d)[top:bottom, left:right]
    np.testing.assert_array_equal(region(data, gray, d, box), expected)  # type: ignore[arg-type]
    if not gray:
        rgbx = region(data, gray, d, box, rgbx=True)  # type: ignore[arg-type]
        np.testing.assert_array_equal(rgbx, expected)


@pytest.mark.parametrize("coding", sorted(CODINGS))
@pytest.mark.parametrize("d", jpeg.JPEG_SCALE_DENOMINATORS)
def test_boxes_at_every_edge_and_imcu_boundary(coding: str, d: int) -> None:
    """Every cut as a start and as an end, in a third of the pairs (the slow sibling: all)."""
    _assert_edge_and_imcu_boxes(coding, d, every_pair=False)


@pytest.mark.slow
@pytest.mark.parametrize("coding", sorted(CODINGS))
@pytest.mark.parametrize("d", jpeg.JPEG_SCALE_DENOMINATORS)
def test_boxes_at_every_pair_of_edge_and_imcu_cuts(coding: str, d: int) -> None:
    _assert_edge_and_imcu_boxes(coding, d, every_pair=True)


def _assert_edge_and_imcu_boxes(coding: str, d: int, *, every_pair: bool) -> None:
    data = encode(333, 500, coding, seed=1)
    gray = coding.startswith("gray")
    whole = full(data, gray, d)
    sh, sw = whole.shape[:2]
    # edges, single pixels, and boxes starting and ending on and next to iMCU boundaries
    cuts = sorted({0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33} & set(range(min(sh, sw))))
    pairs = [
        (a, b)
        for i, a in enumerate(cuts)
        for j, b in enumerate(cuts)
        if a < sh - b and b < sw - a and (every_pair or (i + j) % 3 == 0)
    ]
    boxes = [(0, 0, sw, sh), (sw - 1, sh - 1, sw, sh), (0, sh - 1, sw, sh), (sw - 1, 0, sw, sh)]
    boxes += [(a, b, sw - b, sh - a) for a, b in pairs]
    boxes += [(a, a, a + 1, a + 1) for a in cuts]
    for left, top, right, bottom in boxes:
        box = (left, top, right, bottom)
        got = region(data, gray, d, box)
        np.testing.assert_array_equal(got, whole[top:bottom, left:right], err_msg=str(box))
        if not gray:
            got = region(data, gray, d, box, rgbx=True)
            np.testing.assert_array_equal(got, whole[top:bottom, left:right], err_msg=str(box))


@pytest.mark.parametrize("coding", ["420", "444", "gray", "progressive"])
def test_one_pixel_images(coding: str) -> None:
    data = encode(1, 1, coding)
    for d in (1,):
        gray = coding == "gray"
        np.testing.assert_array_equal(region(data, gray, d, (0, 0, 1, 1)), full(data, gray, d))
        if not gray:
            got = region(data, gray, d, (0, 0, 1, 1), rgbx=True)
            np.testing.assert_array_equal(got, full(data, gray, d))


def test_cmyk_is_left_to_the_full_decode(tmp_path: Path) -> None:
    """The extension leaves CMYK to the whole decode (simplejpeg converts it); a reader then
    decodes it whole."""
    buf = io.BytesIO()
    Image.fromarray(photo(40, 48, 0)).convert("CMYK").save(buf, format="JPEG", quality=90)
    data = buf.getvalue()
    with pytest.raises(NotImplementedError, match="whole-image decode"):
        region(data, False, 1, (3, 5, 30, 20))
    from chunkio.read.encoded import EncodedReads

    field = object.__new__(EncodedReads)
    field._local = threading.local()
    transform = Compose([RandomResizedCrop(16)])
    plan = transform.plan((0, 0, 0), 40, 48)
    out = np.empty((3, 16, 16), np.uint8)
    for rgbx in (True, False):  # an RGBX crop (the loader's), and an RGB one
        args = (plan, (16, 16), transform if rgbx else Compose([RandomResizedCrop(16)]))
        if not rgbx:
            args[2].resize_crop = None  # type: ignore[method-assign]
        assert not field._decode_crop(np.frombuffer(data, np.uint8), (3, 40, 48), *args, out)


@pytest.mark.parametrize("coding", ["420", "progressive", "restart", "gray", "420-rows"])
def test_truncated_files_raise_wherever_the_box_is(coding: str) -> None:
    data = encode(96, 128, coding)
    gray = coding == "gray"
    boxes = [(0, 0, 16, 16), (40, 30, 90, 60), (100, 80, 128, 96)]
    for cut in (len(data) // 3, len(data) // 2, len(data) - 40, len(data) - 1):
        short = data[:cut]
        with pytest.raises(ValueError):
            full(short, gray, 1)
        for box in boxes:
            with pytest.raises(ValueError):
                region(short, gray, 1, box)


@pytest.mark.parametrize("coding", ["420", "444", "progressive", "gray"])
def test_add_restarts_keeps_the_pixels_and_marks_every_imcu_row(coding: str) -> None:
    data = encode(333, 500, coding, seed=2)
    rewritten = jpeg.add_restarts(data)
    assert rewritten is not None
    gray = coding == "gray"
    np.testing.assert_array_equal(full(rewritten, gray, 1), full(data, gray, 1))
    rows = -(-333 // (16 if coding in ("420", "progressive") else 8))
    scan = rewritten[rewritten.index(b"\xff\xda") :]
    assert sum(scan.count(bytes([0xFF, 0xD0 + k])) for k in range(8)) == rows - 1
    with pytest.raises(ValueError):
        jpeg.add_restarts(data[: len(data) // 2])


def test_seeking_skips_the_rows_above_the_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage in the entropy data of the top rows: the full decode (and a region decode from
    the top, the default) fails, a region decode that seeks to the box's rows (opted in)
    never reads it."""
    data = bytearray(encode(333, 500, "420-rows", seed=3))
    start = bytes(data).index(b"\xff\xda")
    start += 2 + int.from_bytes(data[start + 2 : start + 4], "big")
    first_rst = bytes(data).index(b"\xff\xd0", start)
    data[start + 5 : first_rst - 5] = b"\x00" * (first_rst - 10 - start)  # row 0's data
    with pytest.raises(ValueError):
        full(bytes(data), False, 1)
    box = (100, 200, 300, 300)
    good = full(encode(333, 500, "420-rows", seed=3), False, 1)[200:300, 100:300]
    assert not jpeg.SEEK  # off by default: one verdict with the full decode
    monkeypatch.setattr(jpeg, "SEEK", True)
    np.testing.assert_array_equal(region(bytes(data), False, 1, box), good)
    monkeypatch.setattr(jpeg, "SEEK", False)
    with pytest.raises(ValueError):
        region(bytes(data), False, 1, box)


def test_header_size_and_box_are_checked() -> None:
    data = encode(40, 48, "420")
    out = np.empty((10, 10, 3), np.uint8)
    with pytest.raises(ValueError, match="stored shape"):
        jpeg.decode_region(data, out, size=(41, 48), left=0, top=0)
    with pytest.raises(ValueError, match="inside"):
        jpeg.decode_region(data, out, size=(40, 48), left=45, top=0)
    with pytest.raises(ValueError, match="inside"):
        jpeg.decode_region(data, out, size=(40, 48), left=0, top=0, denominator=8)
    with pytest.raises(ValueError, match="denominator"):
        jpeg.decode_region(data, out, size=(40, 48), left=0, top=0, denominator=3)
    with pytest.raises(ValueError, match="contiguous"):
        jpeg.decode_region(
            data, np.empty((10, 20, 3), np.uint8)[:, ::2], size=(40, 48), left=0, top=0
        )
    with pytest.raises(ValueError):
        jpeg.decode_region(b"\xff\xd8\xff\xd9", out, size=(40, 48), left=0, top=0)


def test_threads_decode_regions_in_parallel() -> None:
    """The extension releases the GIL and keeps no shared state."""
    from concurrent.futures import ThreadPoolExecutor

    datas = [encode(64 + k, 80, "420", seed=k) for k in range(8)]
    expected = [full(d, False, 1)[5:50, 7:70] for d in datas]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda d: region(d, False, 1, (7, 5, 70, 50)), datas * 4))
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g, expected[k % len(datas)])


# -- the loader, both ways -------------------------------------------------------------------


@pytest.fixture(scope="module")
def jpeg_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """RGB and gray JPEG fields of mixed sizes (ImageNet-like and small)."""
    root = tmp_path_factory.mktemp("region")
    out = {}
    for mode in ("RGB", "L"):
        src = root / f"src-{mode}"
        for i in range(24):
            h, w = [(333, 500), (500, 375), (57, 61), (240, 320)][i % 4]
            im = Image.fromarray(photo(h, w, i))
            (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
            (im if mode == "RGB" else im.convert("L")).save(src / f"c{i % 3}/{i}.jpg", quality=90)
        dst = root / f"{mode}.zarr"
        chunkio.convert_images(
            src,
            dst,
            images=chunkio.ImageOptions(encoding="jpeg", quality=90),
            execution=chunkio.Execution(workers=1, progress=False),
        )
        out[mode] = dst
    return out


def _batches(path: Path, transform: Compose) -> list[torch.Tensor]:
    with chunkio.make_loader(
        str(path), batch_size=6, num_workers=0, fields=("image",), transform=transform, seed=3
    ) as loader:
        return [b[0].clone() for b in loader]


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize(
    "ops",
    [
        [RandomResizedCrop(224), RandomHorizontalFlip()],
        [RandomResizedCrop(48, scale=(0.01, 1.0))],  # small outputs: DCT-scaled crops
        [RandomResizedCrop(96, interpolation="bicubic"), RandomHorizontalFlip()],
        [Resize((64, 64), interpolation="nearest")],
    ],
)
def test_loader_batches_equal_with_and_without_the_extension(
    jpeg_datasets: dict[str, Path], monkeypatch: pytest.MonkeyPatch, mode: str, ops: list[Any]
) -> None:
    transform = Compose(ops)
    with_region = _batches(jpeg_datasets[mode], transform)  # RGBX crops
    monkeypatch.setattr(jpeg, "REGION_RGBX", False)  # RGB crops (a libjpeg without RGBX)
    rgb_crops = _batches(jpeg_datasets[mode], transform)
    monkeypatch.setattr(jpeg, "REGION_DECODE", False)  # the fallback: whole-image decode
    without = _batches(jpeg_datasets[mode], transform)
    assert len(with_region) == len(rgb_crops) == len(without) > 0
    for a, b, c in zip(with_region, rgb_crops, without, strict=True):
        assert torch.equal(a, c) and torch.equal(b, c)


@pytest.mark.parametrize("damage", ["truncated", "bad huffman table", "no scan"])
def test_data_the_extension_refuses_goes_to_the_whole_image_path(damage: str) -> None:
    """The reader then raises that path's typed error (or decodes what it decodes)."""
    from chunkio.read.encoded import EncodedReads

    data = bytearray(encode(333, 500, "420"))
    if damage == "truncated":
        del data[-3000:]
    elif damage == "bad huffman table":
        at = bytes(data).index(b"\xff\xc4") + 5
        data[at : at + 16] = b"\xff" * 16
    else:
        data = data[: bytes(data).index(b"\xff\xda")] + b"\xff\xd9"
    field = object.__new__(EncodedReads)
    field._local = threading.local()
    transform = Compose([RandomResizedCrop(32, scale=(0.01, 0.02))])
    plan = transform.plan((0, 0, 0), 333, 500)
    args = (plan, (32, 32), transform)
    out = np.empty((3, 32, 32), np.uint8)
    assert not field._decode_crop(np.frombuffer(bytes(data), np.uint8), (3, 333, 500), *args, out)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "examples",
    [800, pytest.param(10_000, marks=pytest.mark.slow)],  # make soak: the long run
)
def test_fuzzed_bytes_never_crash_and_agree_with_the_full_decode(examples: int) -> None:
    script = Path(__file__).with_name("_fuzz_jpeg_region.py")
    run = subprocess.run(
        [sys.executable, str(script), str(examples)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, (
        f"fuzz run ended with {run.returncode} (negative: killed by a signal)\n"
        f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    assert "examples" in run.stdout


def test_without_the_extension_reads_decode_whole_images(tmp_path: Path) -> None:
    """A build without libjpeg-turbo's headers has no ``_jpegcrop``: chunkio still imports,
    says so, and loads JPEG crops from whole images (the same batches, tested above)."""
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(photo(60, 80, i)).save(src / f"{i}.jpg", quality=90)
    code = (
        "import sys; sys.modules['chunkio.images._jpegcrop'] = None\n"
        "import chunkio\n"
        "from chunkio.images import jpeg\n"
        "from chunkio.transforms import Compose, RandomResizedCrop\n"
        "assert not jpeg.REGION_DECODE\n"
        f"chunkio.convert_images({str(tmp_path / 'src')!r}, {str(tmp_path / 'd.zarr')!r}, "
        "images=chunkio.ImageOptions(encoding='jpeg'), "
        "execution=chunkio.Execution(progress=False, workers=1))\n"
        f"loader = chunkio.make_loader({str(tmp_path / 'd.zarr')!r}, 3, num_workers=0, "
        "fields=('image',), transform=Compose([RandomResizedCrop(32)]))\n"
        "with loader:\n"
        "    shapes = [tuple(b[0].shape) for b in loader]\n"
        "assert shapes == [(3, 3, 32, 32)], shapes\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


@pytest.mark.parametrize("region_decode", [True, False])
def test_gray_fields_read_through_a_crop_transform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, region_decode: bool
) -> None:
    """A one-channel JPEG field with a crop transform: by region and whole, each sample is
    Pillow's decode of its bytes taken through the same transform (the crop and resize of
    a 2-D image, as the row is). Crops under twice the output's side: no DCT scaling."""
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(5):
        Image.fromarray(photo(60 + 7 * i, 80 - 5 * i, i)).convert("L").save(src / f"{i}.jpg")
    chunkio.convert_images(
        tmp_path / "src",
        tmp_path / "d.zarr",
        images=chunkio.ImageOptions(encoding="jpeg", mode="L"),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    monkeypatch.setattr(jpeg, "REGION_DECODE", region_decode)
    transform = Compose([RandomResizedCrop(24, scale=(0.05, 0.2)), RandomHorizontalFlip()], seed=5)
    dataset = chunkio.ChunkDataset(str(tmp_path / "d.zarr"), fields="image", transform=transform)
    indices = list(range(5))
    got = list(dataset.__getitems__(indices))
    data, shapes = dataset.read_encoded(indices, "image")
    assert (shapes[:, 0] == 1).all()
    for i, (sample, encoded) in enumerate(zip(got, data, strict=True)):
        image = np.asarray(Image.open(io.BytesIO(encoded.tobytes())))
        expected = transform(image, (5, 0, i))
        assert tuple(sample.shape) == (1, 24, 24)
        np.testing.assert_array_equal(sample[0].numpy(), expected)
