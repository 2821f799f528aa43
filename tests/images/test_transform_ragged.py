"""A field transform on raw images of several sizes (a ragged field, the default encoding of
mixed sizes): applied to each sample into one fixed-size batch, the same pixels as the
transform of that image read on its own, keyed by ``(seed, epoch, index)`` as every field's
samples are; through ``read_batch``, ``__getitems__`` and ``make_loader`` (ring and DataLoader,
0 and 2 workers). Issue 40, item 4; RELIABILITY row 36."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from chunkio import ChunkDataset, Execution, ImageOptions, Output, Workers, make_loader
from chunkio.convert.images import convert_images
from chunkio.errors import TransformError
from chunkio.transforms import CenterCrop, Compose, RandomHorizontalFlip, RandomResizedCrop, Resize

SIZES = [(30, 41), (52, 20), (64, 64), (33, 90), (20, 21), (47, 47), (25, 70), (90, 31), (40, 40)]
AUGMENT = Compose([RandomResizedCrop((12, 16)), RandomHorizontalFlip()], seed=7)


def _store(root: Path, mode: str) -> Path:
    rng = np.random.default_rng(len(mode))
    src = root / "src"
    src.mkdir(parents=True)
    channels = () if mode == "L" else (3,)
    for i, hw in enumerate(SIZES):
        pixels = rng.integers(0, 256, (*hw, *channels), dtype=np.uint8)
        Image.fromarray(pixels).save(src / f"{i}.png")
    dst = root / "raw.zarr"
    convert_images(
        src,
        dst,
        images=ImageOptions(encoding="raw", mode=mode),
        output=Output(chunks=2),  # batches cross chunks
        execution=Execution(workers=1, progress=False),
    )
    return dst


@pytest.fixture(scope="module", params=["RGB", "L"])
def raw(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp(request.param), request.param)


def _alone(path: Path, t: Compose, index: int, epoch: int, key: int | None = None) -> np.ndarray:
    """The transform of sample ``index`` read on its own, untransformed, its draws keyed by
    ``key`` (default: ``index``): ``(C, h, w)``."""
    (image,) = ChunkDataset(path, fields="image").read_batch([index])["image"]
    seen = image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0)  # (H, W[, C])
    out = t(np.ascontiguousarray(seen), key=(t.seed, epoch, index if key is None else key))
    return out[None] if out.ndim == 2 else out.transpose(2, 0, 1)


def test_the_store_is_ragged(raw: Path) -> None:
    info = ChunkDataset(raw).layout.field("image")
    assert info.kind == "ragged" and info.sample_shape is None


@pytest.mark.parametrize(
    "t",
    [AUGMENT, Compose([Resize(40), CenterCrop((16, 12))], seed=1), Compose([Resize((9, 11))])],
    ids=["random-resized-crop", "resize-center-crop", "resize-pair"],
)
def test_each_sample_is_transformed_as_if_read_alone(raw: Path, t: Compose) -> None:
    ds = ChunkDataset(raw, fields=["image", "source_index"], transform=t)
    channels = ChunkDataset(raw, fields="image").read_batch([0])["image"][0].shape[0]
    idx = [8, 0, 3, 3, 5, 1]
    for epoch in (0, 2):
        got = ds.read_batch(idx, epoch=epoch)["image"]
        assert isinstance(got, np.ndarray)
        assert got.shape == (len(idx), channels, *t.fixed_size) and got.dtype == np.uint8  # type: ignore[misc]
        for row, i in zip(got, idx, strict=True):
            np.testing.assert_array_equal(row, _alone(raw, t, i, epoch))
    if t is AUGMENT:  # random: the epoch draws again
        first, again = (ds.read_batch([3, 4], epoch=e)["image"] for e in (0, 2))
        assert not np.array_equal(first, again)


def test_many_files_key_the_draws_by_the_whole_datasets_index(raw: Path) -> None:
    ds = ChunkDataset([raw, raw], fields="image", transform=AUGMENT)
    n = len(SIZES)
    got = ds.read_batch([n + 3, 3, n], epoch=1)["image"]
    for row, i in zip(got, [n + 3, 3, n], strict=True):
        np.testing.assert_array_equal(row, _alone(raw, AUGMENT, i % n, 1, key=i))
    assert not np.array_equal(got[0], got[1])  # the same image, other draws


def test_a_given_buffer_is_filled_and_a_wrong_one_refused(raw: Path) -> None:
    ds = ChunkDataset(raw, fields="image", transform=AUGMENT)
    want = ds.read_batch([4, 2, 7], epoch=1)["image"]
    assert ds.read_batch([])["image"].shape == (0, *want.shape[1:])  # an empty batch too
    out = np.zeros_like(want)
    assert ds.read_batch([4, 2, 7], {"image": out}, epoch=1)["image"] is out
    np.testing.assert_array_equal(out, want)
    with pytest.raises(TransformError, match=r"output buffer for the transformed field 'image'"):
        ds.read_batch([4, 2, 7], {"image": np.zeros((3, 5, 12, 16), np.uint8)})


def test_getitems_hands_out_one_tensor_batch(raw: Path) -> None:
    ds = ChunkDataset(raw, fields=["image", "source_index"], transform=AUGMENT)
    x, s = ds.__getitems__([5, 0, 2]).collated
    plain = ChunkDataset(raw, fields="source_index").read_batch([5, 0, 2])["source_index"]
    assert s.tolist() == plain.tolist()  # the other field as it is
    assert isinstance(x, torch.Tensor) and x.shape[0] == 3 and x.shape[2:] == (12, 16)
    for row, i in zip(x, [5, 0, 2], strict=True):
        np.testing.assert_array_equal(row.numpy(), _alone(raw, AUGMENT, i, 0))
    sample, _ = ds[6]
    np.testing.assert_array_equal(sample.numpy(), _alone(raw, AUGMENT, 6, 0))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["ring", "dataloader"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_loaders_deliver_the_transformed_batches(
    raw: Path, transport: str, num_workers: int
) -> None:
    plain = ChunkDataset(raw, fields="source_index").read_batch(range(len(SIZES)))["source_index"]
    row_of = {int(s): i for i, s in enumerate(plain)}  # source file -> stored row
    loader = make_loader(
        raw, 4, fields=["image", "source_index"], transform=AUGMENT, num_workers=num_workers,
        seed=0, workers=Workers(transport=transport, copy=True),
    )  # fmt: skip
    want_route = {"ring": "ring" if num_workers else "local", "dataloader": "dataloader"}
    seen = []
    try:
        assert loader.transport == want_route[transport]
        loader.set_epoch(3)
        for x, s in loader:
            assert x.dtype == torch.uint8 and x.shape[2:] == (12, 16)
            for row, source in zip(x, s.tolist(), strict=True):
                i = row_of[source]
                np.testing.assert_array_equal(row.numpy(), _alone(raw, AUGMENT, i, 3))
                seen.append(i)
    finally:
        loader.close()
    assert sorted(seen) == list(range(len(SIZES)))
