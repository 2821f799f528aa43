"""The epoch's order generated block by block (:mod:`chunkio.sampling.epoch_order`) against its
definition, the whole-epoch sort kept in ``reference_order.py``: the same batches for every
setting and resume point, ties broken the same way, and the work and memory of a first batch
or a resume bounded by the pool, not by the epoch.
"""

from __future__ import annotations

import tracemalloc
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_order import eager_rank_batches, eager_stream

from chunkio.sampling import epoch_order
from chunkio.sampling.epoch_order import EpochOrder, _Lane, _Stream
from chunkio.sampling.order import OrderSpec, lane_quotas
from chunkio.sampling.sampler import ChunkBatchSampler


def _lists(batches: Any) -> list[list[int]]:
    return [np.asarray(b).tolist() for b in batches]


@st.composite
def settings_(draw: st.DrawFn) -> tuple[Any, ...]:
    sizes = draw(
        st.lists(st.integers(1, draw(st.sampled_from([2, 9, 60]))), min_size=1, max_size=40)
    )
    batch = draw(st.integers(1, 48))
    world = draw(st.sampled_from([w for w in (1, 2, 3, 4, 8) if batch % w == 0]))
    spec = OrderSpec(
        batch,
        draw(st.sampled_from([0, 1, 5, 37, 256, 5000])),
        lanes=draw(st.integers(1, 30)),
        shuffle=draw(st.booleans()),
        drop_last=draw(st.booleans()),
    )
    seed, epoch = draw(st.integers(0, 2**32)), draw(st.integers(0, 5))
    return sizes, spec, seed, epoch, draw(st.integers(0, world - 1)), world


def _lazy_equals_eager(
    setting: tuple[Any, ...], start_share: float, round_samples: int, min_block: int
) -> None:
    sizes, spec, seed, epoch, rank, world = setting
    want = eager_rank_batches(sizes, spec, seed=seed, epoch=epoch, rank=rank, world_size=world)
    start = round(start_share * len(want))
    # small rounds and blocks put their boundaries everywhere a merge can go wrong
    with (
        mock.patch.object(epoch_order, "ROUND_SAMPLES", round_samples),
        mock.patch.object(epoch_order, "MIN_BLOCK", min_block),
    ):
        order = EpochOrder(sizes, spec, seed=seed, epoch=epoch)
        got = list(order.rank_batches(rank, world, start=start))
    assert len(order) == len(want)
    assert _lists(got) == _lists(want[start:])
    assert all(b.dtype == np.int64 for b in got)


LAZY = {
    "setting": settings_(),
    "start_share": st.floats(0, 1),
    "round_samples": st.sampled_from([1, 7, 64, epoch_order.ROUND_SAMPLES]),
    "min_block": st.sampled_from([1, 3, epoch_order.MIN_BLOCK]),
}


@settings(max_examples=100, deadline=None)
@given(**LAZY)
def test_lazy_batches_equal_the_whole_epoch_sort(
    setting: tuple[Any, ...], start_share: float, round_samples: int, min_block: int
) -> None:
    _lazy_equals_eager(setting, start_share, round_samples, min_block)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(**LAZY)
def test_lazy_batches_equal_the_whole_epoch_sort_many_examples(
    setting: tuple[Any, ...], start_share: float, round_samples: int, min_block: int
) -> None:
    """The same property over ten times the examples (``make soak``)."""
    _lazy_equals_eager(setting, start_share, round_samples, min_block)


@pytest.mark.parametrize("pool", [0, 1024, 60_000])
def test_many_rounds_equal_the_whole_epoch_sort(pool: int) -> None:
    sizes = np.random.default_rng(7).integers(1000, 4001, 120)  # ~300k samples: many rounds
    spec = OrderSpec(256, pool)
    want = eager_stream(sizes, spec, seed=11, epoch=3)
    order = EpochOrder(sizes, spec, seed=11, epoch=3)
    assert np.array_equal(np.concatenate(list(order.batches())), want)
    start = int(0.9 * len(order))
    assert np.array_equal(np.concatenate(list(order.batches(start))), want[start * 256 :])


class _FakeStream(_Stream):
    """A stream of ids ``0..n-1`` with the given uniforms."""

    def __init__(self, uniforms: Any) -> None:
        self.u = uniforms

    def ids(self, lo: int, hi: int) -> Any:
        return np.arange(lo, hi, dtype=np.int64)

    def uniforms(self, lo: int, hi: int) -> Any:
        return self.u[lo:hi]


N = 500
#: offsets 0, 3, 2, 1 (x window 4): samples of different emit positions share a key exactly
QUANTISED = (np.arange(N) * 7 % 4) / 4.0
#: any offsets, but next to a lane base of ~2**51 keys are rounded to halves: ties by rounding
ROUNDED = np.random.default_rng(5).random(N)


@pytest.mark.parametrize("index", [2, 3])  # forwards and backwards
@pytest.mark.parametrize(("uniforms", "span"), [(QUANTISED, 10.0), (ROUNDED, 2.0**50)])
def test_ties_are_broken_in_stream_order(index: int, uniforms: Any, span: float) -> None:
    window = 4.0
    pos = np.arange(N)
    emit = N - 1 - pos if index % 2 else pos
    keys = float(index) * span + (emit + uniforms * np.float64(window))
    assert np.unique(keys).size < N * 0.9  # ties exist, so the test tells tie-breaks apart
    want = np.argsort(keys, kind="stable")  # the definition: stable, in stream order
    takes = np.random.default_rng(index).integers(1, 20, N)  # block ends everywhere
    for block in (1, 5, 64):
        with mock.patch.object(epoch_order, "MIN_BLOCK", block):
            lane = _Lane(_FakeStream(uniforms), 0, N, index=index, window=window, span=span)
            got = np.concatenate([lane.take(int(k)) for k in takes])
            assert got.tolist() == want.tolist()
            for k in (1, 9, 130, N - 1):
                lane = _Lane(_FakeStream(uniforms), 0, N, index=index, window=window, span=span)
                lane.skip(k)
                assert lane.take(N).tolist() == want[k:].tolist()


def test_stream_segments_equal_one_draw() -> None:
    """PCG64 on the installed NumPy: ``advance(k)`` then ``random(m)`` is a slice of
    ``random(n)``; the stream's ids are the eager chunk stream's."""
    sizes = np.array([5, 1, 7, 3, 9, 2])
    rng = np.random.default_rng([4, 1])
    stream = _Stream(sizes, rng)
    whole = rng.random(int(sizes.sum()))
    ids = eager_stream(sizes, OrderSpec(27, 0, lanes=1), seed=4, epoch=1)
    for lo, hi in ((0, 27), (3, 4), (5, 17), (26, 27), (9, 9)):
        assert np.array_equal(stream.uniforms(lo, hi), whole[lo:hi])
        assert stream.ids(lo, hi).tolist() == ids[lo:hi].tolist()


def _drawn(order: EpochOrder, start: int) -> int:
    """Uniforms drawn (samples merged) to produce batch ``start`` of ``order``."""
    drawn = 0
    uniforms = _Stream.uniforms

    def counting(self: _Stream, lo: int, hi: int) -> Any:
        nonlocal drawn
        drawn += hi - lo
        return uniforms(self, lo, hi)

    with mock.patch.object(_Stream, "uniforms", counting):
        next(order.batches(start))
    return drawn


@pytest.mark.parametrize("chunks", [50, 500])
def test_a_first_batch_or_a_resume_merges_one_pool_per_lane(chunks: int) -> None:
    spec = OrderSpec(256, 4096)
    order = EpochOrder(np.full(chunks, 2000), spec, seed=0, epoch=0)
    lanes = lane_quotas(256, spec.lanes).size
    per_lane = epoch_order.MIN_BLOCK + 2 * (spec.pool // lanes + 3) + 256
    for start in (0, len(order) // 2, int(0.9 * len(order)), len(order) - 1):
        assert _drawn(order, start) <= lanes * per_lane  # not the batches before it


def _peak(run: Any) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_for_the_order_is_bounded() -> None:
    """2M rows: the whole-epoch sort peaked at ~88 B/sample; block by block the first batch
    and a resume cost a pool, and a pass over the epoch (batches not kept) one round."""
    n = 2_000_000
    order = EpochOrder(np.full(n // 2000, 2000), OrderSpec(256, 1024), seed=0, epoch=0)
    next(order.batches())  # imports and first-call allocations out of the measure
    assert _peak(lambda: next(order.batches())) < n * 0.5
    assert _peak(lambda: next(order.batches(int(0.9 * len(order))))) < n * 0.5
    assert _peak(lambda: sum(1 for _ in order.batches())) < n * 8


def test_the_sampler_iterates_lazily_and_resumes() -> None:
    sizes = [7, 3, 11, 5, 9]
    s = ChunkBatchSampler(sizes, 3, pool=6, lanes=4, seed=2, world_size=2, rank=1)
    whole = _lists(s.batches())
    assert _lists(s.iter_batches()) == whole
    assert _lists(s.iter_batches(start=4)) == whole[4:]
    s.load_state_dict(s.state_at(2))
    assert _lists(s.iter_arrays()) == whole[2:]
    with pytest.raises(ValueError, match=r"start must be an int in \[0, 6\], got 7"):
        s.iter_batches(start=7)
