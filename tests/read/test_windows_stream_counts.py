"""The streamed stack's read counters (:meth:`~chunkio.ChunkDataset.read_stats`): a chunk
decoded counts once per variable in ``chunks_read``, a chunk found in the cache once per
variable in ``cache_hits``, and a chunk copied from the held part in neither."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from foreign_stores import noise_windows_store
from window_streams import fill_part_at_once, streamed_stack, window_dataset

import chunkio
from chunkio import ChunkDataset, Field

VARS = ("t2m", "u10", "v10")
V = len(VARS)
#: 32 row chunks of 8 rows; steps [0]: anchor ``a`` reads row ``a`` alone
STEPS, PER_CHUNK = 256, 8
#: decoded bytes of one row chunk of the stack (3 variables x 8 rows x 2x3 float32)
STACK_CHUNK = V * PER_CHUNK * 24
PART_CHUNKS = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noise_windows_store(
        tmp_path_factory.mktemp("counts") / "era.zarr", VARS, STEPS, (2, 3), PER_CHUNK, 7
    )


def _dataset(path: Path) -> ChunkDataset:
    return window_dataset(path, [Field(list(VARS), steps=[0])])


def _counts(ds: ChunkDataset, batch: list[int]) -> tuple[int, int, int]:
    """What reading ``batch`` adds to ``(chunks_read, cache_hits, rows_decoded)``."""
    stats = ds.read_stats()
    before = (stats.chunks_read, stats.cache_hits, stats.rows_decoded)
    ds.read_batch(np.array(batch))
    after = (stats.chunks_read, stats.cache_hits, stats.rows_decoded)
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def test_a_cold_batch_decodes_and_a_warm_one_hits_every_chunk_of_each_variable(
    store: Path,
) -> None:
    ds = _dataset(store).with_cache(8 * STACK_CHUNK)
    batch = [40, 41, 55, 100]  # row chunks 5, 6 and 12
    assert _counts(ds, batch) == (3 * V, 0, 3 * PER_CHUNK * V)
    assert streamed_stack(ds).part_rows == 0  # streamed whole: no held part here
    # the same chunks again, in another order: all in the cache, nothing read
    assert _counts(ds, batch[::-1]) == (0, 3 * V, 0)
    assert _counts(ds, [47, 96]) == (0, 2 * V, 0)  # fewer of them
    assert ds.read_stats().per_field == {f"v_{v}": 3 for v in VARS}


def test_a_repeated_batch_counts_its_hits(store: Path) -> None:
    """The stack skips the admit of the anchors it admitted last only within one batch (its
    other fields): the same batch read again counts every chunk as a hit."""
    ds = _dataset(store).with_cache(8 * STACK_CHUNK)
    batch = [40, 41, 55, 100]
    _counts(ds, batch)
    assert _counts(ds, batch) == (0, 3 * V, 0)


@pytest.mark.timeout(60)
def test_chunks_copied_from_the_held_part_count_as_neither(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reader decodes part chunks 0 and 1 (written into the part); another, as a worker
    opens the loader's dataset, copies them into its cache (neither read nor hit) beside a
    streamed chunk it decodes, and gathers a batch inside the part with no counts at all."""
    fill_part_at_once(monkeypatch)  # both chunks written by the first reader's one batch
    budget = chunkio.make_loader(_dataset(store), 8, num_workers=0, seed=0,
                                 ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
                                 workers=chunkio.Workers(hold_bytes=0))  # fmt: skip
    pool = budget.dataset.cache_bytes
    budget.close()
    loader = chunkio.make_loader(
        _dataset(store), 8, num_workers=0, seed=0,
        ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
        workers=chunkio.Workers(hold_bytes=pool + PART_CHUNKS * STACK_CHUNK),
    )  # fmt: skip
    try:
        first = loader.dataset
        worker = pickle.loads(pickle.dumps(first))
        assert _counts(first, [0, 9]) == (2 * V, 0, 2 * PER_CHUNK * V)  # cold, in the part
        assert streamed_stack(first).part_rows == PART_CHUNKS * PER_CHUNK
        assert _counts(worker, [0, 9, 40]) == (V, 0, PER_CHUNK * V)  # chunks 0, 1 copied
        assert _counts(worker, [1, 10]) == (0, 0, 0)  # all held: one gather from the part
        assert _counts(worker, [40, 1, 10]) == (0, 3 * V, 0)  # in its cache now: hits
        assert _counts(first, [0, 9, 40]) == (V, 2 * V, PER_CHUNK * V)
    finally:
        loader.close()
