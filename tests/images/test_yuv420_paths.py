"""Which way a yuv420 crop takes, and that every way gives the same pixels: the RGBX crop (the
extension resizes and mirrors it into the row), its NumPy fallback, the RGB crop through
``render_crop`` (grey images, transforms that do not resize crops alone), the whole decode;
and transforms keyed by the whole dataset's index when files are read as one dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import chunkio
from chunkio.images import yuv
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop

CROPS = [RandomResizedCrop(40, scale=(0.2, 0.6)), RandomHorizontalFlip()]


class NoCropResize(Compose):
    """A crop transform that cannot resize an RGBX crop alone (``resize_crop`` missing)."""

    resize_crop = None  # type: ignore[assignment]


def _photo(h: int, w: int, seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 3 + seed) % 256, (y * 5) % 256, ((x + y) * 2) % 256], axis=-1)
    return np.clip(base + rng.integers(-20, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def _convert(root: Path, name: str, classes: dict[str, int], mode: str) -> Path:
    src = root / f"src-{name}"
    for c, n in classes.items():
        (src / c).mkdir(parents=True)
        for i in range(n):
            im = Image.fromarray(_photo(96 + 8 * i, 120 - 4 * i, i))
            (im if mode == "RGB" else im.convert("L")).save(src / c / f"{i:02d}.png")
    dst = root / f"{name}.zarr"
    chunkio.convert_images(
        src,
        dst,
        shuffle=False,
        images=chunkio.ImageOptions(encoding="yuv420", mode=mode),  # type: ignore[arg-type]
        execution=chunkio.Execution(workers=1, progress=False),
    )
    return dst


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("yuvpaths")
    return {
        "RGB": _convert(root, "rgb", {"a": 8}, "RGB"),
        "L": _convert(root, "grey", {"a": 8}, "L"),
        # the same 8 images twice: "twice" row 8 + k is the image of row k
        "twice": _convert(root, "twice", {"a": 8, "b": 8}, "RGB"),
    }


def _batches(path: Path | list[Path], transform: Any, n: int = 8) -> torch.Tensor:
    """Samples ``0..n-1`` transformed (epoch 3), as one batch."""
    ds = chunkio.ChunkDataset(path, fields=("image",), transform=transform)
    return torch.from_numpy(ds.read_batch(np.arange(n), epoch=3)["image"])


class _Count:
    """Wraps a function of :mod:`chunkio.images.yuv`, counting its calls."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kw)


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, _Count]:
    counts = {name: _Count(getattr(yuv, name)) for name in ("decode_box", "decode_box_rgbx")}
    for name, count in counts.items():
        monkeypatch.setattr(yuv, name, count)
    return counts


@pytest.mark.parametrize(
    ("mode", "transform", "compiled", "way"),
    [
        ("RGB", Compose(CROPS), True, "decode_box_rgbx"),  # the extension's RGBX crop
        ("RGB", Compose(CROPS), False, "decode_box"),  # without the extension: RGB crops
        ("RGB", NoCropResize(CROPS), True, "decode_box"),  # cannot resize RGBX: RGB crops
        ("L", Compose(CROPS), True, "decode_box"),  # grey: one channel, never RGBX
    ],
)
def test_each_crop_takes_its_way_and_every_way_gives_the_whole_decodes_pixels(
    stores: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    transform: Any,
    compiled: bool,
    way: str,
) -> None:
    path = stores[mode]
    with monkeypatch.context() as m:
        m.setattr(Compose, "crop_box", None)  # the reference: whole images, then the transform
        whole = _batches(path, Compose(CROPS))
    monkeypatch.setattr(yuv, "COMPILED", compiled)
    counts = _counted(monkeypatch)
    crops = _batches(path, transform)
    assert torch.equal(crops, whole)
    assert counts[way].calls == 8, {k: c.calls for k, c in counts.items()}
    other = "decode_box" if way == "decode_box_rgbx" else "decode_box_rgbx"
    assert counts[other].calls == 0
    assert crops.shape[1] == (3 if mode == "RGB" else 1)


def test_the_numpy_fallback_of_the_rgbx_copy_gives_the_same_rows(
    stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the extension cannot mirror an RGBX crop into the row (``rgbx_into`` declines),
    NumPy does: same pixels, mirrored or not."""
    compiled = _batches(stores["RGB"], Compose(CROPS))
    declined = _Count(lambda pixels, out, flip: False)
    monkeypatch.setattr(yuv, "rgbx_into", declined)
    fallback = _batches(stores["RGB"], Compose(CROPS))
    assert declined.calls == 8
    assert torch.equal(fallback, compiled)
    flips = [Compose(CROPS).plan((0, 3, k), 96 + 8 * k, 120 - 4 * k).flip for k in range(8)]
    assert any(flips) and not all(flips)  # both ways were taken


def test_files_read_as_one_dataset_key_transforms_by_the_whole_datasets_index(
    stores: dict[str, Path],
) -> None:
    """Sample ``8 + k`` of ``[rgb, rgb]`` is crop-transformed as sample ``8 + k`` of one store
    holding the same images twice, not as sample ``k`` of its file."""
    transform = Compose(CROPS)
    joined = _batches([stores["RGB"], stores["RGB"]], transform, n=16)
    one = _batches(stores["twice"], transform, n=16)
    assert torch.equal(joined, one)
    assert not torch.equal(joined[:8], joined[8:])  # the keys differ, so the crops do
