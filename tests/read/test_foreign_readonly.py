"""A user's own store on a read-only share: files and folders without write permission, read
in place with DataLoader workers; nothing is written beside them (no lock, cache or sidecar
file, not even one made and removed again: the folders' modification times hold).

Run as root, permissions do not bind, and the snapshot is what proves nothing was written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from foreign_stores import (
    STORES,
    N,
    data,
    fields_of,
    make_read_only,
    make_writable,
    snapshot,
    volume_data,
    volumes_h5py,
)
from torch.utils.data import DataLoader

import chunkio
from chunkio.patches import PatchDataset, RandomPatchSampler
from chunkio.read.batch import collate


@pytest.fixture
def share(tmp_path: Path) -> Iterator[Path]:
    """A folder holding the stores, made read-only after they are written."""
    root = tmp_path / "share"
    root.mkdir()
    yield root
    make_writable(root)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", list(STORES))
def test_a_read_only_store_reads_with_workers_and_nothing_is_written(
    share: Path, store: str
) -> None:
    path = STORES[store](share)
    make_read_only(share)
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    before = snapshot(share)
    images, labels = data()
    ids = {images[i].tobytes(): i for i in range(N)}
    loader = chunkio.make_loader(
        path, 32, fields=fields_of(store), num_workers=2, workers=chunkio.Workers(copy=True)
    )
    seen = []
    with loader:
        assert loader.transport == "ring"
        for x, y in loader:
            rows = [ids[im.tobytes()] for im in x.numpy()]
            np.testing.assert_array_equal(y.numpy(), labels[rows])
            seen += rows
    assert sorted(seen) == list(range(N))
    assert snapshot(share) == before


@pytest.mark.timeout(180)
# spawn under ``-m slow``: a forkserver worker unpickles the dataset and reopens the read-only
# file itself the same way, for a fraction of the cost (tests/conftest.py preloads the server)
@pytest.mark.parametrize("context", ["forkserver", pytest.param("spawn", marks=pytest.mark.slow)])
def test_read_only_volumes_give_patches_to_workers(share: Path, context: str) -> None:
    path = volumes_h5py(share)
    make_read_only(share)
    before = snapshot(share)
    images, _ = volume_data()
    ds = PatchDataset(path, (4, 4, 4), fields=["vol/image"], sampler=RandomPatchSampler(12))
    # one worker: it unpickles the dataset and reopens the read-only file itself
    loader = DataLoader(ds, sampler=ds.sampler, batch_size=4, num_workers=1, collate_fn=collate,
                        multiprocessing_context=context, timeout=120)  # fmt: skip
    for batch in loader:
        for patch, v, o in zip(batch["image"], batch["volume"], batch["origin"], strict=True):
            box = tuple(slice(a, a + 4) for a in o.tolist())
            np.testing.assert_array_equal(patch.numpy(), images[int(v), 0][box])
    assert isinstance(batch["image"], torch.Tensor)
    assert snapshot(share) == before
