"""2-D images of any size (whole-slide images) as 2-D patches: OME-Zarr ``yx``, ``cyx`` and
``tcyx`` images (NGFF 0.4 and 0.5), a user's own 2-D arrays (``axes="cyx"``), tissue masks at
a lower scale, label-balanced sampling from a 2-D label image, grid + stitch back to the
full-size image, and the bad inputs. Every patch is checked against zarr-python's (or
h5py's) own slice of the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from torch.utils.data import DataLoader

from chunkio import write_arrays
from chunkio.errors import FormatError
from chunkio.format.label_index import index_label_volume
from chunkio.patches import (
    GridSampler,
    LabelBalancedSampler,
    PatchDataset,
    RandomPatchSampler,
    stitch,
)
from chunkio.read.batch import collate

#: a small slide: 300 x 500 pixels in chunks of 64, patches of 64 x 48
SIDE = (300, 500)
PATCH = (64, 48)
AXES = {"yx": (), "cyx": (3,), "tcyx": (2, 3)}


def _slide(axes: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pixels and labels (the image's axes without ``c``): a tissue label and a rare class."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 255, (*AXES[axes], *SIDE), dtype=np.uint8)
    label = np.zeros((2, *SIDE) if axes.startswith("t") else SIDE, np.uint8)
    label[..., 40:260, 60:430] = 1
    label[..., 200:230, 300:340] = 2
    return image, label


def _multiscale(axes: str, version: str, levels: int) -> dict[str, Any]:
    """NGFF metadata of ``levels`` levels ``s0, s1, ...``, each 2x coarser in space, centred
    as ome-zarr-py places them."""
    kinds = {"t": "time", "c": "channel"}
    meta: dict[str, Any] = {
        "axes": [{"name": a, "type": kinds.get(a, "space")} for a in axes],
        "datasets": [
            {
                "path": f"s{k}",
                "coordinateTransformations": [
                    {"type": "scale", "scale": [1.0 if a in "tc" else 2.0**k for a in axes]},
                    {
                        "type": "translation",
                        "translation": [0.0 if a in "tc" else (2.0**k - 1) / 2 for a in axes],
                    },
                ],
            }
            for k in range(levels)
        ],
    }
    return {
        "version": version,
        "multiscales": [meta if version == "0.5" else {**meta, "version": version}],
    }


def _ome_attrs(group: Any, version: str, meta: dict[str, Any]) -> None:
    """NGFF 0.5 under ``"ome"``, 0.4 at the top level of the attributes."""
    group.attrs.update({"ome": meta} if version == "0.5" else meta)


def write_slide(path: Path, axes: str, version: str) -> Path:
    """An OME-Zarr slide (0.4 on Zarr v2, 0.5 on v3) by zarr-python: levels s0, s1, s2 and a
    label image ``tissue`` (s0, s1), chunks of 64 in space."""
    image, label = _slide(axes)
    root = zarr.open_group(str(path), mode="w", zarr_format=3 if version == "0.5" else 2)
    _ome_attrs(root, version, _multiscale(axes, version, 3))
    lead = (1,) * (len(axes) - 2)
    for k in range(3):
        level = image[..., :: 2**k, :: 2**k]
        root.create_array(f"s{k}", data=level, chunks=(*lead, 64, 64))
    labels = root.create_group("labels")
    _ome_attrs(
        labels,
        version,
        {"version": version, "labels": ["tissue"]} if version == "0.5" else {"labels": ["tissue"]},
    )
    seg = labels.create_group("tissue")
    _ome_attrs(seg, version, {**_multiscale(axes.replace("c", ""), version, 2), "image-label": {}})
    for k in range(2):
        seg.create_array(f"s{k}", data=label[..., :: 2**k, :: 2**k], chunks=(*lead[1:], 64, 64))
    return path


@pytest.fixture(scope="module", params=[("yx", "0.4"), ("cyx", "0.5"), ("tcyx", "0.4")])
def slide(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    axes, version = request.param
    path = write_slide(tmp_path_factory.mktemp(f"{axes}{version}") / "s.ome.zarr", axes, version)
    return path, axes


def _zarr(path: Path) -> Any:
    """The reference reader: zarr-python's array (sliced per patch, never whole)."""
    return zarr.open_array(str(path), mode="r")


def _check(got: dict[str, Any], image: Any, label: Any, timed: bool) -> None:
    """Every patch of ``got`` equals the store's slice at its origin (``timed``: axis 0 of
    the arrays is the volume)."""
    for b, (v, origin) in enumerate(zip(got["volume"], got["origin"], strict=True)):
        box = tuple(
            slice(o, o + p) for o, p in zip(np.asarray(origin).tolist(), PATCH, strict=True)
        )
        at = (int(v),) if timed else ()
        np.testing.assert_array_equal(np.asarray(got["image"][b]), image[(*at, Ellipsis, *box)])
        if label is not None:
            np.testing.assert_array_equal(np.asarray(got["label"][b]), label[(*at, *box)])


def test_2d_ome_zarr_patches_equal_the_store(slide: tuple[Path, str]) -> None:
    path, axes = slide
    image, label = _zarr(path / "s0"), _zarr(path / "labels/tissue/s0")
    grid = PatchDataset(path, PATCH, sampler=GridSampler(edge="pad"))
    assert grid.volumes.count == (2 if axes == "tcyx" else 1)
    assert grid.volumes.channels == (3 if "c" in axes else None)
    got = grid.read_patches(grid.sampler.keys())
    # (C, H, W) per patch with channels, (H, W) without, as (C, D, H, W) / (D, H, W) in 3-D
    assert got["image"].shape[1:] == ((3,) if "c" in axes else ()) + PATCH
    assert got["label"].shape[1:] == PATCH and len(got["image"]) == len(grid.sampler)
    padded = np.zeros((*image.shape[:-2], 320, 528), image.dtype)  # edge="pad": zeros past it
    padded[..., :300, :500] = image[...]
    padded_label = np.zeros((*label.shape[:-2], 320, 528), label.dtype)
    padded_label[..., :300, :500] = label[...]
    _check(got, padded, padded_label, axes == "tcyx")
    rand = PatchDataset(path, PATCH, sampler=RandomPatchSampler(24, seed=1))
    _check(rand.read_patches(rand.sampler.keys()), image, label, axes == "tcyx")
    loader = DataLoader(rand, sampler=rand.sampler, batch_size=8, collate_fn=collate)
    batch = next(iter(loader))  # what a 2-D CNN takes: (B, C, H, W) with channels
    assert tuple(batch["image"].shape) == (8, *((3,) if "c" in axes else ()), *PATCH)
    assert tuple(batch["spacing"].shape) == (8, 2)


def test_a_coarse_level_and_a_tissue_mask_at_a_lower_scale(slide: tuple[Path, str]) -> None:
    path, axes = slide
    mask = np.zeros((30, 50), np.uint8)  # 1/10 of the slide
    mask[5:20, 10:35] = 1
    root = zarr.open_group(str(path), mode="a")
    root.create_array("masks/tissue", data=mask, chunks=mask.shape, overwrite=True)
    at_s1 = PatchDataset(path, (32, 32), scale=1, mask="masks/tissue", fields=["image"],
                         sampler=GridSampler(stride=8))  # fmt: skip
    keys = at_s1.sampler.keys()
    assert at_s1.volumes.shapes[0] == (150, 250)
    everywhere = PatchDataset(path, (32, 32), scale=1, fields=["image"],
                              sampler=GridSampler(stride=8)).sampler.keys()  # fmt: skip
    centre = everywhere[:, 1:] + 16  # at s1, a mask voxel covers 5 x 5 pixels
    np.testing.assert_array_equal(keys, everywhere[mask[centre[:, 0] // 5, centre[:, 1] // 5] != 0])
    s1 = _zarr(path / "s1")
    got = at_s1.read_patches(keys[:10])
    for b, (v, (y, x)) in enumerate(zip(got["volume"], got["origin"].tolist(), strict=True)):
        at = (int(v),) if axes == "tcyx" else ()
        np.testing.assert_array_equal(
            got["image"][b], s1[(*at, Ellipsis, slice(y, y + 32), slice(x, x + 32))]
        )
    rand = PatchDataset(path, PATCH, mask="masks/tissue", sampler=RandomPatchSampler(300, seed=4))
    centre = rand.sampler.keys()[:, 1:] + np.asarray(PATCH) // 2
    cells = centre // 10
    assert (mask[cells[:, 0], cells[:, 1]] != 0).all()
    assert len({tuple(c) for c in cells.tolist()}) > 50  # spread over the mask


def test_label_balanced_patches_from_a_2d_label_image(slide: tuple[Path, str]) -> None:
    path, axes = slide
    ds = PatchDataset(
        path, PATCH, sampler=LabelBalancedSampler(30, foreground=1.0, classes=[2], seed=0)
    )
    label = np.asarray(_zarr(path / "labels/tissue/s0")[...]).reshape(-1, *SIDE)
    # read a row of chunks at a time, the index is the whole volume's
    want = [index_label_volume(lab, v, ds.volumes.chunks) for v, lab in enumerate(label)]
    assert ds.label_index is not None
    np.testing.assert_array_equal(ds.label_index.rows, np.concatenate([w[0] for w in want]))
    np.testing.assert_array_equal(ds.label_index.points, np.concatenate([w[1] for w in want]))
    got = ds.read_patches(ds.sampler.keys())
    assert all((lab == 2).any() for lab in got["label"])
    _check(got, _zarr(path / "s0"), _zarr(path / "labels/tissue/s0"), axes == "tcyx")


def _user_stores(tmp_path: Path) -> tuple[np.ndarray, np.ndarray, list[Path]]:
    """One RGB slide (3, H, W) with its labels (H, W) in a zarr v3 store and an h5py file."""
    image, label = _slide("cyx", seed=5)
    root = zarr.open_group(str(tmp_path / "user.zarr"), mode="w")
    root.create_array("slide", data=image, chunks=(3, 64, 64))
    root.create_array("seg", data=label, chunks=(128, 128))
    root.create_array("thumb_mask", data=(label[::10, ::10] == 1).astype(np.uint8))
    with h5py.File(tmp_path / "user.h5", "w") as f:
        f.create_dataset("slide", data=image, chunks=(3, 64, 64), compression="gzip")
        f.create_dataset("seg", data=label, chunks=(64, 64))
    return image, label, [tmp_path / "user.zarr", tmp_path / "user.h5"]


def test_a_users_own_2d_arrays_by_named_axes(tmp_path: Path) -> None:
    image, label, stores = _user_stores(tmp_path)
    for store in stores:
        ds = PatchDataset(store, PATCH, fields={"image": "slide", "label": "seg"}, axes="cyx",
                          sampler=GridSampler(edge="shift"))  # fmt: skip
        assert (ds.volumes.count, ds.volumes.channels) == (1, 3)
        got = ds.read_patches(ds.sampler.keys())
        assert got["image"].shape[1:] == (3, *PATCH)
        _check(got, image, label, timed=False)
    # without axes, one dimension more than the patch is a volume axis: three gray images
    gray = PatchDataset(stores[0], PATCH, fields=["slide"])
    assert (gray.volumes.count, gray.volumes.channels) == (3, None)
    one = PatchDataset(stores[0], PATCH, fields=["seg"], axes="yx", sampler=RandomPatchSampler(9))
    _check(one.read_patches(one.sampler.keys()), label, None, timed=False)


def test_masks_as_arrays_and_balanced_sampling_on_a_users_slide(tmp_path: Path) -> None:
    _, label, stores = _user_stores(tmp_path)
    fields = {"image": "slide", "label": "seg"}
    thumb = (label[::10, ::10] == 1).astype(np.uint8)  # a mask at 1/10, as a thumbnail gives
    for mask in (thumb, "thumb_mask"):
        ds = PatchDataset(stores[0], PATCH, fields=fields, axes="cyx", mask=mask,
                          sampler=RandomPatchSampler(200, seed=2))  # fmt: skip
        centre = ds.sampler.keys()[:, 1:] + np.asarray(PATCH) // 2
        assert (thumb[centre[:, 0] // 10, centre[:, 1] // 10] == 1).all()
    sampler = LabelBalancedSampler(20, foreground=1.0, classes=[2])
    balanced = PatchDataset(
        stores[1], PATCH, fields=fields, axes="cyx", mask=thumb, sampler=sampler
    )
    got = balanced.read_patches(balanced.sampler.keys())
    assert all((lab == 2).any() for lab in got["label"])
    with h5py.File(stores[1], "r") as f:  # h5py's own slices, the reference here
        _check(got, f["slide"], f["seg"], timed=False)


@pytest.mark.parametrize("dst", ["zarr array", "dataset"])
def test_grid_and_stitch_reproduce_the_slide(tmp_path: Path, dst: str) -> None:
    image, _, stores = _user_stores(tmp_path)
    ds = PatchDataset(stores[0], PATCH, fields=["slide"], axes="cyx",
                      sampler=GridSampler(overlap=(16, 8), edge="shift"))  # fmt: skip
    keys = ds.sampler.keys()

    def identity() -> Any:  # an identity "model": each patch's prediction is the patch
        for i in range(0, len(keys), 16):
            got = ds.read_patches(keys[i : i + 16])
            yield got["volume"], got["origin"], got["image"]

    if dst == "zarr array":  # on disk, chunk by chunk: the slide never whole in memory
        out = zarr.open_array(str(tmp_path / "pred.zarr"), mode="w", shape=(1, 3, *SIDE),
                              chunks=(1, 3, 128, 128), dtype="u1")  # fmt: skip
        stitch(identity(), out, ds.sampler)
        np.testing.assert_array_equal(_zarr(tmp_path / "pred.zarr")[0], image)
    else:  # a chunkio 2-D volume dataset, read back as patches
        stitch(identity(), tmp_path / "pred.zarr", ds.sampler, dtype=np.uint8)
        back = PatchDataset(tmp_path / "pred.zarr", PATCH, sampler=RandomPatchSampler(10))
        _check(back.read_patches(back.sampler.keys()), image, None, timed=False)


BAD_USER = {
    "axes not the dims": (
        {"fields": ["slide"], "axes": "tcyx"},
        r"user\.zarr: array 'slide' of shape \(3, 300, 500\): expected one dimension per axis "
        "of axes='tcyx'",
    ),
    "label not the image": (
        {"fields": ["seg", "slide"], "axes": "yx"},
        r"user\.zarr: label array 'slide'.*expected \(300, 500\)",
    ),
    "mask with channels": (
        {"fields": ["slide"], "axes": "cyx", "mask": "slide"},
        r"user\.zarr: mask 'slide' of shape \(3, 300, 500\): expected 2 axes",
    ),
    "mask not there": (
        {"fields": ["slide"], "axes": "cyx", "mask": "nope"},
        r"user\.zarr: mask 'nope': expected an array of the store",
    ),
}


def test_bad_2d_inputs_are_typed_errors(tmp_path: Path) -> None:
    path = write_slide(tmp_path / "bad.ome.zarr", "cyx", "0.5")
    at = r"bad\.ome\.zarr: "
    small = r"multiscales\[0\]\.datasets \(s2\): expected a volume of at least the patch size"
    with pytest.raises(FormatError, match=at + small + r" \(80, 48\).*got shape \(75, 125\)"):
        PatchDataset(path, (80, 48), scale=2, fields=["image"])
    big = np.ones((301, 50), np.uint8)  # taller than the slide
    zarr.open_group(str(path), mode="a").create_array("masks/big", data=big)
    with pytest.raises(FormatError, match=at + "mask 'masks/big'.*no larger than the image"):
        PatchDataset(path, PATCH, mask="masks/big")
    with pytest.raises(FormatError, match=at + r"mask 'array' of shape \(301, 50\): expected 2 "
                       r"axes.*\(300, 500\)"):  # fmt: skip
        PatchDataset(path, PATCH, mask=big)
    with pytest.raises(FormatError, match=at + r"multiscales\[0\]\.axes: expected axes='tcyx'"):
        PatchDataset(path, PATCH, axes="tcyx")
    _, _, (user, _) = _user_stores(tmp_path)
    for kwargs, match in BAD_USER.values():
        with pytest.raises(FormatError, match=match):
            PatchDataset(user, PATCH, **kwargs)
    with pytest.raises(ValueError, match="channels after the space axes are not read in place"):
        PatchDataset(user, PATCH, fields=["slide"], axes="yxc")
    with pytest.raises(ValueError, match="then 2 space axes"):
        PatchDataset(user, PATCH, fields=["slide"], axes="zyx")
    native = tmp_path / "own.zarr"
    write_arrays(str(native), {"x": np.zeros((4, 8, 8), "u1")}, shuffle=False)
    with pytest.raises(
        FormatError, match=r"own\.zarr: axes='yx' names the axes of a store chunkio"
    ):
        PatchDataset(native, (4, 4), fields=["x"], axes="yx")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_16k_slide_is_read_in_bounded_memory(tmp_path: Path) -> None:
    # benchmarks/bench_wsi.py writes a 16384^2 x 3 slide (805 MB) and its label image chunk
    # by chunk, then in fresh processes builds masked-random and label-balanced datasets and
    # reads 100 patches each, every one compared with zarr-python's slice (--check)
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "benchmarks.bench_wsi", "--side", "16384", "--check", "--out",
           str(out), "--measures", "random", "balanced", "--dir", str(tmp_path)]  # fmt: skip
    subprocess.run(cmd, cwd=root, check=True, timeout=1100, capture_output=True)
    rows = json.loads(out.read_text())
    assert [r["measure"] for r in rows] == ["random", "balanced"]
    for row in rows:
        assert row["side"] == 16384 and row["checked"] == 100
        # neither the slide nor its label image (268 MB) is ever whole in memory
        assert row["peak_rss_mb"] - row["rss_after_imports_mb"] < 256, row
    assert not list(tmp_path.glob("bench-wsi-*"))  # the slide is deleted
