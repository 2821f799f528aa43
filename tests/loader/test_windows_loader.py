"""Windows through make_loader: the ring under fork, spawn and forkserver, the DataLoader route,
resume mid-epoch, DDP global batches independent of world size, and an epoch that decodes each
chunk about once while batches stay mixed in time."""

from __future__ import annotations

import pickle
import warnings
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
import zarr
from resume_harness import assert_resume_equals_uninterrupted
from weather_stores import STORES, VARS, arrays, window_dataset, window_fields, xarray_v3

import chunkio
import chunkio.read.windows as windows
from chunkio import ChunkDataset, Field
from chunkio.util.shared_stack import READY

#: batches are kept (compared across loaders): copies, not views of the ring
COPY = chunkio.Workers(copy=True)

FIELDS = window_fields()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return xarray_v3(tmp_path_factory.mktemp("w"))


def _dataset(path: Path, **kw: Any) -> ChunkDataset:
    return cast(ChunkDataset, window_dataset(path, **kw))


def _check(x: Any, y: Any, t: Any) -> list[int]:
    a = arrays()
    anchors = np.asarray(t)
    want_x = np.stack([np.stack([a[v][anchors + s] for v in VARS], 1) for s in (-1, 0)], 1)
    want_y = np.stack([a[v][anchors + 1] for v in VARS], 1)[:, None]
    np.testing.assert_array_equal(np.asarray(x), want_x)
    np.testing.assert_array_equal(np.asarray(y), want_y)
    return [int(v) for v in anchors]


@pytest.mark.timeout(240)
# spawn under ``-m slow``: forkserver pickles the windowed dataset to its workers the same way,
# at a fraction of the cost (tests/conftest.py preloads the server); the spawn start itself
# keeps its default cases in tests/transport/test_transport.py and tests/read/test_concurrency.py
@pytest.mark.parametrize(
    "context", ["fork", pytest.param("spawn", marks=pytest.mark.slow), "forkserver"]
)
def test_the_ring_reads_every_anchor_once_under_each_start_method(
    store: Path, context: str
) -> None:
    """...with the stacked variables held once for both workers, in the loader's segment: every
    block decoded by one of them, and the segment unlinked when the loader closes."""
    ds = _dataset(store)
    loader = chunkio.make_loader(ds, 8, num_workers=2, seed=0,
                                 workers=chunkio.Workers(copy=True, context=context))  # fmt: skip
    try:
        assert loader.transport == "ring"
        seen = [a for x, y, t in loader for a in _check(x, y, t)]
        (name,) = loader.dataset.held_segments.values()
        claimers = _claimers(name, ds)
        assert claimers and claimers <= set(loader.worker_pids()), claimers
    finally:
        loader.close()
    assert not Path(f"/dev/shm/{name}").exists()
    assert ds.anchors is not None
    assert sorted(seen) == ds.anchors.tolist()


def _claimers(name: str, ds: ChunkDataset) -> set[int]:
    """The processes that decoded the blocks of the stack in segment ``name`` (every block
    must be decoded)."""
    (shape,) = windows.stack_shapes(ds.layout, ds.fields) or []
    states_at, pids_at, nbytes = shape.offsets()
    shm = SharedMemory(name=name)
    try:
        raw = np.ndarray((nbytes,), dtype=np.uint8, buffer=shm.buf)
        states = raw[states_at : states_at + len(shape.blocks)].copy()
        pids = raw[pids_at:nbytes].view(np.int64).copy()
        del raw
    finally:
        shm.close()
    assert (states == READY).all(), states
    return set(pids.tolist())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(STORES))
def test_every_kind_of_store_is_held_once_for_the_workers(tmp_path: Path, kind: str) -> None:
    """Zarr v2/v3 (sharded) by xarray and zarr-python, h5py, chunkio's own: the workers fill
    one shared stack and every window equals the source arrays."""
    ds = _dataset(STORES[kind](tmp_path))
    workers = chunkio.Workers(copy=True, context="fork")
    with chunkio.make_loader(ds, 8, num_workers=2, seed=0, workers=workers) as loader:
        seen = [a for x, y, t in loader for a in _check(x, y, t)]
        (name,) = loader.dataset.held_segments.values()
        assert _claimers(name, ds) <= set(loader.worker_pids())
    assert ds.anchors is not None and sorted(seen) == ds.anchors.tolist()


@pytest.mark.parametrize(
    ("num_workers", "hold", "shared"),
    [(2, 1.0, True), (2, 1.9, True), (2, 0.9, False), (0, 10.0, False)],
)
def test_workers_share_one_held_copy_within_hold_bytes(
    store: Path, num_workers: int, hold: float, shared: bool
) -> None:
    """``hold_bytes`` counts the stacks once, whatever the number of workers (they share one
    copy); data larger than it is not held; without workers the process holds its own."""
    ds = _dataset(store)
    workers = chunkio.Workers(copy=True, hold_bytes=int(hold * ds.held_nbytes()))
    with chunkio.make_loader(ds, 8, num_workers=num_workers, seed=0, workers=workers) as loader:
        assert bool(loader.dataset.held_segments) == shared
        seen = [a for x, y, t in loader for a in _check(x, y, t)]
        if shared:  # held: read whole by the workers together
            (name,) = loader.dataset.held_segments.values()
            assert _claimers(name, ds) <= set(loader.worker_pids())
    assert ds.anchors is not None and sorted(seen) == ds.anchors.tolist()


@pytest.mark.timeout(180)
def test_the_dataloader_route_gives_the_same_batches(store: Path) -> None:
    ds = _dataset(store)
    ring = chunkio.make_loader(ds, 8, num_workers=0, seed=3, workers=COPY)
    plain = chunkio.make_loader(
        ds, 8, num_workers=2, seed=3, workers=chunkio.Workers(transport="dataloader")
    )
    try:
        a = [np.asarray(t).tolist() for _, _, t in ring]
        b = [np.asarray(t).tolist() for x, y, t in plain if _check(x, y, t)]
    finally:
        ring.close()
        plain.close()
    assert a == b


@pytest.mark.timeout(180)
def test_a_window_loader_resumes_mid_epoch(store: Path) -> None:
    ds = _dataset(store)

    def make() -> Any:
        return chunkio.make_loader(ds, 8, num_workers=0, seed=1, workers=COPY)

    full, _ = assert_resume_equals_uninterrupted(make, stop=3)
    assert len(full) == -(-len(ds) // 8)


def test_global_batches_do_not_depend_on_the_world_size(store: Path) -> None:
    ds = _dataset(store)

    def batches(rank: int, world: int) -> list[list[int]]:
        ordering = chunkio.Ordering(rank=rank, world_size=world)
        loader = chunkio.make_loader(
            ds, 8 // world, num_workers=0, seed=5, workers=COPY, ordering=ordering
        )
        try:
            return [np.asarray(t).tolist() for _, _, t in loader]
        finally:
            loader.close()

    one = batches(0, 1)
    two = [a + b for a, b in zip(batches(0, 2), batches(1, 2), strict=True)]
    assert [sorted(b) for b in one] == [sorted(b) for b in two]


@pytest.mark.parametrize("rows_per_chunk", [1, 24])
def test_an_epoch_decodes_each_chunk_about_once_and_mixes_time(
    tmp_path: Path, rows_per_chunk: int
) -> None:
    # three months of 6-hourly steps: 5.7x the pool below (a chunk a step is written through
    # zarr-python chunk by chunk: seconds for half a year, and the ratio is what counts)
    steps = 365
    rng = np.random.default_rng(0)
    data = {v: rng.standard_normal((steps, 2, 2)).astype(np.float32) for v in VARS}
    data["time"] = np.arange(steps)
    path = tmp_path / "era.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for name, values in data.items():
        chunks = (rows_per_chunk, *values.shape[1:])
        group.create_array(name, shape=values.shape, chunks=chunks, dtype=values.dtype)[...] = (
            values
        )
    ds = ChunkDataset(path, fields=FIELDS, preload_bytes=0)
    sample = sum(ds.layout.field(f).sample_nbytes for f in ds.fields)
    # a pool of 64 samples: well below the dataset, and nothing held across epochs, as with
    # real ERA5 fields
    loader = chunkio.make_loader(ds, 32, num_workers=0, seed=0,
                                 ordering=chunkio.Ordering(pool_bytes=64 * sample),
                                 workers=chunkio.Workers(hold_bytes=0))  # fmt: skip
    spreads = [float(np.std(np.asarray(t, dtype=float))) for _, _, t in loader]
    stats = loader.dataset.read_stats()
    loader.close()
    assert ds.anchors is not None
    chunks = -(-steps // rows_per_chunk)  # every chunk of every variable is needed
    for v in VARS:
        assert stats.per_field[f"v_{v}"] / chunks <= 1.1, (v, stats.per_field)
    uniform = [
        float(np.std(rng.choice(ds.anchors, 32, replace=False).astype(float)))
        for _ in range(len(spreads))
    ]
    assert np.mean(spreads) >= 0.8 * np.mean(uniform)


def test_make_loader_takes_fields_with_steps_with_a_path(store: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
        loader = chunkio.make_loader(store, 8, fields=FIELDS, num_workers=0, seed=0, workers=COPY)
    with loader:
        seen = [a for x, y, t in loader for a in _check(x, y, t)]
    assert sorted(seen) == list(range(1, len(arrays()["time"]) - 1))


@pytest.mark.timeout(240)
# spawn (the dataset and its Normalize pickled to the workers) under ``-m slow``; the default
# suite pickles them itself (test_a_normalized_dataset_pickles_with_its_stats)
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_normalize_runs_in_the_ring_workers(store: Path, context: str) -> None:
    """``transform=Normalize(stats)``: batches stay on the ring, and the ring workers write
    ``(x - mean) / std`` per channel into them (the main process reads nothing on the ring)."""
    stats = chunkio.compute_stats(_dataset(store))
    norm = chunkio.Normalize(stats)
    ds = _dataset(store, transform=norm)
    workers = chunkio.Workers(copy=True, context=context)
    loader = chunkio.make_loader(ds, 8, num_workers=2, seed=0, workers=workers)
    mean = {n: np.asarray(stats.fields[n]["mean"])[:, None, None] for n in ds.fields[:2]}
    std = {n: np.asarray(stats.fields[n]["std"])[:, None, None] for n in ds.fields[:2]}
    a = arrays()
    seen = []
    try:
        assert loader.transport == "ring"
        for x, y, t in loader:
            anchors = np.asarray(t)
            want_x = np.stack([np.stack([a[v][anchors + s] for v in VARS], 1) for s in (-1, 0)], 1)
            want_y = np.stack([a[v][anchors + 1] for v in VARS], 1)[:, None]
            for got, want, name in ((x, want_x, ds.fields[0]), (y, want_y, ds.fields[1])):
                ref = (want.astype(np.float64) - mean[name]) / std[name]
                np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
            seen += anchors.tolist()
    finally:
        loader.close()
    assert sorted(seen) == ds.anchors.tolist()


def test_a_normalized_dataset_pickles_with_its_stats(store: Path) -> None:
    """What a spawned or forkserver ring worker gets: the dataset pickled with its
    ``Normalize``, giving the same normalised samples as the original."""
    stats = chunkio.compute_stats(_dataset(store))
    ds = _dataset(store, transform=chunkio.Normalize(stats))
    copy = pickle.loads(pickle.dumps(ds))
    rows = [0, 5, len(ds) - 1]
    got, want = copy.__getitems__(rows), ds.__getitems__(rows)
    assert len(got) == len(want) == len(rows)
    for a, b in zip(got, want, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    x = np.asarray(got[0][0])
    raw = np.asarray(_dataset(store).__getitems__(rows)[0][0])
    assert not np.array_equal(x, raw)  # normalised, not the raw sample


def test_normalize_as_the_transform_of_a_path(store: Path) -> None:
    """``make_loader(path, ..., transform=Normalize(stats))``: checked against the fields
    when the loader is made, applied as batches are read."""
    stats = chunkio.compute_stats(_dataset(store))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
        loader = chunkio.make_loader(store, 8, fields=FIELDS, num_workers=0, seed=0,
                                     workers=COPY, transform=chunkio.Normalize(stats))  # fmt: skip
        with pytest.raises(chunkio.errors.WindowError, match="stats have field"):
            chunkio.make_loader(store, 8, fields=FIELDS[:1], num_workers=0,
                                transform=chunkio.Normalize(stats))  # fmt: skip
    with loader:
        x, _, _ = next(iter(loader))
    assert abs(float(x.mean())) < 1.0 and x.dtype == torch.float32


@pytest.mark.parametrize(("hold_bytes", "decodes_again"), [(1 << 30, False), (0, True)])
def test_readers_keep_every_chunk_across_epochs_when_the_data_fits_hold_bytes(
    tmp_path: Path, hold_bytes: int, decodes_again: bool
) -> None:
    """``Workers(hold_bytes)``: data whose decoded chunks all fit is decoded once in all (a
    second epoch decodes nothing); with 0, a pool smaller than the data decodes it again."""
    path = tmp_path / "long.zarr"
    x = np.arange(4000, dtype=np.float32).reshape(2000, 2)
    zarr.open_group(path, mode="w").create_array("x", data=x, chunks=(10, 2))
    ds = ChunkDataset(path, fields=[Field("x", steps=[0, 1])], preload_bytes=0)  # read by chunk
    workers = chunkio.Workers(hold_bytes=hold_bytes, copy=True)
    ordering = chunkio.Ordering(pool_bytes=160, lanes=1)  # the pool alone keeps a few chunks
    loader = chunkio.make_loader(ds, 8, num_workers=0, seed=0, workers=workers, ordering=ordering)
    with loader:
        first = np.concatenate([np.asarray(b) for (b,) in loader])
        decoded = loader.dataset.read_stats().chunks_read
        second = np.concatenate([np.asarray(b) for (b,) in loader])
        again = loader.dataset.read_stats().chunks_read - decoded
    for epoch in (first, second):
        np.testing.assert_array_equal(epoch[:, 1], epoch[:, 0] + 2)  # row a + 1 after row a
        assert sorted(epoch[:, 0, 0].tolist()) == x[:-1, 0].tolist()
    assert decoded >= 200 and (again > 0) == decodes_again, (decoded, again)
    assert ds.held_nbytes() < 1 << 30


def test_a_dataset_taken_from_a_loader_does_not_keep_its_segments(store: Path) -> None:
    with chunkio.make_loader(_dataset(store), 8, num_workers=2, seed=0, workers=COPY) as first:
        assert first.dataset.held_segments
        with chunkio.make_loader(first.dataset, 8, num_workers=0, seed=0, workers=COPY) as second:
            assert second.dataset.held_segments == {}
            assert [a for x, y, t in second for a in _check(x, y, t)]
