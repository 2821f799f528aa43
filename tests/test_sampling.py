"""Tests for chunkio.sampling: chunk-aware batch orders, the stateful sampler and the metrics."""

from __future__ import annotations

import json
import sys
from collections import Counter
from itertools import chain
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from resume_harness import assert_resume_equals_uninterrupted
from torch.utils.data import DataLoader, Dataset, get_worker_info

from chunkio import sampling
from chunkio.sampling import (
    ChunkBatchSampler,
    chunk_aware_batches,
    chunk_aware_permutation,
    default_window,
    describe_sampler,
    read_amplification,
    shuffle_quality,
    stream_interleave_order,
)

SETTINGS = settings(max_examples=60, deadline=None)
sizes_st = st.lists(st.integers(1, 12), min_size=1, max_size=16)


def chunk_of(sizes: list[int]) -> np.ndarray:
    """Chunk id of every sample id."""
    return np.repeat(np.arange(len(sizes)), sizes)


def all_ranks(sizes: list[int], world: int, **kw: Any) -> list[list[np.ndarray]]:
    return [chunk_aware_batches(sizes, rank=r, world_size=world, **kw) for r in range(world)]


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "batch_size": draw(st.integers(1, 20)),
        "window": draw(st.integers(1, 5)),
        "seed": draw(st.integers(0, 2**32)),
        "epoch": draw(st.integers(0, 5)),
        "drop_last": draw(st.booleans()),
        "num_streams": draw(st.integers(1, 4)),
        "shuffle": draw(st.booleans()),
    }


@SETTINGS
@given(sizes=sizes_st, cfg=configs(), world=st.integers(1, 4))
def test_ranks_equal_length_disjoint_and_exhaustive(
    sizes: list[int], cfg: dict[str, Any], world: int
) -> None:
    n, b = sum(sizes), cfg["batch_size"]
    ranks = all_ranks(sizes, world, **cfg)
    assert len({len(batches) for batches in ranks}) == 1
    per_rank = [np.concatenate(bs) if bs else np.zeros(0, np.int64) for bs in ranks]
    assert len({p.size for p in per_rank}) == 1
    for batches, piece in zip(ranks, per_rank, strict=True):
        assert all(1 <= x.size <= b and x.dtype == np.int64 for x in batches)
        assert np.unique(piece).size == piece.size  # a rank never sees a sample twice
        if cfg["drop_last"]:
            assert all(x.size == b for x in batches)
    everything = np.concatenate(per_rank)
    if cfg["drop_last"]:
        per = n // world
        assert everything.size == world * (per - per % b)
        assert np.unique(everything).size == everything.size
    else:
        per = -(-n // world)
        assert everything.size == world * per
        assert set(everything.tolist()) == set(range(n))
        if n % world == 0:
            assert sorted(everything.tolist()) == list(range(n))


@SETTINGS
@given(sizes=sizes_st, cfg=configs(), world=st.integers(1, 4))
def test_ranks_are_contiguous_pieces_of_the_global_stream(
    sizes: list[int], cfg: dict[str, Any], world: int
) -> None:
    kw = {k: cfg[k] for k in ("window", "seed", "epoch", "shuffle")}
    stream = chunk_aware_permutation(sizes, **kw)
    n = stream.size
    per = n // world if cfg["drop_last"] else -(-n // world)
    padded = np.resize(stream, per * world)  # DistributedSampler-style padding from the start
    cfg1 = {**cfg, "num_streams": 1}
    for r, batches in enumerate(all_ranks(sizes, world, **cfg1)):
        got = np.concatenate(batches) if batches else np.zeros(0, np.int64)
        assert np.array_equal(got, padded[r * per : r * per + got.size])


@SETTINGS
@given(sizes=sizes_st, window=st.integers(1, 6), seed=st.integers(0, 1000))
def test_windows_are_contiguous_groups_of_chunks(sizes: list[int], window: int, seed: int) -> None:
    stream = chunk_aware_permutation(sizes, window=window, seed=seed, epoch=0)
    assert sorted(stream.tolist()) == list(range(sum(sizes)))
    chunks = chunk_of(sizes)[stream]
    first = {int(c): i for i, c in reversed(list(enumerate(chunks)))}
    order = sorted(first, key=first.__getitem__)  # chunks by first appearance
    start = 0
    for g in range(0, len(order), window):
        group = order[g : g + window]
        stop = start + sum(sizes[c] for c in group)
        assert set(chunks[start:stop].tolist()) == set(group)
        start = stop


@SETTINGS
@given(sizes=sizes_st, b=st.integers(1, 30), seed=st.integers(0, 1000))
def test_window_one_keeps_batches_within_few_chunks(sizes: list[int], b: int, seed: int) -> None:
    m, chunks = min(sizes), chunk_of(sizes)
    for batch in chunk_aware_batches(sizes, batch_size=b, window=1, seed=seed, epoch=0):
        touched = np.unique(chunks[batch]).size
        assert touched <= max(1, (batch.size - 2) // m + 2)


def test_deterministic_and_epochs_differ() -> None:
    sizes = [10] * 20
    kw: dict[str, Any] = {"batch_size": 16, "window": 2, "seed": 7}
    a = chunk_aware_batches(sizes, epoch=3, **kw)
    b = chunk_aware_batches(sizes, epoch=3, **kw)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other_epoch = chunk_aware_batches(sizes, epoch=4, **kw)
    other_seed = chunk_aware_batches(sizes, epoch=3, **{**kw, "seed": 8})
    flat = np.concatenate(a)
    assert not np.array_equal(flat, np.concatenate(other_epoch))
    assert not np.array_equal(flat, np.concatenate(other_seed))
    seq = chunk_aware_batches(sizes, epoch=3, shuffle=False, **kw)
    assert np.concatenate(seq).tolist() == list(range(200))


@pytest.mark.parametrize(("n", "streams"), [(0, 3), (1, 3), (7, 3), (8, 2), (9, 1), (10, 4)])
def test_stream_interleave_order(n: int, streams: int) -> None:
    order = stream_interleave_order(n, streams).tolist()
    assert sorted(order) == list(range(n))
    segments = [order[j::streams] for j in range(streams)]
    lengths = [len(s) for s in segments]
    assert lengths == sorted(lengths, reverse=True) and max(lengths) - min(lengths) <= 1
    assert list(chain.from_iterable(segments)) == list(
        range(n)
    )  # worker j gets contiguous segment j in order


@SETTINGS
@given(sizes=sizes_st, cfg=configs(), world=st.integers(1, 3))
def test_num_streams_interleaves_contiguous_segments(
    sizes: list[int], cfg: dict[str, Any], world: int
) -> None:
    s = cfg["num_streams"]
    for r in range(world):
        plain = chunk_aware_batches(sizes, **{**cfg, "num_streams": 1}, rank=r, world_size=world)
        mixed = chunk_aware_batches(sizes, **cfg, rank=r, world_size=world)
        workers = [[x.tolist() for x in mixed[j::s]] for j in range(s)]
        assert list(chain.from_iterable(workers)) == [x.tolist() for x in plain]
        assert [len(w) for w in workers] == sorted((len(w) for w in workers), reverse=True)


def test_sampler_basics_and_json_state() -> None:
    s = ChunkBatchSampler([37] * 50, 256, seed=5, num_streams=2, rank=1, world_size=2)
    assert s.window == 3 == default_window([37] * 50, 256)
    batches = list(s)
    assert len(batches) == len(s) == 4
    assert all(isinstance(i, int) for b in batches for i in b)
    state = s.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["batches_done"] == 0  # reset after a complete epoch
    assert list(s) == batches  # same epoch again unless set_epoch
    s.set_epoch(1)
    assert list(s) != batches


def test_sampler_defaults_from_torch_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 2)
    monkeypatch.setattr(dist, "get_world_size", lambda: 3)
    s = ChunkBatchSampler([5] * 9, 4)
    assert (s.rank, s.world_size) == (2, 3)
    assert ChunkBatchSampler([5] * 9, 4, rank=0, world_size=1).world_size == 1


@SETTINGS
@given(sizes=sizes_st, cfg=configs(), world=st.integers(1, 3), data=st.data())
def test_resume_equals_uninterrupted(
    sizes: list[int], cfg: dict[str, Any], world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    epoch = cfg.pop("epoch")

    def make() -> ChunkBatchSampler:
        s = ChunkBatchSampler(sizes, rank=rank, world_size=world, **cfg)
        s.set_epoch(epoch)
        return s

    stop = data.draw(st.integers(0, len(make()) + 1))
    full, state = assert_resume_equals_uninterrupted(make, stop)
    assert state["epoch"] == epoch and state["batches_done"] == min(stop, len(full))


def test_resume_with_delivered_count_override_and_same_epoch_set_epoch() -> None:
    sizes = [7] * 30
    s = ChunkBatchSampler(sizes, 16, seed=3, num_streams=2)
    s.set_epoch(2)
    full = list(s)
    it = iter(s)
    for _ in range(6):  # a prefetching loader ran ahead; only 4 reached the user
        next(it)
    state = s.state_dict(batches_done=4)
    fresh = ChunkBatchSampler(sizes, 16, seed=0, num_streams=2)
    fresh.load_state_dict(state)
    assert fresh.seed == 3 and fresh.epoch == 2
    fresh.set_epoch(2)  # training loops call this after restoring: keeps the resume point
    assert fresh.state_dict()["batches_done"] == 4
    assert list(fresh) == full[4:]
    assert list(fresh) == full  # resume is one-shot
    fresh.load_state_dict({**state, "batches_done": 9})
    fresh.set_epoch(3)  # another epoch discards it
    assert len(list(fresh)) == len(full)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("chunk_sizes_sha256", "0" * 64),
        ("num_samples", 1),
        ("batch_size", 8),
        ("world_size", 2),
        ("window", 7),
        ("num_streams", 3),
        ("shuffle", False),
        ("version", 99),
        ("batches_done", 10**6),
        ("batches_done", -1),
        ("epoch", "1"),
    ],
)
def test_load_incompatible_or_malformed_state_raises(key: str, value: object) -> None:
    s = ChunkBatchSampler([4] * 10, 4, window=2)
    state = {**s.state_dict(), key: value}
    with pytest.raises(ValueError, match="got"):
        ChunkBatchSampler([4] * 10, 4, window=2).load_state_dict(state)


def test_state_from_another_rank_is_accepted() -> None:
    a = ChunkBatchSampler([4] * 10, 4, rank=0, world_size=2)
    b = ChunkBatchSampler([4] * 10, 4, rank=1, world_size=2)
    b.load_state_dict(a.state_dict(batches_done=2))
    assert len(list(b)) == len(b) - 2


def test_read_amplification_sequential_is_one() -> None:
    sizes = [10] * 12
    for b in (10, 20, 40):
        batches = chunk_aware_batches(sizes, batch_size=b, window=1, seed=0, epoch=0, shuffle=False)
        assert read_amplification(batches, sizes) == 1.0
    uneven = chunk_aware_batches(sizes, batch_size=15, window=1, seed=0, epoch=0, shuffle=False)
    assert read_amplification(uneven, sizes) > 1.0
    assert read_amplification(uneven, sizes, cache_chunks=1) == 1.0
    assert read_amplification([], sizes) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_default_window_with_window_cache_has_low_amplification(seed: int) -> None:
    sizes = [37] * 50
    w = default_window(sizes, 256)
    batches = chunk_aware_batches(
        sizes, batch_size=256, window=w, seed=seed, epoch=0, num_streams=2
    )
    assert read_amplification(batches, sizes, cache_chunks=w, num_streams=2) <= 1.1
    assert read_amplification(batches, sizes) > 1.1  # the cache is what makes it cheap
    d = describe_sampler(sizes, 256, seed=seed, num_streams=2)
    assert d["window"] == w and d["read_amplification_cached"] <= 1.1


def test_read_order_sorted_models_readers_that_insert_by_chunk_id() -> None:
    # batch 0 ends with chunk 0, which batch 1 needs; sorted insertion evicts it first
    batches = [[9, 0], [1]]
    assert read_amplification(batches, [3, 3, 3, 3], cache_chunks=1) == 1.0
    assert read_amplification(batches, [3, 3, 3, 3], cache_chunks=1, read_order="sorted") == 1.5
    d = describe_sampler([37] * 50, 256, num_streams=2, read_order="sorted")
    assert (
        d["read_amplification_cached"]
        >= describe_sampler([37] * 50, 256, num_streams=2)["read_amplification_cached"]
    )
    assert set(d) == {
        "window",
        "cache_chunks",
        "num_batches",
        "chunks_per_batch",
        "read_amplification",
        "read_amplification_cached",
        "chunk_diversity",
        "displacement",
    }


def test_read_amplification_counts_lru_per_stream() -> None:
    # worker 0 serves batches 0 and 2, worker 1 serves batch 1
    batches = [[0], [3], [1]]
    assert read_amplification(batches, [3, 3], cache_chunks=1, num_streams=2) == 1.0
    assert read_amplification(batches, [3, 3], cache_chunks=1, num_streams=1) == 1.5


def test_shuffle_quality_random_is_one_and_sequential_is_zero() -> None:
    sizes, b = [50] * 40, 64
    n = sum(sizes)
    rng = np.random.default_rng(0)
    scores = []
    for _ in range(5):
        perm = rng.permutation(n)
        scores.append(shuffle_quality([perm[i : i + b] for i in range(0, n, b)], sizes))
    for key in ("chunk_diversity", "displacement"):
        assert np.mean([q[key] for q in scores]) == pytest.approx(1.0, abs=0.05)
    seq = shuffle_quality([np.arange(i, min(i + b, n)) for i in range(0, n, b)], sizes)
    assert seq["displacement"] == 0.0
    assert seq["chunk_diversity"] < 0.05
    wide = describe_sampler(sizes, b, window=len(sizes))  # one window = uniform shuffle
    narrow = describe_sampler(sizes, b, window=1)
    assert wide["chunk_diversity"] > 0.9 > narrow["chunk_diversity"]
    assert narrow["displacement"] > 0.8  # chunk order is still globally shuffled


BAD_CALLS: list[tuple[dict[str, Any], str]] = [
    ({"chunk_sizes": []}, "chunk_sizes"),
    ({"chunk_sizes": [3, 0]}, "chunk_sizes"),
    ({"chunk_sizes": [3.0, 2.0]}, "chunk_sizes"),
    ({"chunk_sizes": [[3]]}, "chunk_sizes"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 2.5}, "batch_size"),
    ({"window": 0}, "window"),
    ({"window": True}, "window"),
    ({"seed": -1}, "seed"),
    ({"epoch": -2}, "epoch"),
    ({"rank": 2, "world_size": 2}, "rank"),
    ({"rank": -1}, "rank"),
    ({"world_size": 0}, "world_size"),
    ({"num_streams": 0}, "num_streams"),
]


@pytest.mark.parametrize(("override", "name"), BAD_CALLS)
def test_invalid_arguments_raise_value_error(override: dict[str, Any], name: str) -> None:
    kw: dict[str, Any] = {"chunk_sizes": [3, 4], "batch_size": 2, "window": 1, "seed": 0}
    kw |= {"epoch": 0, **override}
    with pytest.raises(ValueError, match=rf"{name}.*got"):
        chunk_aware_batches(**kw)
    if name != "epoch":  # the sampler takes its epoch from set_epoch
        skw = {k: v for k, v in kw.items() if k != "epoch"}
        with pytest.raises(ValueError, match=rf"{name}.*got"):
            ChunkBatchSampler(**skw)


def test_metric_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match=r"sample ids must be in \[0, 6\), got 6"):
        read_amplification([[0, 6]], [3, 3])
    with pytest.raises(ValueError, match="cache_chunks"):
        read_amplification([[0]], [3, 3], cache_chunks=-1)
    with pytest.raises(ValueError, match="read_order"):
        read_amplification([], [3, 3], read_order="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_batches"):
        stream_interleave_order(-1, 2)
    with pytest.raises(ValueError, match="batches_done"):
        ChunkBatchSampler([3, 3], 2).state_dict(batches_done=5)


class IndexDataset(Dataset[tuple[int, int]]):
    """Returns (index, id of the worker that loaded it)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int]:
        info = get_worker_info()
        return i, -1 if info is None else info.id


@pytest.mark.timeout(60)
def test_dataloader_with_two_workers_yields_sampler_batches() -> None:
    sizes = [9] * 20
    sampler = ChunkBatchSampler(sizes, 16, seed=1, num_streams=2)
    sampler.set_epoch(1)
    expected = list(sampler)
    ctx = "spawn" if sys.version_info >= (3, 12) else None  # fork warns in threaded processes
    loader = DataLoader(
        IndexDataset(sum(sizes)), batch_sampler=sampler, num_workers=2, multiprocessing_context=ctx
    )
    got = list(loader)
    assert len(loader) == len(expected)
    assert [ids.tolist() for ids, _ in got] == expected
    for t, (_, workers) in enumerate(got):
        assert torch.all(workers == t % 2)  # batch t was loaded by worker t % num_workers
    assert Counter(i for b in expected for i in b) == Counter(range(sum(sizes)))


def test_module_exports() -> None:
    assert set(sampling.__all__) <= set(dir(sampling))
