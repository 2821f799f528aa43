"""The sampler's contract, value by value: defaults, every refusal's exact message, the saved
state's format, each reader's rows, and the metrics against brute-force models.

``test_sampling.py`` checks the properties (every sample once, resume equals an
uninterrupted run, any world size); these pin what a user reads and relies on: the message
naming the bad argument, a checkpoint written today restoring tomorrow, the cache a reader is
given, and metrics equal to what their docstrings define.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math

import numpy as np
import pytest

from chunkio.errors import IncompatibleStateError
from chunkio.sampling import (
    ChunkBatchSampler,
    describe_sampler,
    rank_batches,
    read_amplification,
    shuffle_quality,
)
from chunkio.sampling.epoch_order import canonical_batches
from chunkio.sampling.order import OrderSpec, lane_quotas, split_rows
from chunkio.sampling.sampler import num_batches


def _lists(batches: list[np.ndarray]) -> list[list[int]]:
    return [b.tolist() for b in batches]


# -- defaults and refusals ---------------------------------------------------------------------


def test_defaults_are_one_rank_no_drop_seed_0_epoch_0() -> None:
    assert num_batches(10, 3) == 4 == num_batches(10, 3, 1, False)
    assert num_batches(10, 3, drop_last=True) == 3 and num_batches(10, 3, 2) == 2
    spec = OrderSpec(4, 8)
    assert _lists(rank_batches([3, 5], spec, seed=1, epoch=0)) == _lists(
        canonical_batches([3, 5], spec, seed=1, epoch=0)
    )
    s = ChunkBatchSampler([3, 5, 4], 4, world_size=1)
    assert s.seed == 0 and s.epoch == 0
    assert _lists(s.batches()) == _lists(ChunkBatchSampler([3, 5, 4], 4, seed=0).batches())


def test_drop_last_reaches_the_order_and_the_length() -> None:
    s = ChunkBatchSampler([5, 5, 3], 4, drop_last=True, seed=2, world_size=1)
    assert s.drop_last is True and len(s) == 3
    batches = list(s)
    assert len(batches) == 3 and all(len(b) == 4 for b in batches)


def test_batches_carry_their_epoch() -> None:
    s = ChunkBatchSampler([3, 3], 2, world_size=1)
    s.set_epoch(4)
    got = list(s)
    assert [b.epoch for b in got] == [4, 4, 4]  # type: ignore[attr-defined]
    assert _lists(s.batches(1)) != _lists(s.batches())  # an explicit epoch is honoured
    other = ChunkBatchSampler([3, 3], 2, world_size=1)
    other.set_epoch(1)
    assert _lists(s.batches(1)) == _lists(other.batches())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: num_batches(5, 0), r"^batch_size must be an int >= 1, got 0$"),
        (lambda: num_batches(5, 2, 0), r"^world_size must be an int >= 1, got 0$"),
        (
            lambda: rank_batches([4], OrderSpec(4, 0), seed=0, epoch=0, world_size=0),
            r"^world_size must be an int >= 1, got 0$",
        ),
        (
            lambda: rank_batches([4], OrderSpec(4, 0), seed=0, epoch=0, rank=2, world_size=2),
            r"^rank must be an int in \[0, 1\], got 2$",
        ),
        (
            lambda: read_amplification([[0]], [3], cache_chunks=-1),
            r"^cache_chunks must be an int >= 0, got -1$",
        ),
        (
            lambda: read_amplification([[0]], [3], readers=0),
            r"^readers must be an int >= 1, got 0$",
        ),
        (lambda: ChunkBatchSampler([3], 0), r"^batch_size must be an int >= 1, got 0$"),
        (lambda: ChunkBatchSampler([3], 1, seed=-2), r"^seed must be an int >= 0, got -2$"),
        (
            lambda: ChunkBatchSampler([3], 1, world_size=0),
            r"^world_size must be an int >= 1, got 0$",
        ),
        (
            lambda: ChunkBatchSampler([3], 1, rank=3, world_size=2),
            r"^rank must be an int in \[0, 1\], got 3$",
        ),
        (lambda: ChunkBatchSampler([3], 1).set_epoch(-1), r"^epoch must be an int >= 0, got -1$"),
        (
            lambda: ChunkBatchSampler([3], 1).state_at(-1),
            r"^batches_done must be an int >= 0, got -1$",
        ),
    ],
)
def test_refusals_name_the_argument(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("seed", 1.5, r"^malformed sampler state: seed must be an int, got 1\.5 \(float\)$"),
        ("epoch", -1, r"^malformed sampler state: epoch must be an int >= 0, got -1$"),
        ("batches_done", "2", r"^malformed sampler state: batches_done must be an int, got '2'"),
        ("pool", 7, r"^incompatible sampler state: pool is 16 here, got 7$"),
        (
            "global_batch_size",
            8,
            r"^incompatible sampler state: global_batch_size is 4 here, got 8 \(keep batch_size "
            r"\* world_size fixed when resuming on another world size\)$",
        ),
    ],
)
def test_state_refusals_say_what_and_why(key: str, value: object, message: str) -> None:
    s = ChunkBatchSampler([4] * 10, 4, pool=16, world_size=1)
    with pytest.raises(IncompatibleStateError, match=message):
        s.load_state_dict({**s.state_dict(), key: value})


# -- the saved state -------------------------------------------------------------------------


def test_a_saved_state_keeps_its_format() -> None:
    """A checkpoint written by this version must restore in the next: the keys, and the
    digest of the chunk sizes (little-endian int64), are part of the format."""
    s = ChunkBatchSampler([3, 5, 4], 4, seed=2, rank=1, world_size=2, pool=8, lanes=3)
    digest = hashlib.sha256(np.array([3, 5, 4], "<i8").tobytes()).hexdigest()
    assert s.state_dict() == {
        "version": 2,
        "seed": 2,
        "epoch": 0,
        "batches_done": 0,
        "rank": 1,
        "world_size": 2,
        "global_batch_size": 8,
        "pool": 8,
        "lanes": 3,
        "shuffle": True,
        "drop_last": False,
        "num_chunks": 3,
        "num_samples": 12,
        "chunk_sizes_sha256": digest,
    }


def test_a_state_over_other_chunks_of_the_same_total_is_refused() -> None:
    state = ChunkBatchSampler([3, 5], 2, world_size=1).state_dict()
    with pytest.raises(IncompatibleStateError, match="chunk_sizes_sha256"):
        ChunkBatchSampler([5, 3], 2, world_size=1).load_state_dict(state)
    with pytest.raises(IncompatibleStateError, match=r"^incompatible sampler state: num_chunks"):
        ChunkBatchSampler([4, 2, 2], 2, world_size=1).load_state_dict(state)


# -- each reader's rows ------------------------------------------------------------------------


def _lane_of_rows(global_batch: int, lanes: int) -> np.ndarray:
    return np.repeat(np.arange(min(lanes, global_batch)), lane_quotas(global_batch, lanes))


@pytest.mark.parametrize("lanes", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_reader_rows_cut_a_ranks_rows_along_its_lanes(lanes: int, world: int) -> None:
    for per_rank, readers in itertools.product((1, 2, 4, 5, 9), (1, 2, 3, 4)):
        owner = _lane_of_rows(per_rank * world, lanes)
        for rank in range(world):
            s = ChunkBatchSampler([7] * 9, per_rank, rank=rank, world_size=world, lanes=lanes)
            mine = owner[rank * per_rank : (rank + 1) * per_rank]
            # the rank's rows, as runs of one lane each
            runs = np.array([len(list(g)) for _, g in itertools.groupby(mine.tolist())])
            want = split_rows(per_rank, runs, readers)
            assert s.reader_rows(per_rank, readers) == want, (per_rank, rank, readers)
            # a reader touches at most lanes_per_reader lanes, and the bound is not loose
            touched = [len(set(mine[a:b].tolist())) for a, b in want]
            bound = s.lanes_per_reader(readers)
            assert max(touched) <= bound <= max(touched) + 3, (per_rank, rank, readers)


def test_reader_rows_answers_each_question_separately() -> None:
    s = ChunkBatchSampler([5] * 8, 12, lanes=4, world_size=1)
    assert s.reader_rows(12, 2) == [(0, 6), (6, 12)]
    assert s.reader_rows(6, 3) == split_rows(6, np.array([3, 3, 3, 3]), 3)
    assert s.reader_rows(12, 2) == [(0, 6), (6, 12)]


def test_lanes_per_reader_and_capacity_values() -> None:
    s = ChunkBatchSampler([10] * 40, 24, lanes=6, pool=96, world_size=1)
    # 6 lanes of 4 rows: one reader sees 6 lanes (+1 for a lane cut at a batch edge, +1 spare)
    assert [s.lanes_per_reader(r) for r in (1, 2, 3, 7)] == [8, 5, 4, 2]
    assert s.capacity_chunks(10) == s.capacity_chunks(10, 1)
    # per lane: pool/lanes + quota = 16 + 4 = 20 samples -> 2 chunks + 2 edges; 6 lanes
    assert s.capacity_chunks(10) == 6 * 4


# -- the metrics against models ----------------------------------------------------------------


def _model_diversity(batches: list[list[int]], sizes: list[int]) -> float:
    """sum (D - L) / sum (E - L), with E from every b-subset of the samples (brute force)."""
    chunk = np.repeat(np.arange(len(sizes)), sizes)
    n = len(chunk)
    seen = expected = 0.0
    for batch in batches:
        b = len(set(batch))
        if not b:
            continue
        lower = next(k for k in range(1, len(sizes) + 1) if sum(sorted(sizes)[::-1][:k]) >= b)
        combos = list(itertools.combinations(range(n), b))
        e = sum(len(set(chunk[list(c)].tolist())) for c in combos) / len(combos)
        seen += len(set(chunk[batch].tolist())) - lower
        expected += e - lower
    return seen / expected if expected > 1e-9 else 1.0


@pytest.mark.parametrize(
    ("sizes", "batches"),
    [
        ([2, 3], [[0, 1], [2, 3], [4]]),  # b = 2 of n = 5
        ([2, 3, 1], [[0, 2, 5], [1, 3, 4]]),  # unequal sizes: the lower bound uses the largest
        ([1, 2, 4], [[0, 1, 2, 3, 4, 5, 6]]),  # b = n: every chunk touched
        ([3, 1, 2], [[0, 3, 4, 5], [1, 2]]),  # n - s == b for one chunk
        ([4, 4], [[0, 4], [1, 5], [2, 6, 3]]),
        ([1, 2, 4], [[0, 1, 2, 3, 4, 5], [6]]),  # 6 samples need the two largest chunks
        ([2, 3], [[0, 1]]),  # one batch: a small expected excess (0.6) still divides
        ([2, 3], [[0, 3]]),
    ],
)
def test_chunk_diversity_equals_its_definition(sizes: list[int], batches: list[list[int]]) -> None:
    got = shuffle_quality(batches, sizes)["chunk_diversity"]
    assert math.isclose(got, _model_diversity(batches, sizes), rel_tol=1e-9)


def test_displacement_equals_its_definition() -> None:
    def model(ids: list[int]) -> float:
        n = len(ids)
        ranks = {i: r for r, i in enumerate(sorted(range(n), key=lambda k: (ids[k], k)))}
        return sum(abs(ranks[k] - k) for k in range(n)) / n * 3 * n / (n * n - 1)

    for batches in ([[1, 0]], [[2], [0, 1]], [[3, 1], [0, 2, 4]], [[0, 1]]):
        flat = [i for b in batches for i in b]
        assert math.isclose(shuffle_quality(batches, [5])["displacement"], model(flat))
    # repeated ids (a padded last batch) rank in order of appearance
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, size=400).tolist()
    assert math.isclose(shuffle_quality([ids], [50])["displacement"], model(ids))


def test_metrics_of_nothing_are_neutral() -> None:
    assert shuffle_quality([], [3, 3]) == {"chunk_diversity": 1.0, "displacement": 1.0}
    one = shuffle_quality([[4]], [3, 3])
    assert one["displacement"] == 1.0 and one["chunk_diversity"] == 1.0
    assert shuffle_quality([[0, 1]], [2])["displacement"] == 0.0
    assert read_amplification([], [3, 3]) == 1.0
    d = describe_sampler([3], 8, drop_last=True)
    assert d["num_batches"] == 0 and d["chunks_per_batch"] == 0.0
    assert d["read_amplification"] == 1.0


def test_sample_ids_past_the_end_are_named() -> None:
    with pytest.raises(ValueError, match=r"^sample ids must be in \[0, 9\), got 10$"):
        read_amplification([[7, 10]], [3, 3, 3])
    with pytest.raises(ValueError, match=r"^sample ids must be in \[0, 9\), got -1$"):
        shuffle_quality([[7, -1]], [3, 3, 3])


def test_read_amplification_follows_the_reader_model() -> None:
    # the default split is even: each of two readers reads its own chunk
    assert read_amplification([[0, 1, 10, 11]], [10, 10], readers=2) == 1.0
    # with no cache, a reader with nothing to read keeps nothing: the chunk is read again
    assert read_amplification([[0], [], [1]], [10, 10]) == 2.0
    assert read_amplification([[0], [], [1]], [10, 10], cache_chunks=1) == 1.0
    with pytest.raises(ValueError, match="zip"):  # a rows function must give every reader a range
        read_amplification([[0, 1]], [2], readers=2, rows=lambda n, r: [(0, n)])


def test_describe_sampler_is_its_parts() -> None:
    sizes = [6] * 12 + [5]
    s = ChunkBatchSampler(sizes, 8, pool=16, lanes=2, seed=3, world_size=1)
    batches = s.batches(2)
    ends = np.cumsum(sizes)
    per_batch = [len(set(np.searchsorted(ends, b, side="right").tolist())) for b in batches]
    d = describe_sampler(sizes, 8, pool=16, lanes=2, seed=3, epoch=2, readers=2, cache_chunks=3)
    assert d == {
        "pool": 16,
        "lanes": 2,
        "cache_chunks": 3,
        "num_batches": len(batches),
        "chunks_per_batch": float(np.mean(per_batch)),
        "read_amplification": read_amplification(
            batches, sizes, cache_chunks=3, readers=2, rows=s.reader_rows
        ),
        **shuffle_quality(batches, sizes),
    }
    default = describe_sampler(sizes, 8, pool=16, lanes=2, seed=3)
    assert default == describe_sampler(sizes, 8, pool=16, lanes=2, seed=3, readers=1, epoch=0)
    assert default["cache_chunks"] == s.capacity_chunks(6, 1)
    assert json.loads(json.dumps(d)) == d
