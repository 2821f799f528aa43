"""PatchDataset, patch samplers and stitching on converted volume datasets."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import torch
from conftest import zarr_chunk_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from resume_harness import assert_resume_equals_uninterrupted
from torch.utils.data import DataLoader

from chunkio import Execution, Output
from chunkio.backends import open_reader
from chunkio.backends._memory import delete_memory_store
from chunkio.backends.zarr.backend import ZarrReader
from chunkio.convert.volumes import convert_volumes
from chunkio.errors import CorruptChunkError, FormatError, MissingChunkError
from chunkio.patches import (
    GridSampler,
    LabelBalancedSampler,
    PatchDataset,
    RandomPatchSampler,
    chunk_boxes,
    grid_origins,
    plan_patch_reads,
)
from chunkio.patches.stitching import stitch
from chunkio.read.batch import collate
from converters import nifti_folder

_names = itertools.count()


def make_volumes(
    folder: str | Path,
    shapes: list[tuple[int, int, int]],
    *,
    dst: str | None = None,
    chunks: tuple[int, int, int] = (4, 4, 4),
    labels: bool = True,
    seed: int = 0,
) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """Random int16 volumes (and sparse labels) converted to ``dst`` (default: memory)."""
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 30000, s).astype(np.int16) for s in shapes]
    labs = []
    img_files, lab_files = [], []
    for i, (shape, image) in enumerate(zip(shapes, images, strict=True)):
        lab = np.zeros(shape, np.uint8)
        lab[tuple(slice(n // 3, n // 3 + 2) for n in shape)] = 1
        lab[tuple(n - 1 for n in shape)] = 2
        labs.append(lab)
        img_files.append(os.path.join(folder, f"img{i}.npy"))
        lab_files.append(os.path.join(folder, f"lab{i}.npy"))
        np.save(img_files[-1], image), np.save(lab_files[-1], lab)
    dst = dst or f"memory://patches-{next(_names)}"
    convert_volumes(
        img_files,
        dst,
        labels=lab_files if labels else None,
        output=Output(chunks=chunks),
        execution=Execution(workers=1, progress=False),
    )
    return dst, images, labs


def reference(volume: np.ndarray, origin: Any, size: Any, mode: str, value: int = 0) -> np.ndarray:
    """The patch by NumPy: pad the whole volume by the patch size, then slice."""
    pad = [(p, p) for p in size]
    padded = (
        np.pad(volume, pad, mode="constant", constant_values=value)
        if mode == "constant"
        else np.pad(volume, pad, mode="edge")
    )
    return padded[tuple(slice(o + p, o + 2 * p) for o, p in zip(origin, size, strict=True))]


# -- reads equal NumPy slices -----------------------------------------------------------------

axis = st.tuples(st.integers(1, 11), st.integers(1, 5), st.integers(1, 7), st.integers(1, 6))


grids = given(
    axes=st.lists(axis, min_size=3, max_size=3),
    two_shapes=st.booleans(),
    edge=st.sampled_from(["shift", "pad"]),
    pad_mode=st.sampled_from(["constant", "edge"]),
    seed=st.integers(0, 10),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@grids
def test_grid_patches_equal_numpy_slices(axes, two_shapes, edge, pad_mode, seed):
    _assert_grid_patches_equal_numpy_slices(axes, two_shapes, edge, pad_mode, seed)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@grids
def test_grid_patches_equal_numpy_slices_on_many_grids(axes, two_shapes, edge, pad_mode, seed):
    _assert_grid_patches_equal_numpy_slices(axes, two_shapes, edge, pad_mode, seed)


def _assert_grid_patches_equal_numpy_slices(axes, two_shapes, edge, pad_mode, seed):
    shape = tuple(a[0] for a in axes)
    chunks = tuple(a[1] for a in axes)
    size = tuple(a[2] for a in axes)
    stride = tuple(min(a[3], a[2]) for a in axes)
    shapes = [shape, tuple(max(1, n - 1) for n in shape) if two_shapes else shape]
    with tempfile.TemporaryDirectory() as tmp:
        path, images, labels = make_volumes(tmp, shapes, chunks=chunks, seed=seed)
    try:
        ds = PatchDataset(
            path,
            size,
            sampler=GridSampler(stride=stride, edge=edge),
            pad_mode=pad_mode,
            pad_value=-7,
            label_pad_value=9,
        )
        keys = list(ds.sampler)
        order = np.random.default_rng(seed).permutation(len(keys))[: 2 * 8]
        batch = [keys[i] for i in order] + [keys[order[0]]]  # any order, a duplicate
        got = ds.read_patches(batch)
        for j, (v, *origin) in enumerate(batch):
            want = reference(images[v], origin, size, pad_mode, -7)
            np.testing.assert_array_equal(got["image"][j], want)
            np.testing.assert_array_equal(
                got["label"][j], reference(labels[v], origin, size, pad_mode, 9)
            )
            assert got["volume"][j] == v and got["origin"][j].tolist() == origin
        plan = plan_patch_reads(batch, size, ds.volumes)
        assert ds.read_stats().chunks_read == 2 * len(plan.chunks)  # each chunk once per field
    finally:
        delete_memory_store(path)


@given(st.sets(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)), min_size=1))
def test_chunk_boxes_cover_the_chunks_exactly(chunks):
    boxes = chunk_boxes(sorted(chunks))
    covered = [c for lo, hi in boxes for c in itertools.product(*map(range, lo, hi))]
    assert sorted(covered) == sorted(chunks)  # every chunk once, nothing extra
    assert len(boxes) <= len(chunks)


def test_overlapping_patches_decode_each_chunk_once(tmp_path):
    path, images, _ = make_volumes(tmp_path, [(8, 8, 8)], chunks=(4, 4, 4))
    ds = PatchDataset(path, (4, 4, 4), fields=["image"])
    got = ds.read_patches([(0, 1, 1, 1), (0, 2, 2, 2), (0, 3, 3, 3), (0, 1, 1, 1)])
    stats = ds.read_stats()
    assert stats.chunks_read == 8 and stats.bytes_decoded == 8 * 4**3 * 2
    # 8 chunks decoded for 4 patches of one chunk's size; patch by patch it would be 32
    assert stats.read_amplification == pytest.approx(2.0)
    np.testing.assert_array_equal(got["image"][1], images[0][2:6, 2:6, 2:6])


def test_chunk_cache_serves_the_next_batch(tmp_path):
    path, _, _ = make_volumes(tmp_path, [(8, 8, 8)], chunks=(4, 4, 4))
    ds = PatchDataset(path, (4, 4, 4), fields=["image"], cache_bytes=1 << 20)
    ds.read_patches([(0, 0, 0, 0)])
    ds.read_patches([(0, 0, 0, 2)])
    assert ds.read_stats().chunks_read == 2 and ds.read_stats().cache_hits == 1


# -- grids ------------------------------------------------------------------------------------


@given(
    st.integers(1, 60), st.integers(1, 16), st.integers(1, 16), st.sampled_from(["shift", "pad"])
)
def test_grid_covers_every_voxel_with_the_fewest_patches(length, patch, stride, edge):
    stride = min(stride, patch)  # larger strides leave gaps; GridSampler refuses them
    origins = grid_origins(length, patch, stride, edge)
    covered = np.zeros(length, bool)
    for o in origins.tolist():
        covered[max(o, 0) : o + patch] = True
    assert covered.all() and origins[0] == 0 and (np.diff(origins) > 0).all()
    assert (origins < length).all()
    assert len(origins) == (1 if length <= patch else -(-(length - patch) // stride) + 1)
    if edge == "shift" and length >= patch:
        assert (origins + patch <= length).all()  # shifted inside: no padding needed
    if edge == "pad":
        assert (np.diff(origins) == stride).all()


def test_grid_sampler_covers_volumes_exactly_in_storage_order(tmp_path):
    path, _, _ = make_volumes(tmp_path, [(9, 7, 5), (4, 10, 6)])
    ds = PatchDataset(path, (4, 4, 4), sampler=GridSampler(overlap=1))
    keys = np.array(list(ds.sampler))
    assert (np.diff(keys[:, 0]) >= 0).all()  # volume by volume
    for v, shape in enumerate(ds.volumes.shapes):
        count = np.zeros(shape, int)
        for _, z, y, x in keys[keys[:, 0] == v].tolist():
            count[z : z + 4, y : y + 4, x : x + 4] += 1
        assert (count >= 1).all()
    with pytest.raises(ValueError, match=r"stride \(5, 5, 5\) must not exceed the patch size"):
        PatchDataset(path, (4, 4, 4), sampler=GridSampler(stride=5))


# -- samplers: determinism, DDP, resume, locality -----------------------------------------------


@pytest.fixture(scope="module")
def volume_set(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("vols")
    path, _, _ = make_volumes(
        tmp, [(24, 24, 24), (24, 24, 24)], chunks=(8, 8, 8), dst=str(tmp / "vols.zarr")
    )
    return path


SAMPLERS = {
    "grid": lambda **kw: GridSampler(stride=5, shuffle=True, **kw),
    "random": lambda **kw: RandomPatchSampler(60, **kw),
    "balanced": lambda **kw: LabelBalancedSampler(60, foreground=0.5, **kw),
}


@pytest.mark.parametrize("kind", SAMPLERS)
def test_samplers_are_deterministic_shardable_and_resumable(volume_set, kind):
    ds = PatchDataset(volume_set, (6, 6, 6), sampler=SAMPLERS[kind](seed=3))

    def bound(**kw: Any) -> Any:
        return SAMPLERS[kind](seed=3, **kw).bind(ds.volumes, ds.patch_size, ds.label_index)

    s = bound()
    e0, e1 = s.keys(0), s.keys(1)
    np.testing.assert_array_equal(e0, bound().keys(0))
    assert not np.array_equal(e0, e1)
    shards = [bound(rank=r, world_size=3).keys(0) for r in range(3)]
    per = -(-len(e0) // 3)
    assert all(len(sh) == per for sh in shards)
    np.testing.assert_array_equal(np.concatenate(shards), np.resize(e0, (3 * per, 4)))

    def resumable() -> Any:
        sampler = bound()
        sampler.set_epoch(2)
        return sampler

    assert_resume_equals_uninterrupted(resumable, stop=17)
    other = bound(world_size=2)
    with pytest.raises(ValueError, match="incompatible patch sampler state: world_size"):
        other.load_state_dict(s.state_dict())


def test_random_order_groups_patches_by_chunk(volume_set):
    ds = PatchDataset(volume_set, (2, 2, 2), sampler=RandomPatchSampler(2000, seed=0))
    keys = ds.sampler.keys()
    group = np.column_stack([keys[:, 0], (keys[:, 1:] + 1) // 8])
    changes = (np.diff(group, axis=0) != 0).any(axis=1).sum()
    assert changes + 1 == len(np.unique(group, axis=0))  # each group is one contiguous run


def test_label_balanced_hits_the_requested_foreground_fraction(volume_set):
    n, fraction = 400, 0.3
    ds = PatchDataset(
        volume_set, (6, 6, 6), sampler=LabelBalancedSampler(n, foreground=fraction, seed=1)
    )
    labels = ds.read_patches(ds.sampler.keys())["label"].reshape(n, -1)
    hit = (labels > 0).any(axis=1).mean()
    # a random 6^3 patch rarely holds the 2^3 blob or the corner voxel: ~fraction, not more
    assert fraction <= hit <= fraction + 0.1
    only_fg = LabelBalancedSampler(n, foreground=1.0, seed=2)
    ds = PatchDataset(volume_set, (6, 6, 6), sampler=only_fg)
    assert (ds.read_patches(ds.sampler.keys())["label"].reshape(n, -1) > 0).any(axis=1).all()
    per_class = LabelBalancedSampler(n, foreground=1.0, classes=[1, 2], seed=4)
    ds = PatchDataset(volume_set, (6, 6, 6), sampler=per_class)
    labels = ds.read_patches(ds.sampler.keys())["label"].reshape(n, -1)
    assert 0.4 <= (labels == 2).any(axis=1).mean() <= 0.6  # class 2 is one voxel per volume
    with pytest.raises(ValueError, match=r"classes \[5\] occur in no label volume"):
        PatchDataset(volume_set, (6, 6, 6), sampler=LabelBalancedSampler(classes=[5]))


# -- stitching --------------------------------------------------------------------------------


def _predict(ds: PatchDataset, *, channels: bool = False, skip: int | None = None) -> Any:
    loader = DataLoader(ds, sampler=ds.sampler, batch_size=5, collate_fn=collate)
    for i, batch in enumerate(loader):
        if i == skip:
            continue
        pred = batch["image"].float()
        yield (
            batch["volume"],
            batch["origin"],
            (torch.stack([pred, -pred], 1) if channels else pred),
        )


@pytest.mark.parametrize("edge", ["shift", "pad"])
@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_stitching_an_identity_model_reproduces_the_volumes(tmp_path, edge, suffix):
    path, images, _ = make_volumes(tmp_path, [(9, 10, 7), (5, 12, 8)], chunks=(4, 4, 4))
    ds = PatchDataset(path, (4, 5, 4), sampler=GridSampler(overlap=(2, 1, 3), edge=edge))
    out = stitch(_predict(ds, channels=True), tmp_path / f"pred{suffix}", ds.sampler, like=ds)
    pred = PatchDataset(out, (4, 4, 4), fields=["image"])
    assert pred.volumes.channels == 2 and pred.volumes.shapes == ds.volumes.shapes
    reader = open_reader(out)
    for v, image in enumerate(images):
        name, _ = pred.volumes.array("image", v)
        got = np.empty((1, 2, *image.shape), np.float32)
        reader.read_region(name, pred.volumes.region("image", v, (0, 0, 0), image.shape), got)
        np.testing.assert_array_equal(got[0, 0], image)
        np.testing.assert_array_equal(got[0, 1], -image.astype(np.float32))
    reader.close()
    arrays = [np.zeros((2, *s), np.float32) for s in ds.volumes.shapes]
    stitch(_predict(ds, channels=True), arrays, ds.sampler)
    for image, got in zip(images, arrays, strict=True):
        np.testing.assert_array_equal(got[0], image)
        np.testing.assert_array_equal(got[1], -image.astype(np.float32))


def test_stitching_streams_and_refuses_missing_patches(tmp_path):
    path, images, _ = make_volumes(tmp_path, [(8, 8, 8)] * 3, chunks=(4, 4, 4))
    ds = PatchDataset(path, (4, 4, 4), sampler=GridSampler(stride=2))
    out = np.zeros((3, 8, 8, 8), np.float32)
    seen_before_end = []

    def watch() -> Any:
        for batch in _predict(ds):
            seen_before_end.append(bool(out[0].any()))
            yield batch

    stitch(watch(), out, ds.sampler)
    np.testing.assert_array_equal(out, np.stack(images))
    assert any(seen_before_end)  # volume 0 was written while later batches were still coming
    with pytest.raises(ValueError, match=r"stitch got \d+ of \d+ patches"):
        stitch(_predict(ds, skip=3), tmp_path / "p.zarr", ds.sampler)
    # staged and published whole: a failed stitch leaves nothing, not a partial dataset
    assert not [p for p in os.listdir(tmp_path) if p.startswith((".p.zarr", "p.zarr"))]
    stitch(_predict(ds), tmp_path / "p.zarr", ds.sampler)
    before = sorted(os.listdir(tmp_path / "p.zarr"))
    with pytest.raises(ValueError, match=r"stitch got \d+ of \d+ patches"):
        stitch(_predict(ds, skip=3), tmp_path / "p.zarr", ds.sampler, overwrite=True)
    # overwrite=True keeps the old dataset until a new one is complete
    assert sorted(os.listdir(tmp_path / "p.zarr")) == before
    name, _ = PatchDataset(tmp_path / "p.zarr", (4, 4, 4)).volumes.array("image", 0)
    reader = open_reader(tmp_path / "p.zarr")
    got = np.empty((3, 8, 8, 8), np.float32)
    reader.read_region(name, (slice(0, 3), *(slice(0, 8),) * 3), got)
    reader.close()
    np.testing.assert_array_equal(got, np.stack(images))


# -- workers, pickling, errors ----------------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("context", "suffix"), [("fork", ".h5"), ("fork", ".zarr"), ("spawn", ".h5")]
)
def test_dataloader_workers_give_the_reference_patches(tmp_path, context, suffix):
    path, _, _ = make_volumes(
        tmp_path, [(12, 12, 12)] * 2, chunks=(4, 4, 4), dst=str(tmp_path / f"v{suffix}")
    )
    ds = PatchDataset(path, (5, 5, 5), sampler=LabelBalancedSampler(24, seed=5))
    keys = list(ds.sampler)
    want = ds.read_patches(keys)  # the parent reads first: workers must not share its handle
    loader = DataLoader(
        ds,
        sampler=ds.sampler,
        batch_size=4,
        # one spawned worker pickles, starts and opens its own handle as two would, at half
        # the cost (each imports torch); fork, cheap, shares the work between two
        num_workers=2 if context == "fork" else 1,
        collate_fn=collate,
        multiprocessing_context=context,
        timeout=120,
    )
    batches = list(loader)
    for field in ("image", "label", "origin"):
        got = torch.cat([b[field] for b in batches]).numpy()
        np.testing.assert_array_equal(got, want[field])


def test_pickled_dataset_holds_no_handle(tmp_path):
    path, _, _ = make_volumes(tmp_path, [(6, 6, 6)], dst=str(tmp_path / "v.h5"))
    ds = PatchDataset(path, (3, 3, 3))
    ds.read_patches([(0, 0, 0, 0)])
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._local is None and ds._local is not None
    np.testing.assert_array_equal(
        clone.read_patches([(0, 1, 1, 1)])["image"], ds.read_patches([(0, 1, 1, 1)])["image"]
    )


def test_corrupt_and_missing_chunks_are_errors_not_values(tmp_path):
    path, _, _ = make_volumes(tmp_path, [(8, 8, 8)], chunks=(4, 4, 4), dst=str(tmp_path / "v.zarr"))
    chunk = zarr_chunk_file(path, "image", 0, 1, 0, 0)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    ds = PatchDataset(path, (4, 4, 4), fields=["image"])
    with pytest.raises(CorruptChunkError, match="'image'"):
        ds.read_patches([(0, 4, 0, 0)])
    ds.read_patches([(0, 0, 0, 0)])  # other chunks still read
    zarr_chunk_file(path, "image", 0, 0, 1, 1).unlink()
    with pytest.raises(MissingChunkError, match=r"chunk \(0, 0, 1, 1\)"):
        ds.read_patches([(0, 0, 4, 4)])


def test_zarr_direct_region_reads_agree_with_zarr_python(tmp_path):
    path, images, _ = make_volumes(
        tmp_path, [(9, 10, 7)] * 2, chunks=(4, 3, 5), dst=str(tmp_path / "v.zarr")
    )
    stacked = np.stack(images)
    fast, slow = open_reader(path), ZarrReader(path, use_engine=False)  # zarr-python's reads
    rng = np.random.default_rng(0)
    for _ in range(25):
        lo = rng.integers(0, stacked.shape)
        hi = lo + 1 + rng.integers(0, np.asarray(stacked.shape) - lo)
        region = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
        a, b = np.empty(hi - lo, np.int16), np.full(hi - lo, -1, np.int16)
        fast.read_region("image", region, a)
        slow.read_region("image", region, b)
        np.testing.assert_array_equal(a, stacked[region])
        np.testing.assert_array_equal(b, stacked[region])
    chunk = zarr_chunk_file(path, "image", 1, 0, 0, 0)
    chunk.write_bytes(chunk.read_bytes()[:-1])  # truncated
    box = (slice(1, 2), slice(0, 2), slice(0, 2), slice(0, 2))
    for reader in (fast, slow):
        with pytest.raises(CorruptChunkError, match="'image'"):
            reader.read_region("image", box, np.empty((1, 2, 2, 2), np.int16))
        reader.close()


def test_bad_keys_and_datasets_are_refused(tmp_path):
    path, _, _ = make_volumes(tmp_path, [(6, 6, 6)], labels=False)
    ds = PatchDataset(path, (3, 3, 3))
    with pytest.raises(TypeError, match="patch keys"):
        ds[0]
    with pytest.raises(IndexError, match="volume out of range"):
        ds[(1, 0, 0, 0)]
    with pytest.raises(ValueError, match="lies outside volume 0"):
        ds[(0, 6, 0, 0)]
    assert set(ds[(0, 0, 0, 0)]) == {"image", "volume", "origin"}
    with pytest.raises(FormatError, match="needs the per-chunk label index"):
        PatchDataset(path, (3, 3, 3), sampler=LabelBalancedSampler())
    from chunkio import write_arrays

    plain = str(tmp_path / "plain.zarr")
    write_arrays(plain, {"x": np.zeros((4, 2))}, execution=Execution(progress=False))
    with pytest.raises(FormatError, match="not a volume dataset"):
        PatchDataset(plain, (1,))


# -- the "done when": a NIfTI folder -> one call -> label-balanced training ------------


@pytest.mark.timeout(240)
def test_nifti_folder_trains_with_label_balanced_patches(tmp_path):
    root = tmp_path / "Task09_Toy"
    (root / "imagesTr").mkdir(parents=True), (root / "labelsTr").mkdir()
    (root / "dataset.json").write_text(json.dumps({"labels": {"0": "background", "1": "organ"}}))
    rng = np.random.default_rng(0)
    for i in range(3):
        image = rng.normal(size=(20, 20, 16)).astype(np.float32)
        label = np.zeros((20, 20, 16), np.uint8)
        label[8:11, 5:9, 4:7] = 1
        nib.save(nib.Nifti1Image(image, np.eye(4)), str(root / "imagesTr" / f"t_{i}.nii.gz"))
        nib.save(nib.Nifti1Image(label, np.eye(4)), str(root / "labelsTr" / f"t_{i}.nii.gz"))

    nifti_folder.convert(
        root, tmp_path / "toy.zarr", output=Output(chunks=8), execution=Execution(progress=False)
    )
    ds = PatchDataset(
        tmp_path / "toy.zarr", (8, 8, 8), sampler=LabelBalancedSampler(32, foreground=0.5, seed=0)
    )
    loader = DataLoader(
        ds, sampler=ds.sampler, batch_size=8, num_workers=2, collate_fn=collate, timeout=120
    )
    model = torch.nn.Conv3d(1, 2, 3, padding=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fg = 0
    for batch in loader:
        logits = model(batch["image"][:, None])
        loss = torch.nn.functional.cross_entropy(logits, batch["label"].long())
        opt.zero_grad(), loss.backward(), opt.step()
        fg += int((batch["label"].flatten(1) > 0).any(1).sum())
    assert fg >= 16 and torch.isfinite(loss)
