"""Windows past the hold budget: the loader streams the stacked variables through one cache of
chunks (each chunk decoded once per pass, per reader), says which path it took and why, and
reads exactly what the dataset's in-process read gives."""

from __future__ import annotations

import logging
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from foreign_stores import noise_windows_store
from window_streams import fill_part_at_once

import chunkio
from chunkio import ChunkDataset, Decoding, Field
from chunkio.errors import CorruptChunkError
from chunkio.util.shared_stack import HeldSegments

VARS = ("t2m", "u10", "v10")
STEPS, PER_CHUNK, BATCH = 2400, 8, 16
FIELDS = [Field(list(VARS), steps=[-1, 0]), Field(list(VARS), steps=[1]), "time"]
#: far below the store's decoded size (2,400 steps x 3 variables x 3x4 float32 = 346 KB)
SMALL = 16 << 10
#: decoded bytes of one chunk of the windows' arrays, with the next chunk its windows reach
POOL_CHUNK = 3520


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An xarray-written Zarr v3 store, every variable chunked alike along time."""
    return noise_windows_store(
        tmp_path_factory.mktemp("beyond") / "era.zarr", VARS, STEPS, (3, 4), PER_CHUNK, 3
    )


def _dataset(path: Path, fields: Any = FIELDS) -> ChunkDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ChunkDataset(path, fields=fields, preload_bytes=0)


def _loader(path: Path, workers: int, hold: int, **kw: Any) -> chunkio.ChunkLoader:
    opts = chunkio.Workers(hold_bytes=hold, copy=True, **kw)
    # a pool of 4 chunks (32 anchors) of the 300 in 4 lanes: the caches cannot keep a pass
    return chunkio.make_loader(_dataset(path), BATCH, num_workers=workers, seed=0,
                               ordering=chunkio.Ordering(pool_bytes=4 * POOL_CHUNK, lanes=4),
                               workers=opts)  # fmt: skip


def _paths(ds: ChunkDataset) -> list[str]:
    handle = ds._handle()
    return [handle.field(name).path for name in ds.fields]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 2])
def test_past_the_budget_batches_equal_the_datasets_own_read(
    store: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_part_at_once(monkeypatch)  # the second epoch served from a whole part (workers fork)
    reference = _dataset(store)
    loader = _loader(store, workers, SMALL)
    try:
        for epoch in range(2):
            loader.set_epoch(epoch)
            seen = []
            for x, y, t in loader:
                picks = np.searchsorted(reference.anchors, np.asarray(t))
                want = reference.read_batch(picks)
                np.testing.assert_array_equal(np.asarray(x), want[reference.fields[0]])
                np.testing.assert_array_equal(np.asarray(y), want[reference.fields[1]])
                seen += np.asarray(t).tolist()
            assert sorted(seen) == reference.anchors.tolist()  # every anchor once
    finally:
        loader.close()


def test_each_reader_decodes_each_chunk_once_per_pass(store: Path) -> None:
    """2 ring workers, simulated in this process (a worker's read counters stay in the
    worker): worker ``w`` reads rows ``reader_rows(n, 2)[w]`` of every batch, as the ring
    hands them out, through its own copy of the loader's dataset."""
    loader = _loader(store, 2, SMALL)
    dataset, sampler = loader.dataset, loader.sampler
    loader.close()
    assert _paths(pickle.loads(pickle.dumps(dataset)))[:2] == ["streamed", "streamed"]
    steps = np.array([-1, 0, 1])
    for w in range(2):
        mine = pickle.loads(pickle.dumps(dataset))  # a worker's own handle
        before = 0
        for epoch in range(2):
            sampler.set_epoch(epoch)
            touched: set[int] = set()
            for batch in sampler.iter_arrays():
                a, b = sampler.reader_rows(len(batch), 2)[w]
                mine.read_batch(batch[a:b], once=True, epoch=epoch)
                rows = mine.anchors[batch[a:b]][:, None] + steps
                touched |= set((rows // PER_CHUNK).ravel().tolist())
            counts = mine.read_stats().per_field
            decoded = {counts[f"v_{v}"] for v in VARS}
            assert len(decoded) == 1, counts  # the variables' chunks go together
            # each chunk this worker's lanes reach decoded about once in the pass: a chunk
            # at the edge of two of the order's runs of chunks (windows reach across) may be
            # decoded for each (the order keeps those below 8%)
            assert 0 < decoded.pop() - before <= 1.1 * len(touched), (w, epoch, counts)
            before = counts["v_t2m"]


def test_one_pass_in_process_decodes_every_chunk_about_once(store: Path) -> None:
    loader = _loader(store, 0, SMALL)
    try:
        for _ in loader:
            pass
        counts = loader.dataset.read_stats().per_field
    finally:
        loader.close()
    chunks = -(-STEPS // PER_CHUNK)
    decoded = {counts[f"v_{v}"] for v in VARS}
    assert len(decoded) == 1, counts
    assert chunks <= decoded.pop() <= 1.1 * chunks, counts  # read amplification <= 1.1


def _stream_cache(ds: ChunkDataset) -> Any:
    """The streamed stack's cache in this process's handle of ``ds``."""
    (stack,) = [v for v in ds._handle().ctx.shared.values() if type(v).__name__ == "StreamedStack"]
    return stack.cache


def _stream_part(ds: ChunkDataset) -> Any:
    """The streamed stack's held first chunks in this process's handle of ``ds``."""
    (stack,) = [v for v in ds._handle().ctx.shared.values() if type(v).__name__ == "StreamedStack"]
    return stack.part


@pytest.mark.parametrize("share", [0.5, 0.0])
def test_the_streamed_caches_keep_within_the_budget(store: Path, share: float) -> None:
    """Past the budget each of 2 workers caches its mixing pool's chunks (never fewer: else
    chunks would be decoded again and again), and where Workers(hold_bytes) has room beside
    them, the stack's first chunks that fit it are held once for both (module
    test_windows_held_part), so the caches and the part stay within the budget."""
    asked = _loader(store, 2, 0)  # the order's ask, from a budget that leaves no room
    dataset = asked.dataset
    asked.close()
    edge = dataset.samples.edge_chunks
    pool = dataset.cache_bytes  # hold_bytes=0: the pool alone
    order = pool * (1 + edge)
    assert edge > 0 and pool < order
    hold = int(share * 2 * order) if share else 0
    loader = _loader(store, 2, hold)
    per_reader = loader.dataset.cache_bytes
    worker = pickle.loads(pickle.dumps(loader.dataset))  # as a worker opens it
    try:
        worker.read_batch(np.arange(BATCH))
    finally:
        loader.close()
    cache = _stream_cache(worker)
    assert cache.buffer.nbytes <= per_reader
    assert per_reader == pool  # the pool, never less (over the budget: logged)
    part = _stream_part(worker)
    if share:
        assert len(part) and 2 * per_reader + part.nbytes <= hold
    else:
        assert not len(part)


def test_a_chunk_cut_short_on_the_decode_threads_is_an_error_never_a_slots_old_rows(
    tmp_path: Path,
) -> None:
    """A batch's chunks decoded on 2 threads: one that cannot be decoded is a typed error
    naming its array, every time it is asked for (its slot is never served), and the other
    batches read what one thread reads."""
    rng = np.random.default_rng(7)
    data = {v: (("time", "x"), rng.standard_normal((80, 4)).astype("f4")) for v in VARS}
    path = tmp_path / "cut.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset(data).to_zarr(
            path, zarr_format=3, encoding={v: {"chunks": (8, 4)} for v in VARS}
        )
    good = np.arange(40, 56)  # rows 39..56: chunks 4..7
    want = _dataset(path, FIELDS[:2]).read_batch(good)
    chunk = path / "u10" / "c" / "1" / "0"  # rows 8..15
    chunk.write_bytes(chunk.read_bytes()[:-9])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threaded = ChunkDataset(
            path, fields=FIELDS[:2], preload_bytes=0, decoding=Decoding(threads=2)
        )
    bad = np.arange(4, 20)  # rows 4..21: chunks 0..2
    for _ in range(2):  # the second time too: the slots it was given hold nothing
        with pytest.raises(CorruptChunkError, match="u10"):
            threaded.read_batch(bad)
    got = threaded.read_batch(good)
    for name in threaded.fields:
        np.testing.assert_array_equal(got[name], want[name])
    assert _paths(threaded) == ["streamed", "streamed"]


@pytest.mark.parametrize(
    ("workers", "hold", "room", "path", "said"),
    [
        (0, 1 << 30, True, "held", "held path"),
        (0, SMALL, True, "streamed", "exceed Workers(hold_bytes=0.0 MiB)"),
        (2, SMALL, True, "streamed", "exceed"),
        (2, 1 << 30, True, "held", "in shared memory for all the workers"),
        # no room for one shared copy: a copy per worker would decode every chunk once per
        # worker before the first batch, so the default streams instead
        (2, 1 << 30, False, "streamed", "/dev/shm has no room"),
    ],
)
def test_the_path_taken_and_its_log_line(
    store: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    hold: int,
    room: bool,
    path: str,
    said: str,
) -> None:
    if not room:
        monkeypatch.setattr(HeldSegments, "if_room", classmethod(lambda cls, shapes: None))
    with caplog.at_level(logging.INFO, logger="chunkio"):
        loader = _loader(store, workers, hold)
    try:
        lines = [r for r in caplog.records if r.name == "chunkio" and "windows" in r.message]
        assert len(lines) == 1 and lines[0].levelno == logging.INFO, caplog.text
        assert f"{path} path" in lines[0].message and said in lines[0].message
        assert "MiB" in lines[0].message  # the sizes
        handle = pickle.loads(pickle.dumps(loader.dataset))  # as a worker opens it
        assert _paths(handle)[:2] == [path, path]
    finally:
        loader.close()


def test_variables_chunked_apart_stream_one_by_one_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(5)
    data = {v: (("time", "x"), rng.standard_normal((60, 2)).astype("f4")) for v in VARS}
    path = tmp_path / "apart.zarr"
    encoding = {v: {"chunks": (c, 2)} for v, c in zip(VARS, (4, 5, 6), strict=True)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset(data).to_zarr(path, zarr_format=3, encoding=encoding)
    ds = _dataset(path, [Field(list(VARS), steps=[0, 1])])
    with caplog.at_level(logging.INFO, logger="chunkio"):
        loader = chunkio.make_loader(ds, 8, num_workers=0, workers=chunkio.Workers(hold_bytes=0))
    try:
        (line,) = [r for r in caplog.records if r.name == "chunkio"]
        assert line.levelno == logging.WARNING and "variable by variable" in line.message
        assert _paths(loader.dataset) == ["per variable"]
        x = np.concatenate([np.asarray(b[0]) for b in loader])
        assert x.shape == (len(ds), 2, 3, 2)
    finally:
        loader.close()


def test_a_variable_alone_reads_its_lane_of_the_streamed_stack(store: Path) -> None:
    ds = _dataset(store, [Field(list(VARS), steps=[-1, 0]), Field("t2m", steps=[1])])
    idx = np.arange(20, 60)
    got = ds.read_batch(idx)
    assert _paths(ds) == ["streamed", "streamed"]
    anchors = ds.anchors[idx]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = xr.open_zarr(store)
    want = whole["t2m"].values[anchors + 1][:, None]
    np.testing.assert_array_equal(got[ds.fields[1]], want)
    rows = anchors[:, None] + np.array([-1, 0, 1])
    needed = len(np.unique(rows // PER_CHUNK))
    assert ds.read_stats().per_field["v_t2m"] == needed  # shared: t2m decoded once


def test_remote_reads_fetch_the_next_batches_chunks_ahead(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote reader is asked, per variable, for the streamed chunks a later batch needs
    and the cache lacks (the loader hints the next batches to every reader)."""
    ds = _dataset(store, FIELDS[:2]).with_cache(1 << 20)
    ds.read_batch([0])  # anchor 1: rows 0..2, chunk 0 of every variable held
    core = ds._handle()
    asked: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(type(core.reader), "prefetches", property(lambda self: True))
    monkeypatch.setattr(
        core.reader, "prefetch", lambda a, c: asked.append((a, list(c))), raising=False
    )
    idx = [3, 40, 41, 1000]
    ds.prefetch(idx)
    rows = ds.anchors[idx][:, None] + np.array([-1, 0, 1])
    wanted = [c for c in np.unique(rows // PER_CHUNK).tolist() if c != 0]
    # each field asks for the stack's missing chunks (the second finds the same ones)
    assert asked and all(a == (v, wanted) for a, v in zip(asked, [*VARS, *VARS], strict=True))


def test_a_variable_alone_past_the_budget_streams_without_a_warning(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = _dataset(store, [Field("t2m", steps=[-1, 0])])
    with caplog.at_level(logging.INFO, logger="chunkio"):
        loader = chunkio.make_loader(ds, 8, num_workers=0, workers=chunkio.Workers(hold_bytes=0))
    loader.close()
    (line,) = [r for r in caplog.records if r.name == "chunkio"]
    assert line.levelno == logging.INFO and "streamed path" in line.message
    assert "side by side" not in line.message  # nothing to stack
