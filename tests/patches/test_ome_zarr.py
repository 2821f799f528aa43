"""PatchDataset on OME-Zarr images written by ome-zarr-py (NGFF 0.4 on Zarr v2, 0.5 on Zarr
v3), read in place: every patch (image, label) equal to the store's arrays at its origin and
scale, spacing and origin from the metadata, masks restricting where patches are centred,
label-balanced sampling from the label image, several stores as one dataset, and a typed
error for each inconsistency in the metadata."""

from __future__ import annotations

import json
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr
from torch.utils.data import DataLoader

from chunkio.errors import CorruptChunkError, FormatError
from chunkio.patches import GridSampler, LabelBalancedSampler, PatchDataset, RandomPatchSampler
from chunkio.patches.masks import PatchMask, VolumeMask, footprint_edges
from chunkio.read.batch import collate
from chunkio.testing.servers import S3Server, require, s3_server_fixture  # noqa: F401 (fixture)

with warnings.catch_warnings():  # ome-zarr-py warns of its own deprecations when imported
    warnings.simplefilter("ignore")
    ome_writer = pytest.importorskip("ome_zarr.writer")
    ome_format = pytest.importorskip("ome_zarr.format")

PATCH = (8, 8, 8)
#: (t, c, z, y, x): two time points, two channels
SHAPE = (2, 2, 16, 24, 24)
SPACING = {"z": 2.0, "y": 0.5, "x": 0.5}


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 60000, SHAPE, dtype=np.uint16)
    label = np.zeros((SHAPE[0], *SHAPE[2:]), np.uint8)
    label[:, 2:6, 3:9, 4:10] = 1
    label[1, 10:12, 15:20, 17:22] = 2
    return image, label


def write_ome(
    path: Path,
    version: str,
    seed: int = 0,
    *,
    label_channel: bool = True,
    chunks: tuple[int, ...] = (8, 8, 8),
) -> Path:
    """An OME-Zarr image (scales s0, s1) with a label image ``seg``, by ome-zarr-py, chunked
    ``chunks`` in space."""
    image, label = _data(seed)
    fmt = ome_format.FormatV05() if version == "0.5" else ome_format.FormatV04()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scale not provided for t, c": 1.0, as wanted
        root = zarr.open_group(str(path), mode="w", zarr_format=fmt.zarr_format)
        ome_writer.write_image(
            image,
            root,
            axes="tczyx",
            fmt=fmt,
            scale_factors=[2],
            storage_options={"chunks": (1, 1, *chunks)},
            scale=SPACING,
            axes_units={a: "micrometer" for a in "zyx"},
        )
        labels = label[:, None] if label_channel else label
        ome_writer.write_labels(
            labels,
            root,
            name="seg",
            axes="tczyx" if label_channel else "tzyx",
            fmt=fmt,
            scale_factors=[2],
            scaler=None,
            storage_options={"chunks": (1, 1, *chunks) if label_channel else (1, *chunks)},
        )
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store the bad-input tests copy and damage (writing one costs more than a copy)."""
    return write_ome(tmp_path_factory.mktemp("pristine") / "bad.ome.zarr", "0.5")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two stores, one of each version, unlike data: one dataset in the tests that use it."""
    folder = tmp_path_factory.mktemp("pair")
    return [
        write_ome(folder / "a.ome.zarr", "0.5", seed=1),
        write_ome(folder / "b.ome.zarr", "0.4", seed=2, label_channel=False),
    ]


@pytest.fixture(scope="module", params=["0.5", "0.4"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp(f"ome{request.param}")
    # 0.4: a label image without the channel axis; 0.5: with the image's axes (c of one)
    return write_ome(folder / "a.ome.zarr", request.param, label_channel=request.param == "0.5")


def _level(store: Path, path: str) -> np.ndarray:
    return np.asarray(zarr.open_array(str(store / path), mode="r")[...])


def _all_patches(ds: PatchDataset) -> dict[str, np.ndarray]:
    return ds.read_patches(ds.sampler.keys())


@pytest.mark.parametrize("scale", [0, 1])
def test_patches_equal_the_store_arrays_at_their_scale(store: Path, scale: int) -> None:
    ds = PatchDataset(store, PATCH, scale=scale, sampler=GridSampler(edge="shift"))
    image, label = _level(store, f"s{scale}"), _level(store, f"labels/seg/s{scale}")
    label = label.reshape(label.shape[0], *label.shape[-3:])  # a channel of one, if any
    got = _all_patches(ds)
    assert ds.volumes.count == SHAPE[0] and ds.volumes.channels == SHAPE[1]
    assert set(got["volume"].tolist()) == {0, 1}  # time points are volumes
    for b, (v, o) in enumerate(zip(got["volume"], got["origin"], strict=True)):
        box = tuple(slice(a, a + p) for a, p in zip(o.tolist(), PATCH, strict=True))
        np.testing.assert_array_equal(got["image"][b], image[(int(v), slice(None), *box)])
        np.testing.assert_array_equal(got["label"][b], label[(int(v), *box)])
    spacing = [SPACING[a] * (1 if a == "z" or scale == 0 else 2) for a in "zyx"]
    np.testing.assert_allclose(got["spacing"], np.tile(spacing, (len(got["volume"]), 1)))
    shift = np.array([0.0, 0.25, 0.25]) * scale  # ome-zarr-py centres coarser voxels
    np.testing.assert_allclose(got["origin_physical"], got["origin"] * spacing + shift)


def test_physical_patch_size_and_items_through_pickle(store: Path) -> None:
    ds = PatchDataset(store, (16.0, 4.0, 4.0), units="physical", fields=["image"])
    assert ds.patch_size == PATCH and ds.fields == ("image",)
    again = pickle.loads(pickle.dumps(ds))
    keys = ds.sampler.keys()[:3]
    a, b = ds.read_patches(keys), again.read_patches(keys)
    np.testing.assert_array_equal(a["image"], b["image"])
    assert "label" not in a
    with pytest.raises(ValueError, match="units='physical'"):
        PatchDataset(store, (16.0, 4.5, 4.0))


@pytest.mark.parametrize("axes", ["czyx", "yx"])
def test_an_image_without_time_points_is_one_volume(tmp_path: Path, axes: str) -> None:
    rng = np.random.default_rng(8)
    shape = {"czyx": (3, 12, 16, 16), "yx": (40, 24)}[axes]
    image = rng.integers(0, 255, shape, dtype=np.uint8)
    label = (image[:1] > 128 if axes == "czyx" else image > 128).astype(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(tmp_path / "one.ome.zarr"), mode="w")
        ome_writer.write_image(image, root, axes=axes, scale_factors=[2])
        ome_writer.write_labels(label, root, name="seg", axes=axes, scale_factors=[2], scaler=None)
    size = PATCH if axes == "czyx" else (8, 8)
    ds = PatchDataset(tmp_path / "one.ome.zarr", size, sampler=GridSampler(edge="shift"))
    assert ds.volumes.count == 1 and ds.volumes.channels == (3 if axes == "czyx" else None)
    got = _all_patches(ds)
    for b, o in enumerate(got["origin"]):
        box = tuple(slice(a, a + p) for a, p in zip(o.tolist(), size, strict=True))
        np.testing.assert_array_equal(got["image"][b], image[(Ellipsis, *box)])
        np.testing.assert_array_equal(got["label"][b], label[(Ellipsis, *box)].reshape(size))


def test_several_stores_are_one_dataset(pair: list[Path]) -> None:
    one, two = pair
    ds = PatchDataset([one, two], PATCH, sampler=GridSampler(shuffle=True, seed=3))
    assert ds.volumes.count == 2 * SHAPE[0]
    got = _all_patches(ds)
    image = np.concatenate([_level(one, "s0"), _level(two, "s0")])
    for b, (v, o) in enumerate(zip(got["volume"], got["origin"], strict=True)):
        box = tuple(slice(a, a + p) for a, p in zip(o.tolist(), PATCH, strict=True))
        np.testing.assert_array_equal(got["image"][b], image[(int(v), slice(None), *box)])
    assert set(got["volume"].tolist()) == {0, 1, 2, 3}
    assert ds.read_stats().patches == len(got["volume"])


@pytest.mark.parametrize("pad_mode", ["constant", "edge"])
def test_several_stores_read_into_their_rows_of_one_batch(pair: list[Path], pad_mode: str) -> None:
    # a shuffled grid sticking out of the volumes: each batch mixes the stores, some of its
    # patches padded; read into a ring slot's arrays (stale values in them) or new ones
    sampler = GridSampler(stride=5, edge="pad")
    ds = PatchDataset(pair, PATCH, sampler=sampler, pad_mode=pad_mode, pad_value=3)  # type: ignore[arg-type]
    every = ds.sampler.keys()
    keys = every[np.random.default_rng(0).permutation(len(every))[:12]]
    assert set(keys[:, 0].tolist()) == {0, 1, 2, 3}  # both stores' volumes
    slot = {k: np.full((len(keys), *v.shape[1:]), 77, v.dtype)
            for k, v in ds.read_patches(keys[:1]).items() if k in ("image", "label")}  # fmt: skip
    for got in (ds.read_patches(keys), ds.read_patches(keys, out=slot)):
        for b, key in enumerate(keys):
            one = ds.read_patches(key[None])  # one store
            for name in ("image", "label", "spacing", "origin_physical", "origin"):
                np.testing.assert_array_equal(got[name][b], one[name][0])
    assert got["image"] is slot["image"] and got["label"] is slot["label"]
    assert ds.read_patches(keys[:0])["image"].shape == (0, *slot["image"].shape[1:])


def test_several_stores_in_loader_workers(pair: list[Path]) -> None:
    ds = PatchDataset(pair, PATCH, sampler=RandomPatchSampler(16, seed=7))
    want = ds.read_patches(ds.sampler.keys())  # the parent reads first: workers open their own
    loader = DataLoader(ds, sampler=ds.sampler, batch_size=4, num_workers=2, collate_fn=collate,
                        multiprocessing_context="fork", timeout=120)  # fmt: skip
    batches = list(loader)
    for name in ("image", "label", "volume", "origin_physical"):
        got = torch.cat([b[name] for b in batches]).numpy()
        np.testing.assert_array_equal(got, want[name])


def _write_mask(store: Path, mask: np.ndarray) -> None:
    """A plain array ``masks/tissue`` in the store (in its Zarr version)."""
    root = zarr.open_group(str(store), mode="a")
    root.create_array("masks/tissue", data=mask, chunks=mask.shape, overwrite=True)


def _centres_in(mask: np.ndarray, keys: np.ndarray, factor: tuple[int, ...]) -> np.ndarray:
    """Whether each key's centre voxel falls in a nonzero voxel of ``mask`` (one mask
    voxel per ``factor`` image voxels)."""
    centre = keys[:, 1:] + np.asarray(PATCH) // 2
    cell = centre // np.asarray(factor)
    return mask[tuple(cell.T)] != 0


def test_a_coarse_mask_restricts_grid_and_random_patches(store: Path) -> None:
    mask = np.zeros((4, 6, 6), np.uint8)  # 4x coarser in every axis
    mask[1:3, 2:5, 1:3] = 1
    _write_mask(store, mask)
    grid = PatchDataset(store, PATCH, mask="masks/tissue", sampler=GridSampler(stride=2))
    keys = grid.sampler.keys()
    unmasked = PatchDataset(store, PATCH, sampler=GridSampler(stride=2)).sampler.keys()
    inside = _centres_in(mask, unmasked, (4, 4, 4))
    np.testing.assert_array_equal(keys, unmasked[inside])  # exactly the grid's masked patches
    rand = PatchDataset(
        store, PATCH, mask="masks/tissue", sampler=RandomPatchSampler(200, seed=1)
    ).sampler.keys()
    assert _centres_in(mask, rand, (4, 4, 4)).all()
    assert len({tuple(k[1:] // 4) for k in rand}) > 3  # spread over the mask, not one voxel


def test_a_label_image_level_as_mask_and_balanced_sampling(store: Path) -> None:
    # the label image's level s1 (2x coarser in y, x) as the mask: label 1 or 2 only
    seg = _level(store, "labels/seg/s1")
    seg = seg.reshape(seg.shape[0], *seg.shape[-3:])
    ds = PatchDataset(store, PATCH, mask="labels/seg/s1", sampler=RandomPatchSampler(100, seed=2))
    keys = ds.sampler.keys()
    centre = keys[:, 1:] + np.asarray(PATCH) // 2
    assert (seg[keys[:, 0], centre[:, 0], centre[:, 1] // 2, centre[:, 2] // 2] != 0).all()
    balanced = PatchDataset(
        store, PATCH, sampler=LabelBalancedSampler(20, foreground=1.0, classes=[2], seed=0)
    )
    got = _all_patches(balanced)
    assert all((lab == 2).any() for lab in got["label"])
    assert set(got["volume"].tolist()) == {1}  # class 2 is only in time point 1


def _edit(store: Path, group: str, change: Any) -> None:
    """Change the OME metadata of ``group`` in place (either Zarr version)."""
    v3 = store / group / "zarr.json"
    doc_path = v3 if v3.exists() else store / group / ".zattrs"
    doc = json.loads(doc_path.read_text())
    change(doc["attributes"]["ome"] if v3.exists() else doc)
    doc_path.write_text(json.dumps(doc))


def _bad_path(m: dict[str, Any]) -> None:
    m["multiscales"][0]["datasets"][1]["path"] = "s9"


def _bad_axes(m: dict[str, Any]) -> None:
    m["multiscales"][0]["axes"] = m["multiscales"][0]["axes"][1:]


def _bad_scale(m: dict[str, Any]) -> None:
    m["multiscales"][0]["datasets"][0]["coordinateTransformations"] = [{"type": "scale"}]


def _no_multiscales(m: dict[str, Any]) -> None:
    del m["multiscales"]


BAD = {
    "label image without multiscales": (
        "labels/seg",
        _no_multiscales,
        {},
        r"labels/seg/multiscales: expected a list",
    ),
    "dataset path not there": ("", _bad_path, {}, r"multiscales\[0\]\.datasets\[1\]\.path"),
    "axes not the dims": ("", _bad_axes, {}, r"multiscales\[0\]\.axes: expected one axis"),
    "transform without values": ("", _bad_scale, {}, "coordinateTransformations"),
    "scale that does not exist": (None, None, {"scale": 5}, r"expected a scale in 0\.\.1"),
    "patch larger than the volume": (None, None, {"scale": 1, "size": (8, 16, 8)}, "at least"),
    "unknown label image": (None, None, {"label": "cells"}, "labels/labels: expected"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_inconsistent_metadata_is_a_typed_error(tmp_path: Path, pristine: Path, case: str) -> None:
    group, change, given, match = BAD[case]
    kwargs = dict(given)
    store = Path(shutil.copytree(pristine, tmp_path / pristine.name))
    if change is not None:
        _edit(store, group, change)
    size = kwargs.pop("size", PATCH)
    with pytest.raises(FormatError, match=match) as err:
        PatchDataset(store, size, **kwargs)
    assert "bad.ome.zarr" in str(err.value)


def test_a_label_image_of_another_shape_and_a_mask_larger_than_the_image(tmp_path: Path) -> None:
    store = write_ome(tmp_path / "bad.ome.zarr", "0.4", label_channel=False)
    seg = zarr.open_group(str(store / "labels/seg"), mode="a")
    seg.create_array(
        "s0", data=np.zeros((2, 16, 24, 20), "u1"), chunks=(1, 8, 8, 8), overwrite=True
    )
    with pytest.raises(FormatError, match=r"labels/seg/multiscales\[0\]\.datasets.*s0") as err:
        PatchDataset(store, PATCH)
    assert "bad.ome.zarr" in str(err.value)
    _write_mask(store, np.ones((4, 30, 6), np.uint8))
    with pytest.raises(FormatError, match=r"mask 'masks/tissue'.*no larger than the image"):
        PatchDataset(store, PATCH, fields=["image"], mask="masks/tissue")


def test_footprints_and_masked_draws_match_brute_force() -> None:
    # a mask 3x coarser, offset as ome-zarr-py places levels, on an axis of 10 voxels
    edges = footprint_edges(10, 1.0, 0.0, 4, 3.0, 1.0)
    owner = [int(np.floor((i - 1.0) / 3.0 + 0.5)) for i in range(10)]  # centre -> mask voxel
    assert [owner.index(j) if j in owner else None for j in range(4)] == edges[:-1].tolist()
    values = np.array([[0, 1, 0, 1], [1, 0, 0, 0]], bool)
    vm = VolumeMask(values, (footprint_edges(6, 1.0, 0.0, 2, 3.0, 1.0), edges))
    mask = PatchMask((vm,))
    origins = np.array([(0, a, b) for a in range(6 - 3 + 1) for b in range(10 - 4 + 1)])
    eligible = origins[mask.eligible(origins, (3, 4), [(6, 10)])]
    drawn = mask.draw(4000, [(6, 10)], (3, 4), np.random.default_rng(0))
    assert {tuple(k) for k in drawn.tolist()} == {tuple(k) for k in eligible.tolist()}
    _, counts = np.unique(drawn, axis=0, return_counts=True)
    assert counts.min() > 0.5 * counts.mean()  # uniform among the eligible origins


@pytest.mark.parametrize(
    "versions",
    [
        pytest.param(("0.5",), id="0.5"),
        pytest.param(("0.5", "0.4"), id="both", marks=pytest.mark.slow),
    ],
)
def test_ome_zarr_through_an_s3_endpoint(
    tmp_path: Path, s3_server: S3Server, versions: tuple[str, ...]
) -> None:
    require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")
    # few objects to upload: one chunk per time point and channel
    local = [
        write_ome(
            tmp_path / f"{v}.ome.zarr", v, seed=4, label_channel=v == "0.5", chunks=(16, 24, 24)
        )
        for v in versions
    ]
    urls = [s3_server.upload_dir(p, "ome", p.name) for p in local]
    remote = PatchDataset(urls, PATCH, scale=1, storage_options=s3_server.storage_options())
    on_disk = PatchDataset(local, PATCH, scale=1)
    keys = remote.sampler.keys()
    np.testing.assert_array_equal(keys, on_disk.sampler.keys())
    got, want = remote.read_patches(keys), on_disk.read_patches(keys)
    for name in ("image", "label", "spacing", "origin_physical"):
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("version", ["0.5", "0.4"])
def test_grid_patches_of_several_chunks_equal_zarr_and_a_cut_chunk_names_the_store(
    tmp_path: Path, version: str
) -> None:
    # 8^3 grid patches of 4^3 chunks share no chunk: each is read as one box straight into
    # its row (the chunks decoded aside and copied in); every one equals zarr-python's, and a
    # chunk cut short stays a typed error naming the store
    store = write_ome(tmp_path / "a.ome.zarr", version, seed=3, chunks=(4, 4, 4))
    ds = PatchDataset(store, PATCH, sampler=GridSampler(shuffle=True, seed=1))
    image, label = _level(store, "s0"), _level(store, "labels/seg/s0")
    label = label.reshape(label.shape[0], *label.shape[-3:])
    keys = ds.sampler.keys()
    got = ds.read_patches(keys)
    assert ds.read_stats().direct_chunks == 2 * len(keys) * 8  # image and label: all of them
    for b, (v, *o) in enumerate(keys.tolist()):
        box = tuple(slice(a, a + p) for a, p in zip(o, PATCH, strict=True))
        np.testing.assert_array_equal(got["image"][b], image[(v, slice(None), *box)])
        np.testing.assert_array_equal(got["label"][b], label[(v, *box)])
    documents = ("zarr.json", ".zarray", ".zattrs")
    chunk = max(
        (p for p in (store / "s0").rglob("*") if p.is_file() and p.name not in documents),
        key=lambda p: p.stat().st_size,
    )
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    with pytest.raises(CorruptChunkError) as info:
        PatchDataset(store, PATCH).read_patches(keys)
    assert str(store) in str(info.value)
