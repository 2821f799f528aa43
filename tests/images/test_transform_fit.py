"""A transform either applies to its field or is refused when the dataset is made (a
``TransformError`` naming the field, the transform and what would work), never skipped in
silence: fields not selected, kinds, dtypes, channel counts, shapes, images of several sizes
with an output size that follows theirs, and ``Normalize`` on fields it cannot normalise in
place. Issue 40, item 4; RELIABILITY row 36."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse
import torch
from PIL import Image

from chunkio import (
    ChunkDataset,
    Execution,
    ImageOptions,
    Normalize,
    Output,
    Stats,
    make_loader,
    write_arrays,
)
from chunkio.backends import Compression, open_writer
from chunkio.convert.images import convert_images
from chunkio.errors import TransformError, WindowError
from chunkio.format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, FieldInfo
from chunkio.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

N = 6
CROP = Compose([RandomResizedCrop((8, 10))], seed=3)
SAMPLES = "cannot apply to its samples "


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    rng = np.random.default_rng(0)
    arrays: dict[str, Any] = {
        "rgb": rng.integers(0, 256, (N, 3, 20, 24), dtype=np.uint8),
        "gray": rng.integers(0, 256, (N, 20, 24), dtype=np.uint8),  # 2-D rows
        "gray1": rng.integers(0, 256, (N, 1, 20, 24), dtype=np.uint8),
        "two": rng.integers(0, 256, (N, 2, 20, 24), dtype=np.uint8),
        "hwc": rng.integers(0, 256, (N, 20, 24, 3), dtype=np.uint8),  # channels last
        "floats": rng.random((N, 3, 20, 24), dtype=np.float32),
        "fgray": rng.random((N, 20, 24), dtype=np.float32),
        "label": np.arange(N),
        "vec": rng.integers(0, 256, (N, 6), dtype=np.uint8),
        "m": scipy.sparse.random(N, 12, density=0.3, format="csr", dtype=np.float32, rng=1),
    }
    path = tmp_path_factory.mktemp("fit") / "d.zarr"
    write_arrays(path, arrays, shuffle=False, output=Output(chunks=4))
    return path, arrays


def _seen(image: np.ndarray) -> np.ndarray:
    """A stored (C, H, W) or (H, W) sample as a transform sees it."""
    if image.ndim == 2:
        return image
    return image[0] if image.shape[0] == 1 else np.ascontiguousarray(image.transpose(1, 2, 0))


@pytest.mark.parametrize(
    ("name", "shape"), [("rgb", (3, 8, 10)), ("gray", (8, 10)), ("gray1", (1, 8, 10))]
)
def test_image_fields_of_one_three_or_no_channel_axis_are_transformed(
    dense: Any, name: str, shape: tuple[int, ...]
) -> None:
    path, arrays = dense
    t = Compose([RandomResizedCrop((8, 10)), RandomHorizontalFlip()], field=name, seed=3)
    got = ChunkDataset(path, fields=[name, "label"], transform=t).read_batch([4, 1], epoch=2)[name]
    assert got.shape == (2, *shape)
    for row, i in zip(got, [4, 1], strict=True):
        want = t(_seen(arrays[name][i]), key=(3, 2, i))
        np.testing.assert_array_equal(_seen(row), want)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (
            "two",
            SAMPLES + r"\(dense, uint8, shape \(2, 20, 24\)\): image shape .* got \(20, 24, 2\)",
        ),
        (
            "hwc",
            SAMPLES + r"\(dense, uint8, shape \(20, 24, 3\)\): image shape .* got \(24, 3, 20\)",
        ),
        ("floats", r"takes uint8 images; field 'floats' is float32"),
        ("label", r"takes uint8 images; field 'label' is int64"),
        ("vec", SAMPLES + r"\(dense, uint8, shape \(6,\)\): image shape must be"),
        ("m", r"cannot apply: the field is sparse; field transforms apply to the samples of"),
    ],
)
def test_a_field_the_transform_cannot_take_is_refused_when_the_dataset_is_made(
    dense: Any, name: str, match: str
) -> None:
    path, _ = dense
    t = Compose([RandomResizedCrop(8)], field=name)
    about = rf"^{path}: the transform of field '{name}' \(Compose\(\[RandomResizedCrop.*\)\) "
    with pytest.raises(TransformError, match=about + match):
        ChunkDataset(path, fields=[name, "label"], transform=t)
    with pytest.raises(TransformError, match=about + match):
        make_loader(path, 2, fields=[name, "label"], transform=t, num_workers=0)


def test_a_crop_larger_than_the_images_is_refused_when_the_dataset_is_made(dense: Any) -> None:
    path, _ = dense
    with pytest.raises(TransformError, match=r"CenterCrop: size \(21, 21\) is larger than its"):
        ChunkDataset(path, fields="rgb", transform=Compose([CenterCrop(21)], field="rgb"))
    ok = ChunkDataset(path, fields="rgb", transform=Compose([CenterCrop(20)], field="rgb"))
    assert ok.read_batch([0])["rgb"].shape == (1, 3, 20, 20)


def test_a_transform_of_a_field_not_read_is_refused(dense: Any) -> None:
    path, _ = dense
    t = Compose([RandomResizedCrop(8)], field="rgb")
    with pytest.raises(
        TransformError,
        match=r"'rgb' .* would never run: the dataset reads fields \['gray', 'label'\]",
    ):
        ChunkDataset(path, fields=["gray", "label"], transform=t)


# -- images of several sizes (ragged raw, the default encoding of mixed sizes) -----------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(1)
    (root / "src").mkdir()
    for i, hw in enumerate([(20, 30), (31, 17), (24, 24)]):
        Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8)).save(
            root / "src" / f"{i}.png"
        )
    convert_images(
        root / "src", root / "m.zarr", images=ImageOptions(encoding="raw"),
        execution=Execution(workers=1, progress=False),
    )  # fmt: skip
    return root / "m.zarr"


@pytest.mark.parametrize(
    "ops", [[Resize(16)], [RandomHorizontalFlip()], [CenterCrop(8), Resize(12)]], ids=str
)
def test_an_output_size_that_follows_the_input_is_refused_for_images_of_several_sizes(
    mixed: Path, ops: list[Any]
) -> None:
    t = Compose(ops)
    assert t.fixed_size is None
    match = r"makes images of each input's size, and field 'image' holds images of several sizes"
    with pytest.raises(TransformError, match=match):
        ChunkDataset(mixed, transform=t)
    with pytest.raises(TransformError, match=r"End the Compose with a fixed-size op"):
        make_loader(mixed, 2, transform=t, num_workers=0)
    fixed = Compose([*ops, CenterCrop(8)])  # ended with a fixed size: applied
    assert ChunkDataset(mixed, fields="image", transform=fixed).read_batch([0, 1, 2])[
        "image"
    ].shape == (3, 3, 8, 8)


def _ragged(path: Path, shapes: list[tuple[int, ...]]) -> Path:
    """A ragged uint8 ``image`` field of samples ``shapes``, one chunk (a store whose images
    a converter would never mix: several channel counts)."""
    sizes = [int(np.prod(s)) for s in shapes]
    values = np.random.default_rng(2).integers(0, 256, sum(sizes), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    writer = open_writer(str(path))
    for name, data in (
        ("image__values", values),
        ("image__offsets", offsets),
        ("image__shapes", np.array(shapes, np.int64)),
    ):
        writer.create_array(
            name, shape=data.shape, dtype=data.dtype, chunks=data.shape, compression=Compression()
        )
        writer.write_block(name, 0, data)
    field = FieldInfo("image", np.dtype(np.uint8), None, "ragged")
    writer.set_attrs({ATTR_KEY: DatasetLayout(len(shapes), len(shapes), (field,)).to_attrs()})
    writer.set_attrs({COMPLETE_KEY: True})
    writer.close()
    return path


def test_ragged_samples_the_transform_cannot_take_are_named_when_read(tmp_path: Path) -> None:
    path = _ragged(tmp_path / "r.zarr", [(3, 9, 8), (2, 10, 12), (1, 11, 9)])
    ds = ChunkDataset(path, transform=CROP)  # sample 0 fits: the dataset is made
    assert ds.read_batch([0])["image"].shape == (1, 3, 8, 10)
    with pytest.raises(
        TransformError, match=r"field 'image' cannot apply to a sample of shape \(2, 10, 12\)"
    ):
        ds.read_batch([0, 1])
    with pytest.raises(TransformError, match=r"field 'image' gives samples of 2 different shapes"):
        ds.read_batch([0, 2])
    first_bad = _ragged(tmp_path / "b.zarr", [(5, 9, 8), (3, 9, 8)])
    with pytest.raises(TransformError, match=r"ragged, uint8, shape \(5, 9, 8\)\): image shape"):
        ChunkDataset(first_bad, transform=CROP)


class Corner:
    """A field transform without ``input_dtype`` or ``fixed_size``: the top-left 4 x 4."""

    field = "image"
    seed = 0

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (4, 4, *input_shape[2:])

    def apply(self, image: np.ndarray, out: np.ndarray, key: Any) -> None:
        out[...] = image[:4, :4]


def test_any_field_transform_applies_to_each_ragged_sample(tmp_path: Path) -> None:
    path = _ragged(tmp_path / "r.zarr", [(3, 9, 8), (3, 10, 12), (3, 5, 4)])
    plain = ChunkDataset(path).read_batch([2, 0, 1])["image"]
    got = ChunkDataset(path, transform=Corner()).read_batch([2, 0, 1])["image"]
    assert got.shape == (3, 3, 4, 4)
    for row, whole in zip(got, plain, strict=True):
        np.testing.assert_array_equal(row, whole[:, :4, :4])


# -- Normalize ---------------------------------------------------------------------------------


def _stats(**fields: tuple[Any, Any]) -> Stats:
    return Stats(
        fields={k: {"arrays": [k], "mean": m, "std": s, "count": N} for k, (m, s) in fields.items()}
    )


def test_normalize_with_three_means_on_a_gray_field_is_refused(dense: Any) -> None:
    path, _ = dense
    three = _stats(fgray=([0.5] * 3, [0.2] * 3))
    with pytest.raises(
        WindowError,
        match=r"field 'fgray': stats of \(3,\) channels; its samples \(20, 24\) need \(\)",
    ):
        ChunkDataset(path, fields=["fgray"], transform=Normalize(three))
    with pytest.raises(WindowError, match=r"field 'fgray': stats of \(3,\)"):
        make_loader(path, 2, fields=["fgray"], transform=Normalize(three), num_workers=0)


def test_normalize_refuses_integer_images_and_leaves_labels(dense: Any) -> None:
    path, arrays = dense
    pixels = _stats(rgb=([100.0] * 3, [50.0] * 3))
    with pytest.raises(
        TransformError, match=r"field 'rgb' is uint8 of shape \(3, 20, 24\), which cannot hold it"
    ):
        ChunkDataset(path, fields=["rgb", "label"], transform=Normalize(pixels))
    stats = _stats(floats=([0.5] * 3, [0.25] * 3), label=(2.5, 1.0))
    got = ChunkDataset(path, fields=["floats", "label"], transform=Normalize(stats)).read_batch(
        [1, 3]
    )
    np.testing.assert_allclose(got["floats"], (arrays["floats"][[1, 3]] - 0.5) / 0.25, rtol=1e-6)
    np.testing.assert_array_equal(got["label"], [1, 3])  # integer scalars: as they are


def test_normalize_refuses_images_of_several_sizes(mixed: Path) -> None:
    # stats check_stats takes (the field's arrays, one value): only the list of samples is left
    arrays = ["image__values", "image__offsets", "image__shapes"]
    stats = Stats(fields={"image": {"arrays": arrays, "mean": 100.0, "std": 50.0, "count": 3}})
    match = r"Normalize cannot apply to field 'image' in place: it is ragged, of samples of several"
    with pytest.raises(TransformError, match=match):
        ChunkDataset(mixed, fields=["image"], transform=Normalize(stats))


def test_normalize_on_a_batch_normalises_floats_passes_labels_and_refuses_integer_images() -> None:
    norm = Normalize(_stats(x=([0.5] * 3, [0.25] * 3), y=([2.0], [1.0]), label=(2.5, 1.0)))
    x = torch.rand(2, 3, 4, 5)
    label = torch.tensor([1, 3])
    got = norm({"x": x, "label": label, "other": x})
    torch.testing.assert_close(got["x"], (x - 0.5) / 0.25)
    assert got["label"] is label and got["other"] is x  # a label; a field the stats lack
    with pytest.raises(TransformError, match=r"field 'x' of the batch is torch.uint8 of shape"):
        norm({"x": torch.zeros(2, 3, 4, 5, dtype=torch.uint8)})
    with pytest.raises(TransformError, match=r"field 'y' of the batch is a list"):
        norm({"y": [torch.zeros(1, 4, 5), torch.zeros(1, 6, 5)]})
