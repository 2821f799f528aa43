"""The streamed stack at its edges: every window equals the rows zarr-python reads (first and
last chunk, a short last chunk, batches reaching across the held part's end, caches too small
for a batch), and its slots (:class:`~chunkio.read.windows.slots.StreamSlots`) never give a
batch a slot another of its chunks holds."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from foreign_stores import noise_windows_store
from window_streams import streamed_stack, window_dataset

import chunkio
from chunkio import ChunkDataset, Field
from chunkio.read.windows.slots import StreamSlots

VARS = ("t2m", "u10", "v10")
#: 26 row chunks, the last of 3 rows
STEPS, PER_CHUNK, BATCH = 203, 8, 16
FIELDS = [Field(list(VARS), steps=[-1, 0]), Field(list(VARS), steps=[1]),
          Field("u10", steps=[0, 1]), "time"]  # fmt: skip
#: decoded bytes of one row chunk of the stack (3 variables x 8 rows x 2x3 float32)
STACK_CHUNK = 3 * PER_CHUNK * 24
PART_CHUNKS = 10


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noise_windows_store(
        tmp_path_factory.mktemp("edges") / "era.zarr", VARS, STEPS, (2, 3), PER_CHUNK, 5
    )


def _dataset(path: Path) -> ChunkDataset:
    return window_dataset(path, FIELDS)


@pytest.fixture(scope="module")
def arrays(store: Path) -> dict[str, np.ndarray]:
    """The variables as zarr-python reads them."""
    return {v: np.asarray(zarr.open_array(store / v, mode="r")[:]) for v in VARS}


def _want(arrays: dict[str, np.ndarray], anchors: np.ndarray) -> dict[str, np.ndarray]:
    """Each field's windows of ``anchors`` from ``arrays``."""

    def window(names: tuple[str, ...], steps: list[int]) -> np.ndarray:
        return np.stack([np.stack([arrays[v][anchors + s] for v in names], axis=1)
                         for s in steps], axis=1)  # fmt: skip

    return {"t2m_u10_v10": window(VARS, [-1, 0]), "t2m_u10_v10_2": window(VARS, [1]),
            "u10": window(("u10",), [0, 1])[:, :, 0], "time": anchors}  # fmt: skip


def _edge_batches(ds: ChunkDataset, part_rows: int) -> list[np.ndarray]:
    """Batches of sample indices at the edges (the first and last chunk, the short last one,
    the held part's end, mixed in one batch), then every sample once in a shuffled order."""
    anchors = ds.anchors
    n = len(anchors)
    at = np.searchsorted(anchors, part_rows) if part_rows else n // 2
    near = np.arange(max(0, at - 6), min(n, at + 6))
    edges = [np.arange(4), np.arange(n - 4, n), near,
             np.concatenate([np.arange(3), near, np.arange(n - 3, n)]),  # one batch, all three
             np.array([n - 1, 0, int(at), n - 2, 1])]  # unsorted, both ends  # fmt: skip
    order = np.random.default_rng(3).permutation(n)
    return edges + [order[i : i + BATCH] for i in range(0, n, BATCH)]


def _check(arrays: dict[str, np.ndarray], ds: ChunkDataset, batches: list[np.ndarray]) -> None:
    for idx in batches:
        got = ds.read_batch(idx)
        want = _want(arrays, ds.anchors[idx])
        assert set(got) == set(want)
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"{name} at {idx.tolist()}")


@pytest.mark.parametrize("cache_bytes", [0, 4 * STACK_CHUNK])
def test_streamed_windows_at_the_edges_equal_zarr_pythons_rows(
    store: Path, arrays: dict[str, np.ndarray], cache_bytes: int
) -> None:
    """Streamed whole through a cache of one chunk's room (each batch grows it) or a few
    (chunks evicted between batches): every window, twice (the second pass from a warm cache)."""
    ds = _dataset(store).with_cache(cache_bytes)
    batches = _edge_batches(ds, 0)
    _check(arrays, ds, batches + batches)
    stack = streamed_stack(ds)
    assert stack.part_rows == 0 and stack.cache.capacity < STEPS // PER_CHUNK


@pytest.mark.timeout(60)
def test_held_in_part_windows_across_the_parts_end_equal_zarr_pythons_rows(
    store: Path, arrays: dict[str, np.ndarray]
) -> None:
    """The stack's first chunks held (a loader's budget, read in this process): batches of
    held windows, of streamed ones, and of both (held chunks copied into the cache) are the
    rows zarr-python reads, before and after the cache has cycled."""
    pools = chunkio.make_loader(_dataset(store), BATCH, num_workers=0, seed=0,
                                ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
                                workers=chunkio.Workers(hold_bytes=0))  # fmt: skip
    pool = pools.dataset.cache_bytes
    pools.close()
    loader = chunkio.make_loader(
        _dataset(store), BATCH, num_workers=0, seed=0,
        ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
        workers=chunkio.Workers(hold_bytes=pool + PART_CHUNKS * STACK_CHUNK),
    )  # fmt: skip
    try:
        ds = loader.dataset
        ds.read_batch(np.arange(2))  # the part is filled on first use
        part_rows = streamed_stack(ds).part_rows
        assert part_rows == PART_CHUNKS * PER_CHUNK
        batches = _edge_batches(ds, part_rows)
        _check(arrays, ds, batches + batches[::-1])
    finally:
        loader.close()


def test_slots_never_hand_out_a_slot_a_batch_still_needs() -> None:
    """Random admits against a model: after each, every chunk asked for is in the slot given
    (slots are written with their chunk's id when filled), slots are distinct, and a chunk
    that was kept is not filled again; a batch of more chunks than slots grows the buffer
    with the held slots' contents kept."""
    rng = np.random.default_rng(11)
    slots = StreamSlots((2,), "i8", 3)
    largest = 0
    for _ in range(400):
        chunks = rng.choice(40, size=int(rng.integers(1, 7)), replace=False).tolist()
        largest = max(largest, len(chunks))
        before = {c for c in chunks if c in slots}
        given, fills = slots.admit(chunks)
        assert len(set(given)) == len(given)
        assert {c for c, _ in fills} == set(chunks) - before
        for chunk, slot in fills:
            slots.buffer[slot] = chunk
        assert [int(slots.buffer[s, 0]) for s in given] == chunks
        assert len(slots) <= slots.capacity
    assert largest > 3 and slots.capacity == largest  # grown to the largest batch


def test_slots_forgotten_are_filled_again() -> None:
    slots = StreamSlots((1,), "f4", 2)
    assert slots.admit([4, 9]) == ([0, 1], [(4, 0), (9, 1)])
    slots.forget([9, 12])  # 12 was never held
    assert 9 not in slots and 4 in slots and len(slots) == 1
    assert slots.admit([9, 4]) == ([1, 0], [(9, 1)])


def test_anchors_of_another_int_type_with_the_same_bytes_are_admitted(
    store: Path, arrays: dict[str, np.ndarray]
) -> None:
    """The stack skips the admit for the anchors it admitted last (the batch's other fields):
    int32 ``[a, 0]`` has the bytes of int64 ``[a]``, and must not be taken for it. Steps
    ``>= 0`` only, so that anchor 0 is the dataset's and its rows are in range."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ChunkDataset(store, fields=[Field(list(VARS), steps=[0, 1])], preload_bytes=0)
    assert ds.anchors[0] == 0
    far = int(ds.anchors[-1]) - 2
    ds.read_batch(np.array([len(ds) - 3]))  # the stack made, chunk 0 not cached
    stack = streamed_stack(ds)
    assert 0 not in stack.cache
    steps = np.array([0, 1], np.int64)  # the only ones registered
    first = np.empty((2, 3 * 6), np.float32)
    stack.gather(np.array([far], np.int64), steps, first)
    got = np.empty((4, 3 * 6), np.float32)
    stack.gather(np.array([far, 0], np.int32), steps, got)
    rows = [far, far + 1, 0, 1]
    want = np.stack([np.stack([arrays[v][r] for v in VARS]).reshape(-1) for r in rows])
    np.testing.assert_array_equal(got, want)
