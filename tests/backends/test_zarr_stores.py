"""Zarr datasets through any store or URL zarr accepts (the generic, non-fast-path reader)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from conftest import sample_arrays, zarr_chunk_file
from torch.utils.data import DataLoader

from chunkio import ChunkDataset, collate
from chunkio.errors import MissingChunkError


def _expected(arrays: dict[str, np.ndarray], idx: list[int]) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in arrays.items()}


@pytest.mark.parametrize("how", ["store", "url"])
def test_store_objects_and_urls_read_like_paths(make_dataset, how: str) -> None:
    path, arrays = make_dataset("zarr")
    location = zarr.storage.LocalStore(path, read_only=True) if how == "store" else f"file://{path}"
    ds = ChunkDataset(location)
    assert ds._local is None and len(ds) == 200
    idx = [199, 0, 17, 17, -1]
    got = ds.read_batch(idx)
    for k, v in _expected(arrays, idx).items():
        np.testing.assert_array_equal(got[k], v)
    assert pickle.loads(pickle.dumps(ds))._local is None


@pytest.mark.timeout(120)
def test_store_object_through_dataloader_workers(make_dataset) -> None:
    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(zarr.storage.LocalStore(path, read_only=True), fields=["image", "label"])
    loader = DataLoader(ds, batch_size=50, num_workers=2, collate_fn=collate)
    images = torch.cat([x for x, _ in loader])
    np.testing.assert_array_equal(images.numpy(), arrays["image"])


def test_missing_chunk_through_a_url_is_an_error(tmp_path: Path, make_dataset) -> None:
    path, _ = make_dataset("zarr", sample_arrays(40))
    zarr_chunk_file(path, "image", 1).unlink()
    ds = ChunkDataset(f"file://{path}", fields=["image"], preload_bytes=0)
    ds.read_batch([0])
    with pytest.raises(MissingChunkError, match="chunk 1"):
        ds.read_batch([20])
