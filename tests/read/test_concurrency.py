"""The concurrency matrix: start methods x formats x persistent workers x parent read first.

Every batch must equal the reference computed in-process, and with HDF5 the parent must hold
no open HDF5 handle while workers start.
"""

from __future__ import annotations

import pickle
import threading

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from chunkio import ChunkBatchSampler, ChunkDataset, collate
from chunkio.backends.hdf5.backend import open_hdf5_readers

START_METHODS = ["fork", "spawn", "forkserver"]
#: every start method with every format; persistent workers and a parent that read first in
#: each of their four combinations, and each with every start method and format (all pairs of
#: the four factors: 12 cases, not 24)
MATRIX = [
    (start, fmt, persistent, parent_reads)
    for start in START_METHODS
    for fmt, pairs in (
        ("zarr", [(True, True), (False, False)]),
        ("hdf5", [(True, False), (False, True)]),
    )
    for persistent, parent_reads in pairs
]
#: by default fork in all four combinations and spawn and forkserver once each (both with
#: persistent workers, one per format); the other six run under ``make soak`` (``-m slow``):
#: each non-fork worker imports torch afresh, seconds apiece on two cores
SLOW = pytest.mark.slow
DEFAULT_CASES = {("spawn", "zarr", True, True), ("forkserver", "hdf5", True, False)}
CASES = [
    pytest.param(*case, marks=() if case[0] == "fork" or case in DEFAULT_CASES else SLOW)
    for case in MATRIX
]


def _reference(ds: ChunkDataset, batches: list[list[int]]) -> list[dict[str, np.ndarray]]:
    return [ds.read_batch(b) for b in batches]


def _open_hdf5_objects() -> int:
    kinds = h5py.h5f.OBJ_FILE | h5py.h5f.OBJ_DATASET | h5py.h5f.OBJ_GROUP | h5py.h5f.OBJ_ATTR
    return len(h5py.h5f.get_obj_ids(types=kinds))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("start", "fmt", "persistent", "parent_reads"), CASES)
def test_batches_equal_reference(make_dataset, start, fmt, persistent, parent_reads):
    path, _ = make_dataset(fmt, samples_per_chunk=10)
    ds = ChunkDataset(path, fields=["image", "label"])
    sampler = ChunkBatchSampler(ds.chunk_sizes(), 24, seed=3)
    if parent_reads:
        ds.__getitems__([0, 5, 150])  # the parent holds an open handle when workers start
    ref_ds = ChunkDataset(path)
    loader = DataLoader(
        ds,
        batch_sampler=sampler,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context=start,
        persistent_workers=persistent,
    )
    for epoch in range(2):
        sampler.set_epoch(epoch)
        expected = _reference(ref_ds, list(sampler))
        if fmt == "hdf5":
            ref_ds.close()
        got = list(loader)
        assert len(got) == len(expected)
        for (x, y), want in zip(got, expected, strict=True):
            assert torch.equal(x, torch.from_numpy(want["image"]))
            assert torch.equal(y, torch.from_numpy(want["label"]))
    del loader


@pytest.mark.timeout(120)
def test_parent_holds_no_hdf5_handle_when_workers_start(make_dataset):
    path, _ = make_dataset("hdf5")
    ds = ChunkDataset(path)
    assert open_hdf5_readers() == 0 and _open_hdf5_objects() == 0  # len/metadata only
    len(ds), ds.chunk_sizes()
    assert _open_hdf5_objects() == 0
    ds[3]  # now the parent has a handle ...
    assert open_hdf5_readers() == 1
    loader = DataLoader(ds, batch_size=50, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)  # ... which is closed before the fork
    assert open_hdf5_readers() == 0 and _open_hdf5_objects() == 0
    assert sum(len(b["label"]) for b in it) == 200


@pytest.mark.timeout(60)
def test_pickled_dataset_holds_no_handle(fmt, make_dataset):
    path, _ = make_dataset(fmt)
    ds = ChunkDataset(path)
    ds.__getitems__([1, 2, 3])
    state = pickle.dumps(ds)
    assert b"h5py" not in state and b"ReadCore" not in state
    assert pickle.loads(state)._local is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_fork_while_another_thread_reads(make_dataset, fmt):
    path, arrays = make_dataset(fmt)
    ds = ChunkDataset(path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        local = ChunkDataset(path)
        try:
            while not stop.is_set():
                local.read_batch([0, 50, 199])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(3):
            loader = DataLoader(ds, batch_size=64, num_workers=2, multiprocessing_context="fork")
            labels = torch.cat([b["label"] for b in loader])
            assert sorted(labels.tolist()) == sorted(arrays["label"].tolist())
    finally:
        stop.set()
        thread.join(10)
    assert not errors
