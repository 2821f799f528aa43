"""Stores chunkio did not write, read in place: h5py files and zarr-python groups (v2, v3,
sharded), with each field chunked its own way; nothing is written to the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch.utils.data
import zarr
from foreign_stores import (
    FIELDS,
    STORES,
    N,
    data,
    fields_of,
    h5py_file,
    h5py_split,
    photos_64,
    snapshot,
    zarr_split,
    zarr_v2,
)
from resume_harness import assert_resume_equals_uninterrupted

import chunkio
from chunkio.errors import FormatError, MissingFieldError


@pytest.mark.parametrize("store", list(STORES))
def test_batches_equal_the_arrays_and_the_source_is_untouched(tmp_path: Path, store: str) -> None:
    path = STORES[store](tmp_path)
    before = snapshot(path)
    images, labels = data()
    ds = chunkio.ChunkDataset(path, fields=fields_of(store))
    idx = [299, 0, 17, 17, 150, -1]
    batch = ds.read_batch(idx)
    np.testing.assert_array_equal(batch["image"], images[idx])
    np.testing.assert_array_equal(batch["label"], labels[idx])
    x, y = ds[150]  # a tuple in the mapping's order
    np.testing.assert_array_equal(np.asarray(x), images[150])
    assert int(y) == labels[150]
    assert len(ds) == N and ds.fields == ("image", "label")
    assert snapshot(path) == before


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("store", "context"),
    [
        ("h5py", "fork"),
        ("zarr v2", "fork"),
        ("h5py", "spawn"),
        ("zarr v2", "forkserver"),
        # the other pairs under make soak: each non-fork worker imports torch afresh
        pytest.param("zarr v2", "spawn", marks=pytest.mark.slow),
        pytest.param("h5py", "forkserver", marks=pytest.mark.slow),
    ],
)
def test_make_loader_reads_every_sample_once_with_workers(
    tmp_path: Path, store: str, context: str
) -> None:
    path = STORES[store](tmp_path)
    images, labels = data()
    rows = {images[i].tobytes(): i for i in range(N)}
    # one spawned worker unpickles and opens the store as two would, at half the cost (each
    # imports torch); fork and forkserver, cheap, share the epoch between two
    loader = chunkio.make_loader(
        path,
        32,
        fields=fields_of(store),
        num_workers=1 if context == "spawn" else 2,
        seed=0,
        workers=chunkio.Workers(context=context, copy=True),
    )
    seen, distinct = [], []
    for x, y in loader:
        got = [rows[im.tobytes()] for im in np.asarray(x)]
        np.testing.assert_array_equal(np.asarray(y), labels[got])  # each image with its label
        seen += got
        distinct.append(len(np.unique(np.asarray(y))))
    assert sorted(seen) == list(range(N))
    assert np.mean(distinct) > 7  # a file sorted by label still gives mixed batches


@pytest.mark.timeout(180)
def test_a_loader_on_a_users_file_resumes_mid_epoch(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)

    def make() -> Any:
        return chunkio.make_loader(
            path, 32, fields=FIELDS, num_workers=0, seed=1, workers=chunkio.Workers(copy=True)
        )

    full, _ = assert_resume_equals_uninterrupted(make, stop=4)
    assert len(full) == -(-N // 32)


def test_a_parent_that_read_first_then_forks_workers(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    images, labels = data()
    ds = chunkio.ChunkDataset(path, fields=FIELDS)
    np.testing.assert_array_equal(ds.read_batch([1, 2])["image"], images[[1, 2]])  # parent
    loader = torch.utils.data.DataLoader(
        ds, batch_size=50, num_workers=2, multiprocessing_context="fork"
    )
    batches = list(loader)
    # the images come through the raw reads of the file's descriptor: the part fork safety
    # is about
    np.testing.assert_array_equal(np.concatenate([np.asarray(x) for x, _ in batches]), images)
    np.testing.assert_array_equal(np.concatenate([np.asarray(y) for _, y in batches]), labels)


def test_a_list_of_paths_names_fields_by_their_last_part(tmp_path: Path) -> None:
    ds = chunkio.ChunkDataset(h5py_file(tmp_path), fields=["train/images", "train/labels"])
    assert ds.fields == ("images", "labels")
    np.testing.assert_array_equal(ds.read_batch([3])["labels"], [0])


def test_each_field_keeps_its_own_chunks_and_the_order_follows_the_costly_one(
    tmp_path: Path,
) -> None:
    ds = chunkio.ChunkDataset(zarr_v2(tmp_path), fields=FIELDS)
    assert ds.samples_per_chunk == 16  # the compressed images' chunks, not the labels' 100
    assert ds.layout.field("label").rows_per_chunk == 100


def test_the_order_follows_the_bulk_of_the_data_not_the_largest_chunks(tmp_path: Path) -> None:
    """Labels in chunks of 1,000 (8 KB) beside images in chunks of 32 (6 KB): ordered by the
    labels' chunks, a batch would touch a different image chunk for nearly every sample."""
    n = 2000
    g = zarr.open_group(tmp_path / "bulk.zarr", mode="w", zarr_format=3)
    images = np.random.default_rng(0).integers(0, 255, (n, 3, 8, 8), dtype=np.uint8)
    g.create_array("images", shape=images.shape, chunks=(32, 3, 8, 8), dtype="u1")[...] = images
    g.create_array("labels", shape=(n,), chunks=(1000,), dtype="i8")[...] = np.arange(n)
    fields = {"image": "images", "label": "labels"}
    ds = chunkio.ChunkDataset(tmp_path / "bulk.zarr", fields=fields, preload_bytes=0)
    assert ds.samples_per_chunk == 32
    batch = ds.read_batch([1999, 0, 1000])
    np.testing.assert_array_equal(batch["label"], [1999, 0, 1000])
    np.testing.assert_array_equal(batch["image"], images[[1999, 0, 1000]])


def test_missing_zarr_chunks_read_as_the_fill_value(tmp_path: Path) -> None:
    images, labels = data()
    path = tmp_path / "sparse.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    a = g.create_array("x", shape=images.shape, chunks=(32, 3, 8, 8), dtype="u1", fill_value=7)
    a[:64] = images[:64]  # chunks 2.. never written
    g.create_array("y", shape=labels.shape, chunks=(N,), dtype=labels.dtype)[...] = labels
    x = chunkio.ChunkDataset(path, fields=["x", "y"]).read_batch([0, 100])["x"]
    np.testing.assert_array_equal(x[0], images[0])
    assert (x[1] == 7).all()


def test_bad_selections_are_typed_errors_naming_what_exists(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    with pytest.raises(FormatError, match=r"not a chunkio dataset.*train/images \(300, 3, 8, 8\)"):
        chunkio.ChunkDataset(path)
    with pytest.raises(MissingFieldError, match=r"no array 'train/nope'.*train/labels"):
        chunkio.ChunkDataset(path, fields={"image": "train/nope"})
    with h5py.File(path, "a") as f:
        f["short"] = np.arange(5)
        f.create_dataset("names", data=np.array(["a"] * N, dtype=h5py.string_dtype()))
    with pytest.raises(FormatError, match=r"same length along axis 0.*'short': 5"):
        chunkio.ChunkDataset(path, fields={"image": "train/images", "n": "short"})
    with pytest.raises(FormatError, match=r"'names' has dtype object"):
        chunkio.ChunkDataset(path, fields={"image": "train/images", "name": "names"})


#: another process holding the file open for writing: a bare interpreter with h5py only (a
#: spawned multiprocessing child would import this module, torch with it, for seconds)
_HOLD_OPEN_FOR_WRITING = """
import sys, h5py
with h5py.File(sys.argv[1], "a"):
    print("opened", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.timeout(60)
def test_a_file_another_process_is_writing_is_a_typed_error(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLD_OPEN_FOR_WRITING, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "opened\n"
        with pytest.raises(FormatError, match=r"user.h5: another process has the file open"):
            chunkio.ChunkDataset(path, fields=FIELDS)
    finally:
        writer.communicate("\n", timeout=30)  # the writer closes the file and exits
    assert writer.returncode == 0
    assert chunkio.ChunkDataset(path, fields=FIELDS).read_batch([0])["label"].tolist() == [0]


SPLIT = {
    "h5py": h5py_split,
    "zarr v2": lambda tmp, chunks: zarr_split(tmp, chunks, 2),
    "zarr v3": lambda tmp, chunks: zarr_split(tmp, chunks, 3),
}


@pytest.mark.parametrize("chunks", [(1, 3, 64, 64), (16, 3, 32, 32)])
@pytest.mark.parametrize("store", list(SPLIT))
def test_chunks_that_split_samples_beside_compact_and_contiguous_fields(
    tmp_path: Path, store: str, chunks: tuple[int, ...]
) -> None:
    path = SPLIT[store](tmp_path, chunks)
    images, labels = photos_64()
    fields = {"image": "images", "label": "labels", "id": "ids"}
    ds = chunkio.ChunkDataset(path, fields=fields)
    assert ds.samples_per_chunk == chunks[0]  # the images' chunks (compressed) set the order
    idx = [*np.random.default_rng(0).permutation(len(labels)).tolist(), 0, 39, 0]
    batch = ds.read_batch(idx)
    np.testing.assert_array_equal(batch["image"], images[idx])
    np.testing.assert_array_equal(batch["label"], labels[idx])
    np.testing.assert_array_equal(batch["id"], idx)
    loader = chunkio.make_loader(
        path, 16, fields=fields, num_workers=0, seed=3, workers=chunkio.Workers(copy=True)
    )
    seen = [(np.asarray(x), np.asarray(i)) for x, _, i in loader]
    order = np.concatenate([i for _, i in seen])
    assert sorted(order.tolist()) == list(range(len(labels)))
    np.testing.assert_array_equal(np.concatenate([x for x, _ in seen]), images[order])
