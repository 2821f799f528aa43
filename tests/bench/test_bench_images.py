"""The real-training-inputs benchmark (benchmarks/bench_images.py) on a tiny set: its rows and
its torchvision replica (no timing assertions)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ is not installed

from benchmarks import bench_images
from benchmarks.baselines import ImageFolderAugmented, TorchvisionRandomResizedCrop, pil_to_tensor
from benchmarks.data import make_imagenet_folder, make_natural_folder

N, BATCH = 96, 16


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench_images")
    return bench_images.run(
        quick=True, workers=1, batch_size=BATCH, root=root, n_images=N, repeats=1, n_imagenet=24
    )


@pytest.mark.timeout(240)
def test_rows_ratios_and_storage(results: dict[str, Any]) -> None:
    assert results["errors"] == {}
    rows = {r["name"]: r for r in results["rows"]}
    assert list(rows) == [
        bench_images.BASELINE,
        "chunkio make_loader (raw)",
        "chunkio make_loader (jpeg)",
    ]
    image = [[BATCH, 3, 224, 224], "torch.uint8"]
    for r in rows.values():
        assert r["workers"] == 1 and r["samples_per_s"] > 0
        assert r["samples_per_s"] == max(r["epoch_rates"]) and len(r["epoch_rates"]) == 1
        assert [list(r["batch"][0][0]), r["batch"][0][1]] == image
        assert [list(r["batch"][1][0]), r["batch"][1][1]] == [[BATCH], "torch.int64"]
    assert rows["chunkio make_loader (raw)"]["route"] == "ring"
    assert rows["chunkio make_loader (jpeg)"]["route"] == "ring"
    assert set(results["ratios"]) == {"chunkio make_loader (raw)", "chunkio make_loader (jpeg)"}
    storage = results["storage"]
    assert storage["source"]["files"] == N
    for key in ("source", "raw", "jpeg"):
        assert storage[key]["bytes"] > 0
        assert storage[key]["bytes_per_image"] == storage[key]["bytes"] / N
    assert storage["raw_over_jpeg"] > 1
    assert [c["target"].split(":")[0] for c in results["checks"]] == [
        "jpeg",
        "raw",
        "storage",
        "imagenet",
        "imagenet",
        "imagenet",
        "imagenet",
    ]
    assert results["decode_limit"] > 0
    prof = results["profile_us_per_sample"]
    for stage in ("read", "decode", "crop_resize", "collate", "ipc_and_overhead"):
        assert stage in prof
    assert prof["chunkio_raw_in_process"] > 0 and prof["chunkio_jpeg_in_process"] > 0
    table = bench_images.format_table(results)
    assert "baseline" in table and "raw / jpeg bytes" in table


@pytest.mark.timeout(240)
def test_imagenet_rows_limit_and_stages(results: dict[str, Any]) -> None:
    res = results["imagenet"]
    names = [r["name"] for r in res["rows"]]
    assert names == [
        bench_images.BASELINE,
        bench_images.JPEG_REGION,
        bench_images.JPEG_WHOLE,
        "chunkio make_loader (yuv420)",
    ]
    for r in res["rows"]:
        assert r["samples_per_s"] > 0
        assert [list(r["batch"][0][0]), r["batch"][0][1]] == [[BATCH, 3, 224, 224], "torch.uint8"]
    assert res["decode_limit"] == max(res["decode_limit_runs"]) > 0
    for way in ("whole", "region", "yuv420"):
        stages = res["stages_us"][way]
        for stage in ("read", "span", "plan", "decode", "resize", "flip + scatter", "python"):
            assert stage in stages
        assert stages["decode"] > 0
    table = bench_images.format_table(results)
    assert "ImageNet sizes" in table and "x decode limit" in table and "transport" in table


def test_imagenet_folder_sizes_and_determinism(tmp_path: Path) -> None:
    a = make_imagenet_folder(tmp_path / "a", n_images=8, n_classes=2, seed=1)
    b = make_imagenet_folder(tmp_path / "b", n_images=8, n_classes=2, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 8
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    for f in files:
        with Image.open(a / f) as im:
            assert max(im.size) == 500 and 333 <= min(im.size) <= 500 and im.mode == "RGB"


@pytest.mark.timeout(120)
def test_cli_without_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--images", "40", "--workers", "0", "--batch-size", "8", "--repeats", "1"]
    args += ["--imagenet-images", "10"]
    bench_images.main(
        [*args, "--root", str(tmp_path), "--no-profile", "--json", str(tmp_path / "out.json")]
    )
    out = capsys.readouterr().out
    assert "chunkio make_loader (jpeg)" in out and "x baseline" in out
    assert (tmp_path / "out.json").stat().st_size > 0


def test_natural_folder_is_deterministic(tmp_path: Path) -> None:
    a = make_natural_folder(tmp_path / "a", n_images=6, n_classes=3, seed=1)
    b = make_natural_folder(tmp_path / "b", n_images=6, n_classes=3, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 6 and {f.parent.name for f in files} == {"class_0", "class_1", "class_2"}
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    with Image.open(a / files[0]) as im:
        assert im.size == (224, 224) and im.mode == "RGB" and im.format == "JPEG"


def test_baseline_sample_shape_dtype_and_flip(tmp_path: Path) -> None:
    root = tmp_path / "folder"
    for k, size in enumerate([(300, 200), (224, 224)]):  # (W, H): one non-square
        (root / f"c{k}").mkdir(parents=True)
        pixels = np.random.default_rng(k).integers(0, 255, (size[1], size[0], 3), np.uint8)
        Image.fromarray(pixels).save(root / f"c{k}" / "x.jpg", quality=90)
    ds = ImageFolderAugmented(root)
    assert len(ds) == 2 and ds.classes == ["c0", "c1"]
    for i in range(2):
        image, label = ds[i]
        assert image.shape == (3, 224, 224) and image.dtype == torch.uint8 and label == i
    # the flip draw is made either way, so equal seeds give the same crop, mirrored
    ds.flip_p = 0.0
    torch.manual_seed(3)
    plain, _ = ds[0]
    ds.flip_p = 1.0
    torch.manual_seed(3)
    mirrored, _ = ds[0]
    assert torch.equal(mirrored, plain.flip(-1))
    batch = torch.utils.data.default_collate([ds[0], ds[1]])
    assert batch[0].shape == (2, 3, 224, 224) and batch[1].dtype == torch.int64


def test_pil_to_tensor_is_chw_view() -> None:
    pixels = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    t = pil_to_tensor(Image.fromarray(pixels))
    assert t.shape == (3, 4, 5) and torch.equal(t.permute(1, 2, 0), torch.from_numpy(pixels))


def _drawable(
    w: int, h: int, area: int, scale: tuple[float, float], ratio: tuple[float, float]
) -> bool:
    """Whether ``w = round(sqrt(area * s * r))``, ``h = round(sqrt(area * s / r))`` fits some
    ``s`` in ``scale`` and ``r`` in ``ratio`` (interval bounds: necessary, nearly sufficient)."""
    x_lo, x_hi = (w - 0.5) ** 2 / area, (w + 0.5) ** 2 / area  # s * r
    y_lo, y_hi = (h - 0.5) ** 2 / area, (h + 0.5) ** 2 / area  # s / r
    s_lo, s_hi = math.sqrt(x_lo * y_lo), math.sqrt(x_hi * y_hi)
    r_lo, r_hi = math.sqrt(x_lo / y_hi), math.sqrt(x_hi / y_lo)
    return s_lo <= scale[1] and s_hi >= scale[0] and r_lo <= ratio[1] and r_hi >= ratio[0]


@pytest.mark.parametrize("size", [(224, 224), (300, 200), (640, 427), (500, 40), (30, 400)])
def test_random_resized_crop_params_obey_torchvision_bounds(size: tuple[int, int]) -> None:
    width, height = size
    img = Image.new("RGB", size)
    scale, ratio = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)
    # torchvision's fallback after 10 misses: a central crop with the ratio clamped
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    fallback = ((height - h) // 2, (width - w) // 2, h, w)
    torch.manual_seed(0)
    drawn = 0
    for _ in range(300):
        i, j, h, w = TorchvisionRandomResizedCrop.get_params(img, scale, ratio)
        assert 0 < h <= height and 0 < w <= width
        assert 0 <= i <= height - h and 0 <= j <= width - w
        if (i, j, h, w) != fallback:
            assert _drawable(w, h, width * height, scale, ratio), (i, j, h, w)
            drawn += 1
    assert drawn > 0  # every size here fits some draws (40 x 500 only small ones)
    torch.manual_seed(0)
    again = TorchvisionRandomResizedCrop.get_params(img, scale, ratio)
    torch.manual_seed(0)
    assert TorchvisionRandomResizedCrop.get_params(img, scale, ratio) == again


def test_random_resized_crop_is_crop_then_bilinear_resize() -> None:
    pixels = np.random.default_rng(0).integers(0, 255, (200, 300, 3), np.uint8)
    img = Image.fromarray(pixels)
    crop = TorchvisionRandomResizedCrop(224)
    torch.manual_seed(5)
    i, j, h, w = crop.get_params(img, crop.scale, crop.ratio)
    torch.manual_seed(5)
    out = crop(img)
    expected = img.crop((j, i, j + w, i + h)).resize((224, 224), Image.Resampling.BILINEAR)
    assert out.size == (224, 224) and np.array_equal(np.asarray(out), np.asarray(expected))
