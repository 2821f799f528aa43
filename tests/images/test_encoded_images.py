"""Encoded image fields: JPEG/PNG/WebP bytes in chunks, decoded (and augmented) into batches.

Real photos (crops of scikit-learn's two sample photos), real Zarr and HDF5 files, real
decoders; references are the raw conversion of the same folder and Pillow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from benchmarks.data import make_jpeg_folder
from chunkio import (
    ChunkDataset,
    Decoding,
    Execution,
    ImageOptions,
    Workers,
    convert_images,
    make_loader,
)
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import CorruptChunkError, SourceError
from chunkio.format.layout import DatasetLayout
from chunkio.loader import RingFallbackWarning
from chunkio.read.encoded import EncodedReads
from chunkio.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop
from chunkio.transforms.sample import channels_last

FORMATS = {"zarr": "d.zarr", "hdf5": "d.h5"}


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 JPEG photo crops of 64x64 in 4 class folders."""
    return make_jpeg_folder(
        tmp_path_factory.mktemp("photos"), n_images=48, size=64, n_classes=4, seed=3
    )


@pytest.fixture(scope="module")
def jpeg_zarr(photos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The photos converted once with ``encoding="jpeg"``: the tests that only read share it."""
    dst = tmp_path_factory.mktemp("jpeg") / "jpg.zarr"
    convert_images(
        photos, dst, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    return dst


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _convert(src: Path, dst: Path, size: int | None = None, **image: Any) -> ChunkDataset:
    options = ImageOptions(**image)
    convert_images(
        src, dst, size=size, images=options, execution=Execution(progress=False, workers=1)
    )
    return ChunkDataset(dst, fields=("image", "label"))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_jpeg_field_reads_close_to_the_raw_pixels_and_is_smaller(
    photos: Path, tmp_path: Path, fmt: str
) -> None:
    raw = _convert(photos, tmp_path / f"raw.{FORMATS[fmt]}", encoding="raw")
    jpg = _convert(photos, tmp_path / f"jpg.{FORMATS[fmt]}", encoding="jpeg", quality=90)
    field = jpg.layout.field("image")
    assert (field.kind, field.encoding, field.sample_shape) == ("encoded", "jpeg", (3, 64, 64))
    idx = [5, 0, 47, 12, 13]
    a, b = raw.read_batch(idx), jpg.read_batch(idx)
    assert b["image"].shape == (5, 3, 64, 64) and b["image"].dtype == np.uint8
    np.testing.assert_array_equal(a["label"], b["label"])  # same files in the same order
    assert _psnr(a["image"], b["image"]) > 30
    assert _size(tmp_path / f"jpg.{FORMATS[fmt]}") < _size(tmp_path / f"raw.{FORMATS[fmt]}")


@pytest.mark.parametrize(("encoding", "quality"), [("png", 90), ("webp", 100)])
def test_lossless_encodings_are_bit_exact(
    photos: Path, tmp_path: Path, encoding: str, quality: int
) -> None:
    raw = _convert(photos, tmp_path / "raw.zarr")
    coded = _convert(photos, tmp_path / f"{encoding}.h5", encoding=encoding, quality=quality)
    idx = list(range(48))
    np.testing.assert_array_equal(raw.read_batch(idx)["image"], coded.read_batch(idx)["image"])


def test_images_of_several_sizes_become_a_list_or_a_transformed_batch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    sizes = [(40, 60), (64, 48), (50, 50), (33, 71), (80, 80), (41, 42)]
    rng = np.random.default_rng(0)
    for i, hw in enumerate(sizes):
        (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 255, (*hw, 3), dtype=np.uint8)
        Image.fromarray(img).save(src / f"c{i % 2}" / f"{i}.png")
    dst = tmp_path / "var.zarr"
    convert_images(
        src,
        dst,
        shuffle=False,
        images=ImageOptions(encoding="png"),
        execution=Execution(progress=False),
    )
    ds = ChunkDataset(dst, fields=("image", "label"))
    assert ds.layout.field("image").sample_shape is None
    images = ds.read_batch(range(6))["image"]
    assert isinstance(images, list)
    assert sorted(im.shape[1:] for im in images) == sorted(sizes)
    crop = Compose([RandomResizedCrop(24), RandomHorizontalFlip()])
    augmented = ChunkDataset(dst, fields=("image", "label"), transform=crop)
    assert augmented.batch_fields()["image"] == (np.dtype(np.uint8), (3, 24, 24))
    loader = make_loader(augmented, 3, num_workers=0, shuffle=False)
    assert loader.transport == "local"
    x, _ = next(iter(loader))
    assert tuple(x.shape) == (3, 3, 24, 24)
    # PNG is decoded whole, then cropped: exactly Compose applied to the stored pixels
    want = np.empty((24, 24, 3), np.uint8)
    crop.apply(np.ascontiguousarray(channels_last(images[0])), want, (crop.seed, 0, 0))
    np.testing.assert_array_equal(channels_last(x[0].numpy()), want)


@pytest.mark.timeout(120)
def test_compose_keeps_the_ring_and_is_keyed_by_seed_epoch_and_index(jpeg_zarr: Path) -> None:
    dst = jpeg_zarr
    t = Compose([RandomResizedCrop(32), RandomHorizontalFlip()], seed=7)

    def epoch(loader_workers: int, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        with make_loader(
            dst, 16, num_workers=loader_workers, fields=("image", "label"), transform=t, seed=1
        ) as loader:
            assert loader.transport == ("ring" if loader_workers else "local")
            loader.set_epoch(epoch)
            return [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]

    first = epoch(2, 0)
    assert [x.shape for x, _ in first] == [(16, 3, 32, 32)] * 3
    again = epoch(0, 0)  # another worker count, the same batches
    for (x1, y1), (x2, y2) in zip(first, again, strict=True):
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(x1, x2)
    later = epoch(0, 1)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, later, strict=True))


def test_the_dataloader_route_sees_the_epoch_too(photos: Path, tmp_path: Path) -> None:
    dst = tmp_path / "jpg.h5"
    convert_images(
        photos, dst, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    t = Compose([RandomResizedCrop(16)])
    kw = {"fields": ("image", "label"), "transform": t, "num_workers": 0}
    ring, plain = (
        make_loader(dst, 12, **kw),
        make_loader(dst, 12, **kw, workers=Workers(transport="dataloader")),
    )
    for e in (0, 3):
        ring.set_epoch(e)
        plain.set_epoch(e)
        for (a, la), (b, lb) in zip(ring, plain, strict=True):
            torch.testing.assert_close(la, lb)
            torch.testing.assert_close(a, b)


def test_jpeg_crops_decoded_at_reduced_scale_stay_close_to_full_decodes(tmp_path: Path) -> None:
    src = make_jpeg_folder(tmp_path / "big", n_images=8, size=200, n_classes=2, seed=1)
    dst = tmp_path / "big.zarr"
    convert_images(
        src,
        dst,
        shuffle=False,
        images=ImageOptions(encoding="jpeg"),
        execution=Execution(progress=False),
    )
    t = Compose([CenterCrop(180), RandomResizedCrop(48, scale=(0.5, 1.0))])
    fused = ChunkDataset(dst, fields="image", transform=t).read_batch(range(8), epoch=2)["image"]
    other = ChunkDataset(dst, fields="image", transform=t).read_batch(range(8), epoch=3)["image"]
    full = ChunkDataset(dst, fields="image").read_batch(range(8))["image"]
    same, different = [], []
    for i in range(8):
        want = np.empty((48, 48, 3), np.uint8)
        t.apply(np.ascontiguousarray(channels_last(full[i])), want, (t.seed, 2, i))
        same.append(np.abs(channels_last(fused[i]).astype(int) - want.astype(int)).mean())
        different.append(np.abs(channels_last(other[i]).astype(int) - want.astype(int)).mean())
    # the same crop (its box rounded at the reduced scale: a sub-pixel shift), unlike another's
    assert np.mean(same) < 4 and np.mean(different) > 3 * np.mean(same), (same, different)


def test_a_raw_field_with_compose_matches_compose_on_the_stored_pixels(
    photos: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "raw.zarr"
    convert_images(photos, dst, execution=Execution(progress=False))
    t = Compose([RandomResizedCrop(40), RandomHorizontalFlip()], seed=2)
    plain = ChunkDataset(dst, fields="image").read_batch(range(10))["image"]
    with make_loader(dst, 10, shuffle=False, num_workers=1, fields="image", transform=t) as ld:
        assert ld.transport == "ring"
        ld.set_epoch(4)
        batch = next(iter(ld)).numpy()
    for i in range(10):
        want = np.empty((40, 40, 3), np.uint8)
        t.apply(np.ascontiguousarray(channels_last(plain[i])), want, (2, 4, i))
        np.testing.assert_array_equal(channels_last(batch[i]), want)


def test_default_collate_with_an_encoded_field(photos: Path, tmp_path: Path) -> None:
    dst = tmp_path / "jpg.zarr"
    convert_images(
        photos, dst, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    ds = ChunkDataset(dst, fields=("image", "label"), transform=Compose([CenterCrop(32)]))
    x, y = next(iter(DataLoader(ds, batch_size=5)))
    assert tuple(x.shape) == (5, 3, 32, 32) and tuple(y.shape) == (5,)
    single = ChunkDataset(dst, fields="image")
    assert tuple(next(iter(DataLoader(single, batch_size=4))).shape) == (4, 3, 64, 64)


def test_a_transform_without_a_declared_shape_warns_and_falls_back(
    photos: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "jpg.zarr"
    convert_images(
        photos, dst, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    with pytest.warns(RingFallbackWarning, match="declares no output shape"):
        loader = make_loader(dst, 8, num_workers=0, fields="image", transform=lambda x: x[:, :8])
    assert loader.transport == "dataloader"
    assert tuple(next(iter(loader)).shape) == (8, 3, 8, 64)


def test_corrupt_encoded_bytes_name_the_field_and_sample(photos: Path, tmp_path: Path) -> None:
    import zarr

    dst = tmp_path / "jpg.zarr"
    convert_images(
        photos,
        dst,
        shuffle=False,
        images=ImageOptions(encoding="jpeg"),
        execution=Execution(progress=False),
    )
    ds = ChunkDataset(dst, fields="image")
    assert verify(dst).ok, verify(dst).problems
    spans = zarr.open_array(str(dst / "image__spans"), mode="r")[:]
    a, b = (int(v) for v in spans[9])
    data = zarr.open_array(str(dst / "image__bytes"), mode="r+")
    data[a + 20 : b] = 7  # valid checksums, garbage JPEG scan data
    ds.read_batch([8])  # another sample of the chunk is fine
    with pytest.raises(CorruptChunkError, match=r"field 'image', sample 9"):
        ChunkDataset(dst, fields="image").read_batch([9])
    problems = [str(p) for p in verify(dst).problems]
    assert len(problems) == 1 and "sample 9" in problems[0], problems


def test_bad_encoding_options_fail_before_anything_is_written(photos: Path, tmp_path: Path) -> None:
    dst = tmp_path / "x.zarr"
    with pytest.raises(ValueError, match="encoding"):
        convert_images(
            photos, dst, images=ImageOptions(encoding="gif"), execution=Execution(progress=False)
        )
    with pytest.raises(ValueError, match="quality"):
        convert_images(
            photos,
            dst,
            images=ImageOptions(encoding="jpeg", quality=0),
            execution=Execution(progress=False),
        )
    with pytest.raises(ValueError, match="max_size"):
        convert_images(
            photos,
            dst,
            size=32,
            images=ImageOptions(max_size=40),
            execution=Execution(progress=False),
        )
    assert not dst.exists()


def test_auto_picks_jpeg_for_jpegs_and_raw_for_pngs(photos: Path, tmp_path: Path) -> None:
    convert_images(
        photos,
        tmp_path / "a.zarr",
        images=ImageOptions(encoding="auto"),
        execution=Execution(progress=False),
    )
    assert ChunkDataset(tmp_path / "a.zarr").layout.field("image").encoding == "jpeg"
    src = tmp_path / "png"
    for i in range(4):
        (src / "c").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), i * 40, np.uint8)).save(src / "c" / f"{i}.png")
    convert_images(
        src,
        tmp_path / "b.zarr",
        images=ImageOptions(encoding="auto"),
        execution=Execution(progress=False),
    )
    assert ChunkDataset(tmp_path / "b.zarr").layout.field("image").kind == "dense"


def test_max_size_shrinks_only_larger_images(tmp_path: Path) -> None:
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    Image.new("RGB", (300, 200), (10, 20, 30)).save(src / "big.png")
    Image.new("RGB", (50, 40), (10, 20, 30)).save(src / "small.png")
    convert_images(
        tmp_path / "src",
        tmp_path / "m.zarr",
        images=ImageOptions(max_size=120),
        execution=Execution(progress=False),
    )
    images = ChunkDataset(tmp_path / "m.zarr", fields="image").read_batch([0, 1])["image"]
    assert sorted(im.shape for im in images) == [(3, 40, 50), (3, 80, 120)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_encoded_conversion_reruns_unchanged_and_hdf5_bytes_repeat(
    photos: Path, tmp_path: Path, fmt: str
) -> None:
    one, two = tmp_path / f"1{FORMATS[fmt]}", tmp_path / f"2{FORMATS[fmt]}"
    convert_images(
        photos, one, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    )
    assert convert_images(
        photos, one, images=ImageOptions(encoding="jpeg"), execution=Execution(progress=False)
    ).unchanged
    with pytest.raises(FileExistsError, match="encoding"):
        convert_images(
            photos, one, images=ImageOptions(encoding="png"), execution=Execution(progress=False)
        )
    convert_images(
        photos,
        two,
        images=ImageOptions(encoding="jpeg"),
        execution=Execution(progress=False, workers=2),
    )
    if fmt == "hdf5":
        assert one.read_bytes() == two.read_bytes()
    else:
        files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
        assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
        for rel in files:
            if rel == Path("zarr.json"):
                continue  # the root's attributes record the run's options and timing
            assert (one / rel).read_bytes() == (two / rel).read_bytes(), rel
    layout = DatasetLayout.from_attrs(_attrs(one), where=str(one))
    assert layout.extra["source"]["encoding"] == "jpeg"


def _attrs(path: Path) -> dict[str, object]:
    from chunkio.backends import open_reader

    reader = open_reader(os.fspath(path))
    try:
        return dict(reader.attrs())
    finally:
        reader.close()


@pytest.mark.parametrize("encoding", ["jpeg", "raw"])
def test_decode_threads_give_the_same_batches(
    photos: Path, jpeg_zarr: Path, tmp_path: Path, encoding: str
) -> None:
    dst = jpeg_zarr if encoding == "jpeg" else tmp_path / f"{encoding}.zarr"
    if encoding != "jpeg":
        convert_images(
            photos, dst, images=ImageOptions(encoding=encoding), execution=Execution(progress=False)
        )
    t = Compose([RandomResizedCrop(24), RandomHorizontalFlip()])
    idx = list(range(0, 48, 2))
    one = ChunkDataset(dst, fields="image", transform=t).read_batch(idx, epoch=5)["image"]
    ds = ChunkDataset(dst, fields="image", transform=t, decoding=Decoding(threads=3))
    np.testing.assert_array_equal(ds.read_batch(idx, epoch=5)["image"], one)
    with pytest.raises(ValueError, match="threads"):
        ChunkDataset(dst, decoding=Decoding(threads=0))


def test_sixteen_bit_images_are_refused_by_lossy_encodings_before_writing(tmp_path: Path) -> None:
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((6, 6), 1000 * i, np.uint16)).save(src / f"{i}.png")
    dst = tmp_path / "d.zarr"
    with pytest.raises(SourceError, match="use encoding='png'"):
        convert_images(
            tmp_path / "src",
            dst,
            images=ImageOptions(mode="keep", encoding="jpeg"),
            execution=Execution(progress=False),
        )
    assert not dst.exists()
    convert_images(
        tmp_path / "src",
        dst,
        images=ImageOptions(mode="keep", encoding="png"),
        execution=Execution(progress=False),
    )
    images = ChunkDataset(dst, fields="image").read_batch([0, 1, 2])["image"]
    assert images.dtype == np.uint16 and sorted(int(im.max()) for im in images) == [0, 1000, 2000]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_unchanged_jpegs_are_stored_as_they_are_and_read_bit_exact(
    photos: Path, tmp_path: Path, fmt: str
) -> None:
    raw = _convert(photos, tmp_path / f"raw.{FORMATS[fmt]}")
    dst = tmp_path / f"jpg.{FORMATS[fmt]}"
    jpg = _convert(photos, dst, encoding="jpeg", quality=50)  # quality: for re-encoded files
    assert jpg.layout.extra["source"]["jpeg_files_stored_as_is"] == 48
    idx = list(range(48))
    np.testing.assert_array_equal(raw.read_batch(idx)["image"], jpg.read_batch(idx)["image"])
    # the stored bytes are the files' bytes
    paths = chunkio_paths(dst)
    data = ChunkDataset(dst, fields="image")._handle().field("image")
    assert isinstance(data, EncodedReads)
    data._fetch(np.array([3]))
    assert bytes(data.sample_bytes(3)) == (photos / paths[3]).read_bytes()
    # resized images are decoded and encoded again (at the quality asked for)
    small = _convert(photos, tmp_path / f"s.{FORMATS[fmt]}", encoding="jpeg", size=32)
    assert small.layout.extra["source"]["jpeg_files_stored_as_is"] == 0


def chunkio_paths(dst: Path) -> list[str]:
    from chunkio import read_source_paths

    return list(read_source_paths(dst, range(48)))


def test_a_jpeg_too_large_for_its_region_is_encoded_again(tmp_path: Path) -> None:
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for i in range(3):
        pixels = rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)
        # two 60 kB comment segments: beyond 2x the 768 decoded bytes + 64 KiB
        Image.fromarray(pixels).save(src / f"{i}.jpg", quality=90, comment=b"x" * 60000)
        data = (src / f"{i}.jpg").read_bytes()
        (src / f"{i}.jpg").write_bytes(data[:2] + b"\xff\xfe\xea\x62" + b"y" * 60000 + data[2:])
    dst = tmp_path / "d.zarr"
    convert_images(
        tmp_path / "src",
        dst,
        images=ImageOptions(encoding="jpeg"),
        execution=Execution(progress=False),
    )
    ds = ChunkDataset(dst, fields="image")
    assert ds.layout.extra["source"]["jpeg_files_stored_as_is"] == 0
    assert verify(dst).ok
    assert ds.read_batch([0, 1, 2])["image"].shape == (3, 3, 16, 16)
    assert _size(dst / "image__bytes") < 60000  # the comments were not kept


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 1])
def test_decoded_batches_are_channels_last_unless_asked_otherwise(
    jpeg_zarr: Path, workers: int
) -> None:
    dst = jpeg_zarr
    t = Compose([RandomResizedCrop(32)])
    batches = {}
    for last in (True, False):
        ds = ChunkDataset(
            dst, fields=("image", "label"), transform=t, decoding=Decoding(channels_last=last)
        )
        assert ds.channels_last_fields() == ({"image"} if last else set())
        with make_loader(ds, 16, num_workers=workers, shuffle=False) as loader:
            x, _ = next(iter(loader))
            assert tuple(x.shape) == (16, 3, 32, 32)
            assert x.is_contiguous(memory_format=torch.channels_last) == last
            assert x.is_contiguous() != last
            batches[last] = x.clone()
    torch.testing.assert_close(batches[True], batches[False], rtol=0, atol=0)
    plain = ChunkDataset(dst, fields="image")  # no transform: decoded straight into the slot
    with make_loader(plain, 8, num_workers=workers, shuffle=False) as loader:
        x = next(iter(loader))
        assert x.is_contiguous(memory_format=torch.channels_last)
        np.testing.assert_array_equal(x.numpy(), plain.read_batch(range(8))["image"])
