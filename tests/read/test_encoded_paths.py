"""An encoded JPEG field's decode paths agree with each other, and its prefetch fetches ahead.

The crop-region decode (libjpeg-turbo decoding only the crop's iMCU rows and columns) must give
exactly the pixels of the whole-image path (``chunkio.read.encoded``'s docstring promises it),
and must be the path taken when it can be; grey images reach a transform as ``(H, W)``; and a
remote encoded field's prefetch fetches the bytes chunks a later read needs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from benchmarks.data import make_jpeg_folder
from chunkio import ChunkDataset, Execution, ImageOptions, Output, convert_images
from chunkio.images import jpeg
from chunkio.testing.servers import (  # noqa: F401 (pytest fixtures)
    http_server_factory_fixture,
    latency_proxy_factory_fixture,
)
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop


def _convert(src: Path, dst: Path, mode: Any = "RGB", **output: Any) -> Path:
    convert_images(
        src,
        dst,
        shuffle=False,
        images=ImageOptions(encoding="jpeg", mode=mode),
        output=Output(**output),
        execution=Execution(progress=False, workers=1),
    )
    return dst


SIZES = [(120, 120), (121, 97), (97, 133), (64, 75), (3, 40), (40, 3)]


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Photo crops of even, odd and tiny sizes (a 3-pixel side has no exact DCT scale)."""
    root = tmp_path_factory.mktemp("region")
    src = make_jpeg_folder(root / "src", n_images=12, size=140, n_classes=2, seed=4)
    files = sorted(src.rglob("*.jpg"))
    for i, f in enumerate(files):
        h, w = SIZES[i % len(SIZES)]
        with Image.open(f) as im:
            im.convert("RGB").crop((0, 0, w, h)).save(f, quality=90)
    return _convert(src, root / "p.zarr", mode="RGB")


@pytest.mark.skipif(not jpeg.REGION_DECODE, reason="the crop-region extension is not built")
@pytest.mark.parametrize(
    "transform",
    [
        Compose([RandomResizedCrop(24, scale=(0.1, 0.6)), RandomHorizontalFlip()], seed=2),
        Compose([RandomResizedCrop(56, scale=(0.3, 1.0))], seed=5),  # some crops not shrunk 2x
        Compose([RandomResizedCrop(112, scale=(0.1, 0.3))], seed=3),  # crops enlarged
        Compose([RandomResizedCrop(40, scale=(0.5, 1.0)), RandomHorizontalFlip()], seed=1),
    ],
)
def test_region_decodes_equal_whole_image_decodes(
    photos: Path, transform: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = list(range(12))
    whole_ds = ChunkDataset(photos, fields="image", transform=transform)
    whole_field = whole_ds._handle().field("image")
    whole_field.region_decode = False  # type: ignore[attr-defined]
    want = whole_ds.read_batch(idx, epoch=3)["image"]
    calls: list[int] = []
    real = jpeg.decode_region

    def counted(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(jpeg, "decode_region", counted)
    ds = ChunkDataset(photos, fields="image", transform=transform)
    decoder = ds._handle().field("image").decoder  # type: ignore[attr-defined]
    whole: list[int] = []
    for name in ("decode_into", "decode_scaled"):
        real_whole = getattr(decoder, name)
        monkeypatch.setattr(
            decoder, name, lambda *a, _f=real_whole, **kw: whole.append(1) or _f(*a, **kw)
        )
    got = ds.read_batch(idx, epoch=3)
    np.testing.assert_array_equal(got["image"], want)
    shapes = ds._handle().field("image").shapes.tolist()  # type: ignore[attr-defined]
    tiny = sum(1 for c, h, w in shapes if min(h, w) <= 3)
    # every crop of a photo went through the region decode alone; tiny ones decode whole
    assert len(calls) >= len(idx) - tiny and len(whole) <= tiny


def test_png_crops_never_try_the_jpeg_region_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_jpeg_folder(tmp_path / "src", n_images=4, size=48, n_classes=1, seed=0)
    for f in sorted(src.rglob("*.jpg")):
        with Image.open(f) as im:
            im.save(f.with_suffix(".png"))
        f.unlink()
    convert_images(
        src,
        tmp_path / "png.zarr",
        shuffle=False,
        images=ImageOptions(encoding="png"),
        execution=Execution(progress=False, workers=1),
    )
    calls: list[int] = []
    monkeypatch.setattr(jpeg, "decode_region", lambda *a, **kw: calls.append(1))
    t = Compose([RandomResizedCrop(16, scale=(0.2, 0.5))], seed=1)
    got = ChunkDataset(tmp_path / "png.zarr", fields="image", transform=t).read_batch([0, 3])
    assert got["image"].shape == (2, 3, 16, 16) and calls == []


def test_a_corrupt_jpeg_fails_typed_on_the_region_path_too(photos: Path, tmp_path: Path) -> None:
    import shutil

    import zarr

    from chunkio.errors import CorruptChunkError

    dst = tmp_path / "bad.zarr"
    shutil.copytree(photos, dst)
    a, b = (int(v) for v in zarr.open_array(str(dst / "image__spans"), mode="r")[0])
    data = zarr.open_array(str(dst / "image__bytes"), mode="r+")
    data[a + 200 : b] = 7  # valid checksums, garbage scan data
    t = Compose([RandomResizedCrop(24, scale=(0.2, 0.5))], seed=1)
    with pytest.raises(CorruptChunkError, match=r"field 'image', sample 0"):
        ChunkDataset(dst, fields="image", transform=t).read_batch([0])


def test_the_bytes_cache_keeps_one_chunk_by_default(tmp_path: Path) -> None:
    src = make_jpeg_folder(tmp_path / "src", n_images=40, size=32, n_classes=2, seed=1)
    dst = _convert(src, tmp_path / "j.zarr", chunk_bytes=4096)
    ds = ChunkDataset(dst, fields="image", preload_bytes=0, cache_bytes=0)
    core = ds._handle()
    field = core.field("image")
    last = field.grid.num_chunks - 1  # type: ignore[attr-defined]
    first_of_last = int(np.searchsorted(field.spans[:, 0], last * field.chunk_len))  # type: ignore[attr-defined]
    for i in (0, 39, 0):  # chunk 0, the last chunk, chunk 0 again
        ds.read_batch([i])
    assert first_of_last > 0 and core.stats.chunks_read == 3


class ShapeRecorder:
    """A (non-Compose) field transform: copies a centre patch and records the input shape."""

    field = "image"
    seed = 0

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (4, 4) if len(input_shape) == 2 else (4, 4, input_shape[2])

    def apply(self, image: np.ndarray, out: np.ndarray, key: Any) -> None:
        self.shapes.append(image.shape)
        out[...] = image[:4, :4]


def test_a_grey_image_reaches_a_transform_as_height_by_width(tmp_path: Path) -> None:
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 255, (16 + i, 20), dtype=np.uint8) for i in range(3)]
    for i, px in enumerate(pixels):
        Image.fromarray(px, mode="L").save(src / f"{i}.jpg", quality=95)
    dst = _convert(tmp_path / "src", tmp_path / "g.zarr", mode="L")
    t = ShapeRecorder()
    got = ChunkDataset(dst, fields="image", transform=t).read_batch([0, 1, 2])["image"]
    plain = ChunkDataset(dst, fields="image").read_batch([0, 1, 2])["image"]
    assert sorted(t.shapes) == [(16, 20), (17, 20), (18, 20)]
    for row, whole in zip(got, plain, strict=True):
        np.testing.assert_array_equal(np.squeeze(row), whole[0, :4, :4])


@pytest.mark.timeout(60)
def test_a_remote_encoded_field_prefetches_the_bytes_chunks_a_read_needs(
    tmp_path: Path, http_server_factory: Any, latency_proxy_factory: Any
) -> None:
    src = make_jpeg_folder(tmp_path / "src", n_images=40, size=32, n_classes=2, seed=1)
    dst = _convert(src, tmp_path / "site" / "j.zarr", chunk_bytes=4096)
    local = ChunkDataset(dst, fields="image")
    field = local._handle().field("image")
    assert field.grid.num_chunks >= 4  # type: ignore[attr-defined]
    server = http_server_factory(tmp_path / "site")
    proxy = latency_proxy_factory(server.url, 0.0)
    ds = ChunkDataset(f"{proxy.url}/j.zarr", fields="image", preload_bytes=0)
    ds.read_batch([0])  # opened, and its first bytes chunk held
    ahead = [39, 20]
    before = proxy.requests
    ds.prefetch(ahead)  # returns at once; the chunks arrive in the background
    deadline = time.monotonic() + 20  # a bound on the wait, not a speed claim
    while proxy.requests == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.requests > before, "nothing fetched ahead"
    fetched = proxy.requests
    np.testing.assert_array_equal(ds.read_batch(ahead)["image"], local.read_batch(ahead)["image"])
    assert proxy.requests == fetched  # the read used the prefetched bytes
