"""ChunkDataset: samples, batched reads, field selection, transforms, cache, validation."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from chunkio import ChunkDataset, collate
from chunkio.errors import (
    CorruptChunkError,
    DatasetNotFoundError,
    FormatError,
    IncompleteDatasetError,
    MissingFieldError,
    UnsupportedVersionError,
)


def test_getitem_returns_a_dict_of_tensors(fmt, make_dataset):
    path, arrays = make_dataset(fmt)
    ds = ChunkDataset(path)
    sample = ds[37]
    assert set(sample) == {"image", "label"}
    assert torch.equal(sample["image"], torch.from_numpy(arrays["image"][37]))
    assert int(sample["label"]) == 37 % 7
    assert len(ds) == 200 and ds.samples_per_chunk == 16
    assert ds[-1]["label"] == arrays["label"][-1]


def test_fields_as_sequence_give_tuples_and_a_name_gives_the_tensor(fmt, make_dataset):
    path, arrays = make_dataset(fmt)
    x, y = ChunkDataset(path, fields=["image", "label"])[5]
    assert torch.equal(x, torch.from_numpy(arrays["image"][5])) and int(y) == 5
    assert int(ChunkDataset(path, fields="label")[6]) == 6


@pytest.mark.parametrize(
    "indices",
    [
        [],
        [0],
        [5, 3, 5, 5],
        [-1, 0, -200],
        [199, 0, 16, 15, 17, 100, 31, 32],
        list(range(200))[::-1],
    ],
)
def test_getitems_equals_per_sample_reads(fmt, make_dataset, indices):
    path, _ = make_dataset(fmt)
    ds = ChunkDataset(path)
    batch = ds.__getitems__(indices)
    assert len(batch) == len(indices)
    for got, i in zip(batch, indices, strict=True):
        want = ds[i]
        assert torch.equal(got["image"], want["image"]) and torch.equal(got["label"], want["label"])


def test_out_of_range_and_bad_index_types(make_dataset):
    path, _ = make_dataset("zarr")
    ds = ChunkDataset(path)
    with pytest.raises(IndexError, match="200 out of range"):
        ds[200]
    with pytest.raises(IndexError, match="-201"):
        ds.__getitems__([0, -201])
    with pytest.raises(TypeError):
        ds["3"]  # type: ignore[index]


def test_batched_read_decodes_each_chunk_once(fmt, make_dataset):
    path, _ = make_dataset(fmt)
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    ds.read_batch([3, 1, 2, 17, 3, 40, 0])  # chunks 0, 1, 2
    assert ds.read_stats().chunks_read == 3


def test_small_fields_are_preloaded_once_per_process(make_dataset):
    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(path)
    ds.read_batch([1, 2])
    before = ds.read_stats().per_field.get("label", 0)
    got = ds.read_batch([199, 0])["label"]
    np.testing.assert_array_equal(got, arrays["label"][[199, 0]])
    assert ds.read_stats().per_field.get("label", 0) == before  # label never re-read


def test_chunk_cache_serves_repeated_chunks(make_dataset):
    path, _ = make_dataset("zarr")
    ds = ChunkDataset(path, fields=["image"], cache_bytes=4 * 16 * 3 * 8 * 8, preload_bytes=0)
    ds.read_batch([0, 1, 20])
    ds.read_batch([2, 21, 40])
    stats = ds.read_stats()
    assert (stats.chunks_read, stats.cache_hits) == (3, 2)


def test_transform_and_batch_transform(make_dataset):
    path, arrays = make_dataset("hdf5")
    ds = ChunkDataset(
        path, fields=["image", "label"], transform=lambda s: (s[0].float() / 255, s[1])
    )
    x, _ = ds[3]
    assert x.dtype == torch.float32 and torch.allclose(
        x * 255, torch.from_numpy(arrays["image"][3]).float()
    )
    batch = collate(ds.__getitems__([3, 4]))
    assert batch[0].shape == (2, 3, 8, 8) and batch[1].tolist() == [3, 4]
    ds2 = ChunkDataset(path, batch_transform=lambda b: {**b, "image": b["image"].flip(0)})
    out = collate(ds2.__getitems__([3, 4]))
    assert torch.equal(out["image"][0], torch.from_numpy(arrays["image"][4]))


def test_plain_dataloader_with_default_collate(fmt, make_dataset):
    path, arrays = make_dataset(fmt)
    loader = DataLoader(ChunkDataset(path, fields=["image", "label"]), batch_size=32, shuffle=True)
    seen = []
    for x, y in loader:
        assert x.shape[1:] == (3, 8, 8)
        for img, label in zip(x, y, strict=True):
            idx = int(img[0, 0, 0]) + 256 * int(img[0, 0, 1])
            assert torch.equal(img, torch.from_numpy(arrays["image"][idx])) and label == idx % 7
            seen.append(idx)
    assert sorted(seen) == list(range(200))


def test_pickle_drops_handles_and_metadata_only_init(fmt, make_dataset):
    path, _ = make_dataset(fmt)
    ds = ChunkDataset(path)
    assert ds._local is None  # __init__ opened and closed the metadata
    ds[0]
    assert ds._local is not None
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._local is None and torch.equal(clone[7]["image"], ds[7]["image"])


def test_missing_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"nothing\.zarr"):
        ChunkDataset(tmp_path / "nothing.zarr")
    with pytest.raises(FileNotFoundError):
        ChunkDataset(tmp_path / "nothing.h5")


def test_unknown_field_is_a_typed_error(make_dataset):
    path, _ = make_dataset("zarr")
    with pytest.raises(MissingFieldError, match="'mask'") as err:
        ChunkDataset(path, fields=["image", "mask"])
    assert isinstance(err.value, KeyError) and path in str(err.value)


def _edit_zarr_attrs(path, edit):
    meta_path = Path(path) / "zarr.json"
    meta = json.loads(meta_path.read_text())
    edit(meta["attributes"])
    meta_path.write_text(json.dumps(meta))


def test_validation_names_the_path(make_dataset):
    path, _ = make_dataset("zarr")
    bad_version = path + "-v"
    shutil.copytree(path, bad_version)
    _edit_zarr_attrs(bad_version, lambda a: a["chunkio"].update(version=99))
    with pytest.raises(UnsupportedVersionError, match="version 99"):
        ChunkDataset(bad_version)
    incomplete = path + "-i"
    shutil.copytree(path, incomplete)
    _edit_zarr_attrs(incomplete, lambda a: a.pop("chunkio_complete"))
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        ChunkDataset(incomplete)
    mismatched = path + "-m"
    shutil.copytree(path, mismatched)
    _edit_zarr_attrs(mismatched, lambda a: a["chunkio"].update(num_samples=201))
    with pytest.raises(FormatError, match="should be"):
        ChunkDataset(mismatched)
    missing = path + "-f"
    shutil.copytree(path, missing)
    shutil.rmtree(f"{missing}/label")
    with pytest.raises(MissingFieldError, match="label"):
        ChunkDataset(missing)
    not_ours = path + "-n"
    shutil.copytree(path, not_ours)
    _edit_zarr_attrs(not_ours, lambda a: a.clear())
    with pytest.raises(FormatError, match="not a chunkio dataset"):
        ChunkDataset(not_ours)


def test_chunk_pool_decodes_each_chunk_once_while_it_fits(make_dataset):
    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    ds = ds.with_cache(2 * ds.chunk_nbytes())  # a pool of two chunks
    got = ds.read_batch([*range(16), 16, 17])["image"]  # chunks 0 and 1
    np.testing.assert_array_equal(got, arrays["image"][[*range(16), 16, 17]])
    rest = ds.read_batch([18, 31, 5])["image"]  # both still held: nothing decoded
    np.testing.assert_array_equal(rest, arrays["image"][[18, 31, 5]])
    stats = ds.read_stats()
    assert (stats.chunks_read, stats.cache_hits) == (2, 2)
    ds.read_batch([40])  # chunk 2 evicts the least recently used one, chunk 0
    ds.read_batch([0, 20, 40])  # the evicted one is decoded again
    assert ds.read_stats().chunks_read == 4
    # a batch needing more chunks than the pool holds grows it instead of failing
    everything = ds.read_batch(list(range(len(ds)))[::-1])["image"]
    np.testing.assert_array_equal(everything, arrays["image"][::-1])
    with pytest.raises(ValueError, match="cache_bytes"):
        ds.with_cache(-1)


def test_a_corrupt_chunk_leaves_no_bad_slot_in_the_pool(make_dataset, tmp_path):
    from test_corruption import damage

    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0, cache_bytes=10**7)
    np.testing.assert_array_equal(ds.read_batch([0])["image"], arrays["image"][[0]])
    damage("zarr", path, "image", 1, "flip", ndim=4)
    with pytest.raises(CorruptChunkError, match="image"):
        ds.read_batch([1, 17, 33])  # chunks 0 (held), 1 (corrupt), 2
    with pytest.raises(CorruptChunkError):
        ds.read_batch([17])  # still an error, never the slot's leftover bytes
    np.testing.assert_array_equal(ds.read_batch([33, 2])["image"], arrays["image"][[33, 2]])
