"""Windows past the hold budget with room left beside the streamed caches: the stack's first
chunks held decoded once (in the loader's shared memory), the rest streamed; batches equal the
dataset's own read, the held chunks are never decoded again, and the budget holds."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
from foreign_stores import noise_windows_store
from window_streams import check_window_epoch, fill_part_at_once, streamed_stack, window_dataset

import chunkio
from chunkio import ChunkDataset, Field

VARS = ("t2m", "u10", "v10")
STEPS, PER_CHUNK, BATCH = 480, 8, 16
#: a field of one variable reads its lane of the stack
FIELDS = [Field(list(VARS), steps=[-1, 0]), Field(list(VARS), steps=[1]),
          Field("u10", steps=[0, 1]), "time"]  # fmt: skip
#: decoded bytes of one row chunk of the stack (3 variables x 8 rows x 2x3 float32)
STACK_CHUNK = 3 * PER_CHUNK * 24


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noise_windows_store(
        tmp_path_factory.mktemp("part") / "era.zarr", VARS, STEPS, (2, 3), PER_CHUNK, 11
    )


def _dataset(path: Path, preload: int = 0) -> ChunkDataset:
    return window_dataset(path, FIELDS, preload)


def _budget(ds: ChunkDataset, workers: int, part_chunks: int) -> int:
    """A Workers(hold_bytes) that holds ``part_chunks`` of the stack's chunks beside the
    readers' mixing pools."""
    pools = _loader(ds, workers, 0)
    pool = pools.dataset.cache_bytes
    pools.close()
    return max(1, workers) * pool + part_chunks * STACK_CHUNK


def _loader(ds: ChunkDataset, workers: int, hold: int) -> chunkio.ChunkLoader:
    return chunkio.make_loader(ds, BATCH, num_workers=workers, seed=0,
                               ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
                               workers=chunkio.Workers(hold_bytes=hold, copy=True))  # fmt: skip


def _part_loader(ds: ChunkDataset, workers: int, part_chunks: int) -> chunkio.ChunkLoader:
    return _loader(ds, workers, _budget(ds, workers, part_chunks))


def _check_epochs(loader: chunkio.ChunkLoader, reference: ChunkDataset, epochs: int) -> None:
    for epoch in range(epochs):
        check_window_epoch(loader, reference, epoch)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_held_in_part_batches_equal_the_datasets_own_read(
    store: Path, workers: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the part written whole in the first epoch, so the second gathers from it and copies out
    # of it throughout (with the credit it would be a tenth to a third written by then)
    fill_part_at_once(monkeypatch)
    reference = _dataset(store)
    hold = _budget(reference, workers, 20)  # 20 of 60 chunks held
    with caplog.at_level(logging.INFO, logger="chunkio"):
        loader = _loader(_dataset(store), workers, hold)
    try:
        (line,) = [r.message for r in caplog.records if "chunkio windows" in r.message]
        assert "held in part" in line and "33% of the rows" in line, line
        _check_epochs(loader, reference, 2)
    finally:
        loader.close()


def test_the_held_chunks_are_decoded_once_then_only_the_rest_each_pass(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_part_at_once(monkeypatch)  # each chunk of the part written as first decoded
    loader = _part_loader(_dataset(store), 0, 30)  # half the stack held
    chunks = STEPS // PER_CHUNK
    try:
        counts = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            for _ in loader:
                pass
            counts.append(loader.dataset.read_stats().per_field["v_t2m"])
        assert streamed_stack(loader.dataset).part_rows == 30 * PER_CHUNK
    finally:
        loader.close()
    # the first pass decodes every chunk about once (the held ones exactly once, up front);
    # the second only those past the held part: read amplification <= 1.1 both times
    assert chunks <= counts[0] <= 1.1 * chunks, counts
    assert chunks - 30 <= counts[1] - counts[0] <= 1.1 * (chunks - 30), counts


def test_the_part_and_the_caches_stay_within_the_budget(store: Path) -> None:
    hold = _budget(_dataset(store), 2, 7)
    loader = _loader(_dataset(store), 2, hold)
    dataset = loader.dataset
    worker = pickle.loads(pickle.dumps(dataset))  # as a worker opens it
    try:
        worker.read_batch(np.arange(BATCH))
        stack = streamed_stack(worker)
    finally:
        loader.close()
    assert stack.part.nbytes == 7 * STACK_CHUNK and stack.part_rows == 7 * PER_CHUNK
    assert 2 * dataset.cache_bytes + stack.part.nbytes <= hold
    assert stack.cache.buffer.nbytes <= dataset.cache_bytes


def test_a_part_its_readers_do_not_agree_on_streams_every_chunk(store: Path) -> None:
    """A dataset asked to preload more than the held part (so its readers would look for a
    larger part than the loader's segment holds) streams every chunk: never rows the segment
    does not hold."""
    reference = _dataset(store)
    loader = _part_loader(_dataset(store, preload=40 * STACK_CHUNK), 0, 20)
    try:
        _check_epochs(loader, reference, 1)
        assert streamed_stack(loader.dataset).part_rows == 0
    finally:
        loader.close()


def test_no_room_beside_the_pools_streams_every_chunk(store: Path) -> None:
    loader = _part_loader(_dataset(store), 0, 0)
    try:
        assert loader.dataset.held_segments == {}
        assert next(iter(loader))[0].shape == (BATCH, 2, 3, 2, 3)
        assert streamed_stack(loader.dataset).part_rows == 0
    finally:
        loader.close()


def test_a_dataset_from_a_closed_loader_streams_rather_than_holding_the_wholestreamed_stack(
    store: Path,
) -> None:
    """The loader's segment is gone once it closes: its dataset, read on, streams every
    chunk (its budget gave the stack only its first chunks), never a whole copy of its own."""
    reference = _dataset(store)
    loader = _part_loader(_dataset(store), 2, 20)
    dataset = loader.dataset
    loader.close()
    idx = np.arange(0, len(reference), 7)
    got, want = dataset.read_batch(idx), reference.read_batch(idx)
    for name in reference.fields:
        np.testing.assert_array_equal(got[name], want[name])
    assert streamed_stack(dataset).part_rows == 0
