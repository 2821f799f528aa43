"""The global order (:mod:`chunkio.sampling.order`) pinned and checked against longhand models
(found by mutation testing: ``make mutate``).

The sequence itself is pinned: a checkpoint resumes by replaying it, and DDP ranks and loader
workers each recompute it, so any change to it must be deliberate (and this file updated with
a note on resuming older checkpoints).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio.errors import IncompatibleStateError
from chunkio.sampling.epoch_order import canonical_stream
from chunkio.sampling.order import (
    OrderSpec,
    check_state,
    pool_capacity_chunks,
    rank_rows,
    split_rows,
)

PINNED = [
    (([5, 3, 4, 6, 2], OrderSpec(4, 6, lanes=2), 1, 0),
     [19, 18, 17, 16, 0, 2, 14, 15, 1, 4, 13, 12, 3, 5, 11, 10, 6, 7, 9, 8]),
    (([5, 3, 4, 6, 2], OrderSpec(6, 0, lanes=3), 2, 1),
     [0, 1, 14, 13, 15, 16, 2, 3, 12, 19, 17, 5, 4, 8, 18, 11, 6, 7, 9, 10]),
    (([3, 3, 3, 3, 3, 3], OrderSpec(5, 8, lanes=2), 0, 3),
     [4, 3, 9, 14, 12, 10, 5, 0, 13, 8, 2, 11, 1, 7, 6, 16, 15, 17]),
    (([7, 2, 9], OrderSpec(3, 4, lanes=1), 5, 0),
     [8, 9, 10, 7, 11, 13, 12, 14, 17, 16, 15, 0, 1, 4, 2, 3, 5, 6]),
    (([4, 4, 4, 4], OrderSpec(4, 0, lanes=4), 0, 0),
     [8, 3, 4, 15, 9, 2, 5, 14, 10, 1, 6, 13, 11, 0, 7, 12]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "expected"), PINNED)
def test_the_global_order_is_pinned(case, expected) -> None:
    sizes, spec, seed, epoch = case
    got = canonical_stream(sizes, spec, seed=seed, epoch=epoch)
    assert got.tolist() == expected and got.dtype == np.int64


def test_seed_and_epoch_are_checked_by_name() -> None:
    spec = OrderSpec(4, 0)
    with pytest.raises(ValueError) as info:
        canonical_stream([3], spec, seed=-1, epoch=0)
    assert str(info.value) == "seed must be an int >= 0, got -1"
    with pytest.raises(ValueError) as info:
        canonical_stream([3], spec, seed=0, epoch=-2)
    assert str(info.value) == "epoch must be an int >= 0, got -2"
    unshuffled = canonical_stream([3, 2], OrderSpec(2, 0, shuffle=False), seed=0, epoch=0)
    assert unshuffled.tolist() == [0, 1, 2, 3, 4] and unshuffled.dtype == np.int64


def test_order_spec_json_names_every_field() -> None:
    spec = OrderSpec(8, 32, lanes=4, shuffle=False, drop_last=True)
    assert spec.to_json() == {
        "global_batch_size": 8, "pool": 32, "lanes": 4, "shuffle": False, "drop_last": True,
    }  # fmt: skip


def test_check_state_messages() -> None:
    config = {"seed": 0, "pool": 8}
    for state, got in (([1, 2], "'list'"), ({"version": 2}, "2"), ({}, "None")):
        with pytest.raises(IncompatibleStateError) as info:
            check_state(state, version=1, config=config, what="sampler")
        assert str(info.value) == f"expected a sampler state dict of version 1, got {got}"
    state = {"version": 1, "seed": 0, "pool": 16}
    with pytest.raises(IncompatibleStateError) as info:
        check_state(state, version=1, config=config, what="sampler")
    assert str(info.value) == "incompatible sampler state: pool is 8 here, got 16"
    with pytest.raises(IncompatibleStateError) as info:
        check_state(state, version=1, config=config, what="loader", hints={"pool": " (hint)"})
    assert str(info.value) == "incompatible loader state: pool is 8 here, got 16 (hint)"
    with pytest.raises(IncompatibleStateError) as info:
        check_state(state, version=1, config=config, what="loader", hints={"seed": " (no)"})
    assert str(info.value) == "incompatible loader state: pool is 8 here, got 16"


def _split_model(n: int, quotas: list[int], parts: int) -> list[tuple[int, int]]:
    """Cuts at the lane boundary nearest each even split point (the first of two equally
    near), or at the rounded even split when there are fewer boundaries than cuts."""
    bounds = [b for b in np.cumsum(quotas)[:-1].tolist() if b < n]
    cuts = []
    for j in range(1, parts):
        target = n * j / parts
        if len(bounds) >= parts - 1:
            cut = min(bounds, key=lambda b: (abs(b - target), bounds.index(b)))
        else:
            cut = round(target)
        cuts.append(cut)
    edges = [0, *cuts, n]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=8),
    st.integers(1, 5),
    st.integers(0, 3),
)
def test_split_rows_equals_the_model(quotas, parts, short) -> None:
    n = max(0, sum(quotas) - short)  # a last batch may be short
    got = split_rows(n, np.asarray(quotas, np.int64), parts)
    assert got == _split_model(n, quotas, parts)
    assert got[0][0] == 0 and got[-1][1] == n
    assert all(a <= b for a, b in got) and all(got[i][1] == got[i + 1][0] for i in range(parts - 1))


def test_split_rows_examples() -> None:
    assert split_rows(10, np.array([4, 3, 3]), 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_rows(6, np.array([4, 3, 3]), 3) == [(0, 2), (2, 4), (4, 6)]  # one boundary < n
    assert split_rows(7, np.array([4, 3, 3]), 2) == [(0, 4), (4, 7)]


def test_rank_rows_pads_only_what_is_missing() -> None:
    batch, pad = np.arange(10, 16), np.array([90, 91, 92])
    assert [rank_rows(batch, pad, r, 3).tolist() for r in range(3)] == [
        [10, 11], [12, 13], [14, 15],
    ]  # fmt: skip
    assert [rank_rows(batch, pad, r, 4).tolist() for r in range(4)] == [
        [10, 11], [12, 13], [14, 15], [90, 91],
    ]  # fmt: skip
    assert rank_rows(np.arange(5), np.array([9]), 2, 3).tolist() == [4, 9]


def test_pool_capacity_chunks_formula() -> None:
    spec = OrderSpec(batch_size=24, pool=96, lanes=4)
    # per lane: 96 / 4 pool samples + 6 batch rows = 30 samples -> 4 chunks of 8, + 2 edges
    assert pool_capacity_chunks(spec, 8, lanes_read=2) == 2 * 6
    assert pool_capacity_chunks(spec, 8, lanes_read=9) == 4 * 6  # at most every lane
    assert pool_capacity_chunks(spec, 8, lanes_read=0) == 1 * 6  # at least one
    assert pool_capacity_chunks(OrderSpec(batch_size=5, pool=0, lanes=24), 3, lanes_read=1) == 3


def test_spec_and_quota_arguments_are_checked_by_name() -> None:
    from chunkio.sampling.order import lane_quotas

    for kwargs, message in (
        ({"batch_size": 0, "pool": 0}, "batch_size must be an int >= 1, got 0"),
        ({"batch_size": 2, "pool": -1}, "pool must be an int >= 0, got -1"),
        ({"batch_size": 2, "pool": 0, "lanes": 0}, "lanes must be an int >= 1, got 0"),
    ):
        with pytest.raises(ValueError) as info:
            OrderSpec(**kwargs)
        assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        lane_quotas(0, 2)
    assert str(info.value) == "batch_size must be an int >= 1, got 0"
    with pytest.raises(ValueError) as info:
        lane_quotas(4, 0)
    assert str(info.value) == "lanes must be an int >= 1, got 0"


def test_lane_sizes_give_the_largest_remainders_first() -> None:
    from chunkio.sampling.order import lane_sizes

    # exact shares 30/7, 20/7, 20/7: remainders 2, 6, 6 -> lanes 1 and 2 get the two extra
    assert lane_sizes(10, np.array([3, 2, 2])).tolist() == [4, 3, 3]
    assert lane_sizes(10, np.array([2, 1])).tolist() == [7, 3]
    assert lane_sizes(5, np.array([1, 1, 1])).tolist() == [2, 2, 1]  # ties: lower lane first


def test_check_int_and_as_sizes_messages() -> None:
    from chunkio.sampling.order import as_sizes, check_int

    cases = [
        (lambda: check_int("n", 1.5, 0), TypeError, "n must be an int, got 1.5 (float)"),
        (lambda: check_int("n", True, 0), TypeError, "n must be an int, got True (bool)"),
        (lambda: check_int("n", -1, 0), ValueError, "n must be an int >= 0, got -1"),
        (lambda: check_int("n", 7, 0, 5), ValueError, "n must be an int in [0, 5], got 7"),
        (lambda: as_sizes([[1]]), ValueError, "chunk_sizes must be a non-empty 1-D sequence "
         "of ints, got list with shape (1, 1) and dtype int64"),
        (lambda: as_sizes(()), ValueError, "chunk_sizes must be a non-empty 1-D sequence of "
         "ints, got tuple with shape (0,) and dtype float64"),
        (lambda: as_sizes([3, 1, 0]), ValueError,
         "chunk_sizes must be positive, got chunk_sizes[2] = np.int64(0)"),
    ]  # fmt: skip
    for call, error, message in cases:
        with pytest.raises(error) as info:
            call()
        assert str(info.value) == message
    assert check_int("n", np.int32(5), 0, 5) == 5
    assert as_sizes(np.array([2, 3], np.int32)).dtype == np.int64
