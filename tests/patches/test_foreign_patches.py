"""PatchDataset on volumes chunkio did not write: a user's h5py file or zarr-python v3 store,
read in place with ``fields`` naming the arrays, patches equal to the source slices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from foreign_stores import snapshot, volume_data, volumes_h5py, volumes_zarr_v3
from torch.utils.data import DataLoader

from chunkio.errors import FormatError, MissingFieldError
from chunkio.patches import (
    GridSampler,
    LabelBalancedSampler,
    LabelIndex,
    PatchDataset,
    RandomPatchSampler,
    index_label_volume,
)
from chunkio.read.batch import collate

PATCH = (4, 5, 4)


def _cases() -> dict[str, tuple[Any, Any, np.ndarray, np.ndarray | None]]:
    """Store builder, fields, and the image and label volumes they hold, by case."""
    images, labels = volume_data()
    return {
        # (N, D, H, W): axis 0 is volumes; the label array chunked unlike the image
        "h5py volumes": (
            volumes_h5py,
            {"image": "vol/image", "label": "vol/label"},
            images[:, 0],
            labels,
        ),
        # a single (D, H, W) array: one volume, named by a list of paths
        "h5py single volume": (volumes_h5py, ["vol/one"], images[:1, 0], None),
        # (N, C, D, H, W) sharded: volumes with channels
        "zarr v3 channels": (volumes_zarr_v3, ["image", "label"], images, labels),
    }


CASES = _cases()


def _reference(volume: np.ndarray, origin: np.ndarray, spatial: int) -> np.ndarray:
    """The patch at ``origin`` cut from ``volume`` with numpy, zero outside the volume."""
    pad = [(0, 0)] * (volume.ndim - spatial) + [(p, p) for p in PATCH]
    padded = np.pad(volume, pad)
    box = tuple(slice(o + p, o + 2 * p) for o, p in zip(origin.tolist(), PATCH, strict=True))
    return padded[(Ellipsis, *box)]


def _assert_patches_are_the_source(batch: dict[str, Any], image: Any, label: Any) -> None:
    for b, (v, origin) in enumerate(zip(batch["volume"], batch["origin"], strict=True)):
        want = _reference(image[int(v)], np.asarray(origin), len(PATCH))
        np.testing.assert_array_equal(np.asarray(batch["image"][b]), want)
        if label is not None:
            want = _reference(label[int(v)], np.asarray(origin), len(PATCH))
            np.testing.assert_array_equal(np.asarray(batch["label"][b]), want)


@pytest.mark.parametrize("case", list(CASES))
def test_grid_patches_equal_the_source_slices(tmp_path: Path, case: str) -> None:
    build, fields, image, label = CASES[case]
    path = build(tmp_path)
    before = snapshot(tmp_path)
    ds = PatchDataset(path, PATCH, fields=fields, sampler=GridSampler(edge="pad"))
    assert ds.fields == (("image",) if label is None else ("image", "label"))
    assert ds.volumes.count == len(image) and ds.volumes.shapes[0] == image.shape[-3:]
    keys = list(ds.sampler)
    assert len(keys) == len(image) * 3 * 3 * 3  # (10, 12, 9) in patches of (4, 5, 4), padded
    got = ds.read_patches(keys)
    assert got["image"].dtype == image.dtype
    _assert_patches_are_the_source(got, image, label)
    assert snapshot(tmp_path) == before  # nothing written: no attribute, index or sidecar


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("case", "context"),
    [
        ("h5py volumes", "fork"),
        ("h5py single volume", "forkserver"),
        ("zarr v3 channels", "forkserver"),
        # under ``-m slow``: forkserver unpickles the patch dataset the same way, for a fraction
        # of the cost; PatchDataset keeps a default spawn case in test_patches.py
        pytest.param("zarr v3 channels", "spawn", marks=pytest.mark.slow),
    ],
)
def test_workers_give_the_source_patches(tmp_path: Path, case: str, context: str) -> None:
    build, fields, image, label = CASES[case]
    path = build(tmp_path)
    ds = PatchDataset(path, PATCH, fields=fields, sampler=RandomPatchSampler(40, seed=3))
    ds.read_patches(list(ds.sampler)[:3])  # the parent reads first: workers open their own
    # one spawn or forkserver worker unpickles and opens the store as two would, at half the
    # cost (each imports torch); fork, cheap, shares the work between two
    workers = 2 if context == "fork" else 1
    loader = DataLoader(
        ds,
        sampler=ds.sampler,
        batch_size=8,
        num_workers=workers,
        collate_fn=collate,
        multiprocessing_context=context,
        timeout=120,
    )
    batches = list(loader)
    got = {k: torch.cat([b[k] for b in batches]).numpy() for k in batches[0]}
    assert len(got["volume"]) == 40
    _assert_patches_are_the_source(got, image, label)


def test_volumes_that_do_not_fit_are_typed_errors_naming_the_arrays(tmp_path: Path) -> None:
    path = volumes_h5py(tmp_path)
    with pytest.raises(FormatError, match=r"must name its volume arrays.*vol/image \(3, 10, 12"):
        PatchDataset(path, PATCH)
    with pytest.raises(MissingFieldError, match=r"no array 'vol/nope'"):
        PatchDataset(path, PATCH, fields={"image": "vol/nope"})
    with pytest.raises(FormatError, match=r"'vol/image' of shape \(3, 10, 12, 9\) holds no 1-D"):
        PatchDataset(path, (4,), fields=["vol/image"])
    with pytest.raises(FormatError, match=r"label array 'vol/one' has shape \(10, 12, 9\)"):
        PatchDataset(path, PATCH, fields={"image": "vol/image", "label": "vol/one"})
    with pytest.raises(FormatError, match=r"an 'image' array and optionally a 'label'"):
        PatchDataset(path, PATCH, fields={"img": "vol/image"})


@pytest.mark.parametrize("case", ["h5py volumes", "zarr v3 channels"])
def test_label_balanced_patches_index_the_labels_in_place(tmp_path: Path, case: str) -> None:
    build, fields, image, label = CASES[case]
    path = build(tmp_path)
    before = snapshot(tmp_path)
    sampler = LabelBalancedSampler(60, foreground=1.0, classes=[3], seed=2)
    ds = PatchDataset(path, PATCH, fields=fields, sampler=sampler)
    chunks = ds.volumes.chunks
    want = LabelIndex.concat([index_label_volume(v, i, chunks) for i, v in enumerate(label)], 3)
    assert ds.label_index is not None
    np.testing.assert_array_equal(ds.label_index.rows, want.rows)
    got = ds.read_patches(list(ds.sampler))
    _assert_patches_are_the_source(got, image, label)
    assert snapshot(tmp_path) == before  # the index is made in memory, never stored
