"""Tests for chunkio.sampling.order and chunkio.sampling: the canonical order, the sampler, the
metrics."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from resume_harness import assert_resume_equals_uninterrupted
from torch.utils.data import DataLoader, Dataset, get_worker_info

from chunkio.errors import IncompatibleStateError
from chunkio.sampling import (
    ChunkBatchSampler,
    describe_sampler,
    order,
    rank_batches,
    read_amplification,
    shuffle_quality,
)
from chunkio.sampling import sampler as sampling
from chunkio.sampling.epoch_order import canonical_batches
from chunkio.sampling.order import OrderSpec, lane_quotas, lane_sizes, split_rows

SETTINGS = settings(max_examples=60, deadline=None)
sizes_st = st.lists(st.integers(1, 12), min_size=1, max_size=16)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "pool": draw(st.integers(0, 60)),
        "lanes": draw(st.integers(1, 30)),
        "seed": draw(st.integers(0, 2**32)),
        "drop_last": draw(st.booleans()),
        "shuffle": draw(st.booleans()),
    }


def global_sequence(sizes: list[int], batch: int, world: int, epoch: int, **kw: Any) -> list:
    """The global batches as the ranks of a ``world``-rank job see them, concatenated by step."""
    per_rank = [
        ChunkBatchSampler(sizes, batch // world, rank=r, world_size=world, **kw)
        for r in range(world)
    ]
    for s in per_rank:
        s.set_epoch(epoch)
    steps = zip(*(s.batches() for s in per_rank), strict=True)
    return [np.concatenate(step).tolist() for step in steps]


@SETTINGS
@given(sizes=sizes_st, cfg=specs(), batch=st.integers(1, 24), epoch=st.integers(0, 3))
def test_every_sample_once_per_epoch_in_batches_of_the_global_size(
    sizes: list[int], cfg: dict[str, Any], batch: int, epoch: int
) -> None:
    seed = cfg.pop("seed")
    batches = canonical_batches(sizes, OrderSpec(batch, **cfg), seed=seed, epoch=epoch)
    n = sum(sizes)
    flat = [i for b in batches for i in b.tolist()]
    if cfg["drop_last"]:
        assert len(flat) == n - n % batch and len(set(flat)) == len(flat)
        assert all(len(b) == batch for b in batches)
    else:
        assert sorted(flat) == list(range(n))
        assert all(len(b) == batch for b in batches[:-1])
    if not cfg["shuffle"]:
        assert flat == list(range(len(flat)))


@SETTINGS
@given(sizes=sizes_st, cfg=specs(), per_rank=st.integers(1, 6), epoch=st.integers(0, 2))
def test_global_batches_are_the_same_for_world_sizes_1_2_3_4(
    sizes: list[int], cfg: dict[str, Any], per_rank: int, epoch: int
) -> None:
    batch = 12 * per_rank  # divisible by 1, 2, 3 and 4
    reference = global_sequence(sizes, batch, 1, epoch, **cfg)
    for world in (2, 3, 4):
        got = global_sequence(sizes, batch, world, epoch, **cfg)
        assert len(got) == len(reference)
        # identical, except that a last partial batch is padded to a multiple of the world
        # size with the epoch's first samples (as torch's DistributedSampler pads)
        assert got[:-1] == reference[:-1]
        if got:
            last, ref_last = got[-1], reference[-1]
            assert last[: len(ref_last)] == ref_last
            assert last[len(ref_last) :] == (reference[0] * world)[: len(last) - len(ref_last)]


def test_ranks_get_disjoint_equal_length_pieces() -> None:
    sizes = [10] * 37
    for world in (1, 2, 3, 4):
        ranks = [
            rank_batches(sizes, OrderSpec(12, 40), seed=1, epoch=0, rank=r, world_size=world)
            for r in range(world)
        ]
        assert len({len(r) for r in ranks}) == 1
        for step in zip(*ranks, strict=True):
            assert len({len(piece) for piece in step}) == 1
        everything = Counter(i for r in ranks for b in r for i in b.tolist())
        assert set(everything) == set(range(370))


def test_epochs_and_seeds_differ_and_repeat() -> None:
    spec = OrderSpec(32, 200)
    a = canonical_batches([9] * 40, spec, seed=3, epoch=0)
    assert [b.tolist() for b in a] == [
        b.tolist() for b in canonical_batches([9] * 40, spec, seed=3, epoch=0)
    ]
    assert a[0].tolist() != canonical_batches([9] * 40, spec, seed=3, epoch=1)[0].tolist()
    assert a[0].tolist() != canonical_batches([9] * 40, spec, seed=4, epoch=0)[0].tolist()


def test_lanes_and_quotas() -> None:
    assert lane_quotas(64, 24).sum() == 64 and lane_quotas(5, 24).tolist() == [1] * 5
    quotas = lane_quotas(100, 24)
    sizes = lane_sizes(10_007, quotas)
    assert sizes.sum() == 10_007
    # every lane runs out within a batch of the others
    assert np.ptp(sizes / quotas) <= 1.0
    assert split_rows(10, np.array([5, 5]), 3) == [(0, 3), (3, 7), (7, 10)]  # too few lanes
    assert split_rows(0, np.array([3, 3]), 2) == [(0, 0), (0, 0)]


def test_a_batch_draws_from_its_lanes_only() -> None:
    """Rows [off_i, off_i + q_i) of every full batch come from lane i's piece of the stream."""
    sizes = [8] * 60
    spec = OrderSpec(24, 96, lanes=4)
    batches = canonical_batches(sizes, spec, seed=0, epoch=0)
    chunk = np.repeat(np.arange(60), 8)
    owners: list[set[int]] = [set(), set(), set(), set()]
    for b in batches:
        for lane in range(4):
            owners[lane] |= set(chunk[b[lane * 6 : (lane + 1) * 6]].tolist())
    # lanes share at most the chunks cut by a lane boundary
    for i in range(4):
        for j in range(i + 1, 4):
            assert len(owners[i] & owners[j]) <= 1


@pytest.mark.parametrize("readers", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("pool", [0, 400, 3000])
def test_loader_readers_decode_each_chunk_about_once(readers: int, pool: int) -> None:
    sizes = [37] * 221 + [15]
    d = describe_sampler(sizes, 256, readers=readers, pool=pool)
    assert d["read_amplification"] <= 1.1
    # a reader holds its lanes' share of the pool, not all of it
    whole = describe_sampler(sizes, 256, readers=1, pool=pool)["cache_chunks"]
    assert d["cache_chunks"] <= whole / readers + 3 * 24 / readers + 6


def test_pool_mixes_labels_of_a_class_sorted_dataset() -> None:
    sizes = [37] * 221 + [15]
    labels = np.repeat(np.arange(20), 410)[: sum(sizes)]
    no_pool = describe_sampler(sizes, 256, pool=0, lanes=1, labels=labels)
    pooled = describe_sampler(sizes, 256, pool=2400, labels=labels)
    assert no_pool["distinct_labels_ratio"] < 0.5
    assert pooled["distinct_labels_ratio"] >= 0.95
    assert pooled["read_amplification"] <= 1.1
    assert pooled["chunk_diversity"] > 2 * no_pool["chunk_diversity"]


def test_sampler_basics_and_json_state() -> None:
    s = ChunkBatchSampler([37] * 50, 128, seed=5, rank=1, world_size=2, pool=512)
    assert s.spec.batch_size == 256 and s.pool == 512
    batches = list(s)
    assert len(batches) == len(s) == 8
    assert all(len(b) == 128 for b in batches[:-1])
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
@given(sizes=sizes_st, cfg=specs(), world=st.integers(1, 3), data=st.data())
def test_resume_equals_uninterrupted(
    sizes: list[int], cfg: dict[str, Any], world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    epoch = data.draw(st.integers(0, 3))
    batch = data.draw(st.integers(1, 8))

    def make() -> ChunkBatchSampler:
        s = ChunkBatchSampler(sizes, batch, rank=rank, world_size=world, **cfg)
        s.set_epoch(epoch)
        return s

    stop = data.draw(st.integers(0, len(make()) + 1))
    full, state = assert_resume_equals_uninterrupted(make, stop)
    assert state["epoch"] == epoch and state["batches_done"] == min(stop, len(full))


@pytest.mark.parametrize(("before", "after"), [(1, 2), (2, 4), (4, 1), (2, 3)])
def test_resume_onto_another_world_size_continues_the_global_sequence(
    before: int, after: int
) -> None:
    sizes, batch, stop = [11] * 30, 48, 3
    reference = global_sequence(sizes, batch, 1, 2, seed=9, pool=100)
    old = ChunkBatchSampler(sizes, batch // before, rank=0, world_size=before, seed=9, pool=100)
    old.set_epoch(2)
    state = json.loads(json.dumps(old.state_at(stop)))
    ranks = [
        ChunkBatchSampler(sizes, batch // after, rank=r, world_size=after, pool=100)
        for r in range(after)
    ]
    for s in ranks:
        s.load_state_dict(state)
        s.set_epoch(2)  # loops call this after restoring: keeps the resume point
    steps = [np.concatenate(step).tolist() for step in zip(*ranks, strict=True)]
    assert steps[:-1] == reference[stop:-1]
    seen = [i for step in steps for i in step] + [i for b in reference[:stop] for i in b]
    assert set(seen) == set(range(sum(sizes)))  # 0 drops
    assert len(seen) - len(set(seen)) <= after  # duplicates only from the last batch's padding


def test_resume_with_delivered_count_override_and_same_epoch_set_epoch() -> None:
    sizes = [7] * 30
    s = ChunkBatchSampler(sizes, 16, seed=3)
    s.set_epoch(2)
    full = list(s)
    it = iter(s)
    for _ in range(6):  # a prefetching loader ran ahead; only 4 reached the user
        next(it)
    state = s.state_at(4)
    fresh = ChunkBatchSampler(sizes, 16, seed=0)
    fresh.load_state_dict(state)
    assert fresh.seed == 3 and fresh.epoch == 2
    fresh.set_epoch(2)
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
        ("global_batch_size", 8),
        ("pool", 7),
        ("lanes", 3),
        ("shuffle", False),
        ("version", 1),
        ("batches_done", 10**6),
        ("batches_done", -1),
        ("epoch", "1"),
        ("seed", 1.5),
    ],
)
def test_load_incompatible_or_malformed_state_raises(key: str, value: object) -> None:
    s = ChunkBatchSampler([4] * 10, 4, pool=16)
    state = {**s.state_dict(), key: value}
    with pytest.raises(IncompatibleStateError, match="got"):
        ChunkBatchSampler([4] * 10, 4, pool=16).load_state_dict(state)
    with pytest.raises(IncompatibleStateError, match="version"):
        s.load_state_dict("not a dict")  # type: ignore[arg-type]


def test_state_from_another_batch_size_names_the_global_batch() -> None:
    state = ChunkBatchSampler([4] * 10, 4, world_size=2, rank=0).state_dict()
    with pytest.raises(IncompatibleStateError, match=r"global_batch_size is 4 here.*got 8"):
        ChunkBatchSampler([4] * 10, 4, world_size=1).load_state_dict(state)


def test_read_amplification_models_the_pool() -> None:
    sizes = [10] * 20
    sequential = [list(range(i, min(i + 7, 200))) for i in range(0, 200, 7)]
    assert read_amplification(sequential, sizes) == 1.0
    alternating = [[0], [15], [1], [16]]
    assert read_amplification(alternating, [10, 10]) == 2.0
    assert read_amplification(alternating, [10, 10], cache_chunks=2) == 1.0
    # two readers each reading half of every batch
    assert read_amplification([[0, 15], [1, 16]], [10, 10], readers=2) == 1.0


def test_shuffle_quality_random_is_one_and_sequential_is_zero() -> None:
    sizes = [40] * 50
    rng = np.random.default_rng(0)
    perm = rng.permutation(2000)
    random = shuffle_quality([perm[i : i + 64] for i in range(0, 2000, 64)], sizes)
    sequential = shuffle_quality([np.arange(i, i + 80) for i in range(0, 2000, 80)], sizes)
    assert 0.9 < random["chunk_diversity"] < 1.1 and 0.9 < random["displacement"] < 1.1
    assert sequential["chunk_diversity"] == 0.0 and sequential["displacement"] == 0.0
    labels = np.repeat(np.arange(10), 200)
    mixed = shuffle_quality([perm[i : i + 64] for i in range(0, 2000, 64)], sizes, labels)
    assert 0.95 < mixed["distinct_labels_ratio"] <= 1.05


BAD_CALLS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"chunk_sizes": []}, ValueError, "chunk_sizes"),
    ({"chunk_sizes": [3, 0]}, ValueError, "chunk_sizes"),
    ({"chunk_sizes": [3.0, 2.0]}, ValueError, "chunk_sizes"),
    ({"chunk_sizes": [[3]]}, ValueError, "chunk_sizes"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 2.5}, TypeError, "batch_size"),
    ({"pool": -1}, ValueError, "pool"),
    ({"pool": 1.5}, TypeError, "pool"),
    ({"lanes": 0}, ValueError, "lanes"),
    ({"lanes": True}, TypeError, "lanes"),
    ({"seed": -1}, ValueError, "seed"),
    ({"seed": "3"}, TypeError, "seed"),
    ({"rank": 2, "world_size": 2}, ValueError, "rank"),
    ({"rank": -1}, ValueError, "rank"),
    ({"world_size": 0}, ValueError, "world_size"),
    ({"shuffle": "yes"}, TypeError, "shuffle"),
]


@pytest.mark.parametrize(("override", "error", "name"), BAD_CALLS)
def test_invalid_arguments_raise_clear_errors(
    override: dict[str, Any], error: type[Exception], name: str
) -> None:
    kw: dict[str, Any] = {"chunk_sizes": [3, 4], "batch_size": 2, "pool": 4, "seed": 0, **override}
    with pytest.raises(error, match=rf"{name}.*got"):
        ChunkBatchSampler(**kw)


def test_metric_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match=r"sample ids must be in \[0, 6\), got 6"):
        read_amplification([[0, 6]], [3, 3])
    with pytest.raises(ValueError, match="cache_chunks"):
        read_amplification([[0]], [3, 3], cache_chunks=-1)
    with pytest.raises(IncompatibleStateError, match="batches_done"):
        ChunkBatchSampler([3, 3], 2).state_at(5)
    with pytest.raises(ValueError, match="divisible by world_size 3"):
        rank_batches([4, 4], OrderSpec(4, 0), seed=0, epoch=0, world_size=3)


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
    sampler = ChunkBatchSampler(sizes, 16, seed=1)
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
    assert set(order.__all__) <= set(dir(order))
