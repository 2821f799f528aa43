"""convert_images: ImageFolder/flat/list inputs -> Zarr and HDF5, read back through ChunkDataset.

The reference for every pixel is Pillow itself, applying the declared policy by hand: open,
first frame, ``exif_transpose``, ``convert``, then resize by the documented geometry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from chunkio import ChunkDataset, Execution, ImageOptions, Output
from chunkio.convert.engine.ragged import RaggedPlan
from chunkio.convert.image import check as image_check
from chunkio.convert.image import source as image_source_mod
from chunkio.convert.image import write as image_write
from chunkio.convert.images import convert_images, source_paths
from chunkio.diagnose.dataset_report import info, verify
from chunkio.errors import DestinationExistsError, SourceError
from chunkio.format.grid import SampleGrid
from chunkio.format.layout import FieldInfo
from chunkio.images.pillow import DecodePolicy, load_image

FORMATS = {"zarr": "out.zarr", "hdf5": "out.h5"}


def pillow_reference(path: Path, mode: str = "RGB") -> np.ndarray:
    with Image.open(path) as im:
        arr = np.asarray(ImageOps.exif_transpose(im).convert(mode))
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


def write_image(path: Path, hw: tuple[int, int], seed: int, fmt: str | None = None) -> Path:
    rng = np.random.default_rng(seed)
    # Smooth content (a gradient plus noise) so JPEG round-trips are not all noise.
    yy, xx = np.mgrid[0 : hw[0], 0 : hw[1]]
    base = np.stack([yy * 4 + seed, xx * 4, (yy + xx) * 2], axis=-1)
    arr = np.clip(base + rng.integers(0, 30, (*hw, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, format=fmt)
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for k, cls in enumerate(["cat", "dog"]):
        for i in range(3):
            write_image(root / cls / f"{i}.jpg", (24, 32), seed=10 * k + i)
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / ".DS_Store").write_bytes(b"\0\1")
    return root


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_imagefolder_reads_back_the_pillow_pixels(folder: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / FORMATS[fmt]
    result = convert_images(
        folder, dst, output=Output(chunks=4), execution=Execution(workers=1, progress=False)
    )
    assert result.num_samples == 6 and result.class_names == ("cat", "dog")
    assert result.skipped == () and result.ignored == 2
    ds = ChunkDataset(dst)
    assert ds.class_names == ("cat", "dog") and len(ds) == 6
    batch = ds.read_batch(list(range(6)))
    paths = source_paths(batch["path"])
    listing = [f"{c}/{i}.jpg" for c in ("cat", "dog") for i in range(3)]
    order = batch["source_index"].tolist()  # stored in a seeded random order by default
    assert sorted(order) == list(range(6)) and order != list(range(6))
    assert paths == [listing[k] for k in order]
    for j, rel in enumerate(paths):
        np.testing.assert_array_equal(batch["image"][j], pillow_reference(folder / rel))
    assert batch["label"].tolist() == [k // 3 for k in order]
    assert batch["label"].dtype == np.int64
    assert batch["orig_size"].tolist() == [[24, 32]] * 6
    assert verify(dst).ok
    d = info(dst)
    assert d["fields"]["image"]["sample_shape"] == [3, 24, 32]
    assert d["extra"]["source"]["layout"] == "imagefolder"


def test_rejects_an_existing_destination(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.zarr"
    convert_images(folder, dst, execution=Execution(workers=1, progress=False))
    assert convert_images(
        folder, dst, execution=Execution(workers=1, progress=False)
    ).unchanged  # the same rerun
    with pytest.raises(DestinationExistsError, match='option mode was "RGB", now "L"'):
        convert_images(
            folder,
            dst,
            images=ImageOptions(mode="L"),
            execution=Execution(workers=1, progress=False),
        )
    convert_images(
        folder,
        dst,
        images=ImageOptions(mode="L"),
        execution=Execution(workers=1, progress=False, overwrite=True),
    )
    assert ChunkDataset(dst).layout.field("image").sample_shape == (1, 24, 32)


def test_flat_folder_has_no_labels(tmp_path: Path) -> None:
    for i in range(3):
        write_image(tmp_path / "flat" / f"im {i}.png", (8, 8), seed=i)
    convert_images(
        tmp_path / "flat",
        tmp_path / "o.zarr",
        shuffle=False,
        execution=Execution(workers=1, progress=False),
    )
    ds = ChunkDataset(tmp_path / "o.zarr")
    assert "label" not in ds.layout.field_names and ds.class_names is None
    assert source_paths(ds.read_batch([0, 1, 2])["path"]) == ["im 0.png", "im 1.png", "im 2.png"]


def test_a_list_of_paths_with_labels(tmp_path: Path) -> None:
    paths = [write_image(tmp_path / "a" / f"{i}.png", (8, 8), seed=i) for i in range(3)]
    convert_images(
        [paths[2], paths[0]],
        tmp_path / "o.h5",
        labels=[7, 3],
        shuffle=False,
        execution=Execution(workers=1, progress=False),
    )
    batch = ChunkDataset(tmp_path / "o.h5").read_batch([0, 1])
    assert batch["label"].tolist() == [7, 3]
    np.testing.assert_array_equal(batch["image"][0], pillow_reference(paths[2]))
    with pytest.raises(ValueError, match="labels must match"):
        convert_images(
            paths, tmp_path / "x.zarr", labels=[1], execution=Execution(workers=1, progress=False)
        )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_mixed_sizes_become_a_ragged_field(tmp_path: Path, fmt: str) -> None:
    sizes = [(10, 12), (16, 8), (10, 12), (5, 30), (20, 20)]
    for i, hw in enumerate(sizes):
        write_image(tmp_path / "src" / f"{i}.png", hw, seed=i)
    dst = tmp_path / FORMATS[fmt]
    result = convert_images(
        tmp_path / "src",
        dst,
        output=Output(chunks=2),
        execution=Execution(workers=1, progress=False),
    )
    assert result.fields[0].kind == "ragged"
    ds = ChunkDataset(dst, fields=["image", "orig_size", "source_index"])
    images, orig, where = ds.read_batch([4, 0, 3, 1, 2]).values()
    files = where.tolist()  # shuffled: ragged shapes follow their images
    assert sorted(files) == list(range(5))
    for got, i in zip(images, files, strict=True):
        np.testing.assert_array_equal(got, pillow_reference(tmp_path / "src" / f"{i}.png"))
    assert orig.tolist() == [list(sizes[i]) for i in files]
    sample = ds[[4, 0, 3, 1, 2][files.index(1)]]  # the stored row of file 1
    assert tuple(sample[0].shape) == (3, 16, 8)
    assert verify(dst).ok


def test_resize_policies_follow_the_declared_geometry(tmp_path: Path) -> None:
    path = write_image(tmp_path / "tall.png", (40, 20), seed=3)  # H=40, W=20
    with Image.open(path) as im:
        src = im.convert("RGB")
    bilinear = Image.Resampling.BILINEAR
    # cover (scale max(16/40, 16/20) = 0.8 -> 16x32), then centre crop rows 8..24
    crop = np.asarray(src.resize((16, 32), bilinear))[8:24]
    # fit (scale 0.4 -> 8x16), then zero-pad columns 4..12
    pad = np.zeros((16, 16, 3), np.uint8)
    pad[:, 4:12] = np.asarray(src.resize((8, 16), bilinear))
    stretch = np.asarray(src.resize((16, 16), bilinear))
    for how, expected in (("shorter-crop", crop), ("pad", pad), ("stretch", stretch)):
        got = load_image(str(path), DecodePolicy(size=(16, 16), resize=how), stored="RGB")  # type: ignore[arg-type]
        np.testing.assert_array_equal(got, expected.transpose(2, 0, 1), err_msg=how)


@pytest.mark.parametrize("how", ["shorter-crop", "pad", "stretch"])
def test_mixed_sizes_with_a_target_size_are_dense(tmp_path: Path, how: Any) -> None:
    for i, hw in enumerate([(10, 12), (16, 8), (5, 30)]):
        write_image(tmp_path / "src" / f"{i}.png", hw, seed=i)
    dst = tmp_path / "o.zarr"
    convert_images(
        tmp_path / "src",
        dst,
        size=(8, 6),
        shuffle=False,
        images=ImageOptions(resize=how),
        execution=Execution(workers=1, progress=False),
    )
    ds = ChunkDataset(dst, fields=["image", "orig_size"])
    images, orig = ds.read_batch([0, 1, 2]).values()
    assert images.shape == (3, 3, 8, 6)
    assert orig.tolist() == [[10, 12], [16, 8], [5, 30]]
    policy = DecodePolicy(size=(8, 6), resize=how)
    for i in range(3):
        expected = load_image(str(tmp_path / "src" / f"{i}.png"), policy, stored="RGB")
        np.testing.assert_array_equal(images[i], expected)


def test_bad_file_with_raise_stops_before_writing(folder: Path, tmp_path: Path) -> None:
    bad = folder / "cat" / "1.jpg"
    bad.write_bytes(bad.read_bytes()[:200])
    dst = tmp_path / "o.zarr"
    with pytest.raises(SourceError, match=r"cat/1\.jpg") as err:
        convert_images(folder, dst, execution=Execution(workers=1, progress=False))
    assert "on_error='skip'" in str(err.value)
    assert not dst.exists() and not any(p.name.startswith(".o.zarr") for p in tmp_path.iterdir())


@pytest.mark.timeout(300)
def test_process_pools_write_ragged_chunks_without_sharing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Zarr writer processes, ragged values, one outsized image spanning values chunks."""
    monkeypatch.setattr(image_check, "POOL_MIN_SECONDS", 0.0)  # force the pools on tiny data
    rng = np.random.default_rng(0)
    sizes = [tuple(int(v) for v in rng.integers(4, 20, 2)) for _ in range(11)]
    sizes[6] = (60, 50)  # far above the median chunk: its chunk spreads over values chunks
    for i, hw in enumerate(sizes):
        write_image(tmp_path / "src" / f"{i:02d}.png", hw, seed=i)
    (tmp_path / "src" / "99.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    kw: dict[str, Any] = {"on_error": "skip", "output": Output(chunks=2)}
    pooled = convert_images(
        tmp_path / "src", tmp_path / "p.zarr", **kw, execution=Execution(workers=2, progress=False)
    )
    assert [s.path for s in pooled.skipped] == ["99.png"] and pooled.written_blocks > 1
    serial = convert_images(
        tmp_path / "src", tmp_path / "s.zarr", **kw, execution=Execution(workers=1, progress=False)
    )
    assert serial.skipped == pooled.skipped
    for dst in ("p.zarr", "s.zarr"):
        ds = ChunkDataset(tmp_path / dst, fields=("image", "source_index"))
        batch = ds.read_batch(range(11))
        assert sorted(batch["source_index"].tolist()) == list(range(11))
        for i, got in zip(batch["source_index"], batch["image"], strict=True):
            np.testing.assert_array_equal(got, pillow_reference(tmp_path / "src" / f"{i:02d}.png"))
        assert verify(tmp_path / dst).ok


def test_ragged_placement_never_shares_a_values_chunk() -> None:
    rng = np.random.default_rng(1)
    for spc in (1, 3, 7):
        shapes = rng.integers(0, 9, (23, 2))
        shapes[5] = (40, 40)
        grid = SampleGrid(23, spc)
        plan = RaggedPlan.build(FieldInfo("x", np.dtype(np.int16), None, "ragged"), shapes, grid)
        sizes = shapes.prod(axis=1)
        assert np.all(plan.offsets[:-1] + sizes <= plan.offsets[1:]), "samples overlap"
        assert plan.offsets[-1] == plan.offsets[-2] + sizes[-1]
        spans = [plan.values_chunks(k, k + 1) for k in range(grid.num_chunks)]
        for k in range(1, len(spans)):
            assert spans[k - 1][1] <= spans[k][0], "two sample chunks write one values chunk"
        samples = [np.full(tuple(s), i, np.int16) for i, s in enumerate(shapes)]
        flat = np.zeros(plan.num_values, np.int16)
        for k in range(grid.num_chunks):
            a, b = grid.bounds(k)
            start, buf = plan.pack(k, k + 1, samples[a:b])
            assert start % plan.chunk_len == 0 and start == spans[k][0] * plan.chunk_len
            flat[start : start + len(buf)] = buf
        for i, sample in enumerate(samples):
            got = flat[plan.offsets[i] : plan.offsets[i] + sizes[i]].reshape(shapes[i])
            np.testing.assert_array_equal(got, sample)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_an_interrupted_ragged_conversion_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    for i, hw in enumerate([(6, 7), (9, 4), (5, 5), (8, 8), (3, 10), (7, 6)]):
        write_image(tmp_path / "src" / f"{i}.png", hw, seed=i)
    dst = tmp_path / FORMATS[fmt]
    real = image_source_mod.load_image

    def failing(path: str, *args: Any, **kw: Any) -> Any:
        if path.endswith("4.png"):
            raise SourceError(f"{path}: simulated failure")
        return real(path, *args, **kw)

    kw: dict[str, Any] = {
        "execution": Execution(workers=1, progress=False),
        "output": Output(chunks=2),
    }
    monkeypatch.setattr(image_write, "_BLOCK_BYTES", 1)  # one chunk per block: 3 blocks
    monkeypatch.setattr(image_source_mod, "load_image", failing)
    with pytest.raises(SourceError, match="simulated failure"):
        convert_images(tmp_path / "src", dst, **kw)
    assert not dst.exists()
    monkeypatch.setattr(image_source_mod, "load_image", real)
    result = convert_images(tmp_path / "src", dst, **kw)
    assert result.resumed_blocks >= 1 and result.fields[0].kind == "ragged"
    batch = ChunkDataset(dst, fields=("image", "source_index")).read_batch(range(6))
    assert sorted(batch["source_index"].tolist()) == list(range(6))  # shuffled (the default)
    for i, got in zip(batch["source_index"], batch["image"], strict=True):
        np.testing.assert_array_equal(got, pillow_reference(tmp_path / "src" / f"{i}.png"))
    fresh = tmp_path / f"fresh{FORMATS[fmt]}"
    convert_images(tmp_path / "src", fresh, **kw)
    again = ChunkDataset(fresh, fields=("image", "source_index")).read_batch(range(6))
    assert again["source_index"].tolist() == batch["source_index"].tolist()
    for a, b in zip(again["image"], batch["image"], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.timeout(120)
def test_dask_client_runs_both_passes(folder: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0"
    ) as client:
        convert_images(
            folder, tmp_path / "d.zarr", execution=Execution(client=client, progress=False)
        )
    convert_images(folder, tmp_path / "local.zarr", execution=Execution(workers=1, progress=False))
    batch = ChunkDataset(tmp_path / "d.zarr").read_batch(range(6))
    row = batch["source_index"].tolist().index(5)  # dog/2.jpg, the last file listed
    assert source_paths(batch["path"][row : row + 1]) == ["dog/2.jpg"]
    np.testing.assert_array_equal(batch["image"][row], pillow_reference(folder / "dog" / "2.jpg"))
    local = ChunkDataset(tmp_path / "local.zarr").read_batch(range(6))
    for name, values in local.items():
        np.testing.assert_array_equal(batch[name], values, err_msg=name)


def test_bad_options_are_refused(folder: Path, tmp_path: Path) -> None:
    for make, match in (
        (lambda: {"images": ImageOptions(mode="CMYK")}, "mode must be"),  # type: ignore[arg-type]
        (lambda: {"images": ImageOptions(resize="crop")}, "resize must be"),  # type: ignore[arg-type]
        (lambda: {"size": (0, 4)}, "size must be"),
        (lambda: {"on_error": "ignore"}, "on_error must be"),
        (lambda: {"execution": Execution(workers=0)}, "workers must be"),
    ):
        with pytest.raises(ValueError, match=match):
            convert_images(folder, tmp_path / "x.zarr", **make())
    with pytest.raises(TypeError, match="labels="):
        convert_images(folder, tmp_path / "x.zarr", labels=[0], execution=Execution(progress=False))
