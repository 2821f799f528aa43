"""Stacked window variables held once for all of a loader's workers (chunkio.util.shared_stack,
chunkio.read.windows.stack_shapes): which fields are stacked, workers filling one segment
together (each block decoded once, also when they start at the same block a few milliseconds
apart: claims are atomic), a claimer that died or hangs, a failed decode, a segment that is
gone."""

from __future__ import annotations

import fcntl
import gc
import multiprocessing
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from held_fill import busy_pid, fill, fill_from, pattern
from weather_stores import VARS, xarray_v3

import chunkio.util.shared_stack as shared_stack
from chunkio import ChunkDataset, Field
from chunkio.read.windows import held_segments, stack_shapes
from chunkio.util.shared_stack import CLAIMED, FREE, READY, HeldSegments, StackShape, fill_shared
from chunkio.util.shm import SegmentMapping, attach

#: 2 variables, 40 rows of 64 bytes, blocks of 4 rows (chunks of 2) and 3 rows (chunks of 3)
SHAPE = StackShape(("a", "b"), (2, 3), 40, (16,), "<f4", 256)


#: rows of the five-variable store, and its variables' rows per chunk
T, CHUNK_ROWS = 40, {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return xarray_v3(tmp_path_factory.mktemp("held"))


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five float32 variables ``(T, 2)`` chunked 1-5 rows, and a ``time`` coordinate."""
    path = tmp_path_factory.mktemp("five") / "five.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for k, (name, rows) in enumerate(CHUNK_ROWS.items()):
        values = np.arange(T * 2, dtype=np.float32).reshape(T, 2) + 1000 * k
        group.create_array(name, shape=values.shape, chunks=(rows, 2), dtype="<f4")[...] = values
    group.create_array("time", shape=(T,), chunks=(8,), dtype="<i8")[...] = np.arange(T)
    return path


def _five(path: Path, name: str) -> np.ndarray[Any, Any]:
    return np.asarray(zarr.open_group(path, mode="r")[name][...])


def _table(name: str, shape: StackShape) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(block states, claimers' ids) of segment ``name``: views that keep it mapped."""
    raw = SegmentMapping(attach(name)).bytes()
    states_at, pids_at, nbytes = shape.offsets()
    return raw[states_at : states_at + len(shape.blocks)], raw[pids_at:nbytes].view(np.int64)


@pytest.fixture
def segment() -> Iterator[str]:
    """The name of a new segment for :data:`SHAPE` (unlinked after the test)."""
    segments = HeldSegments([SHAPE])
    yield segments.names[SHAPE.arrays]
    segments.close()


def _reader(shape: StackShape, fail_at: int | None = None) -> tuple[Any, list[Any]]:
    want, done = pattern(shape), []

    def read_block(out: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        if fail_at is not None and shape.blocks[fail_at] == (j, a, b):
            raise ValueError("a corrupt chunk")
        out[...] = want[a:b, j]
        done.append((j, a, b))

    return read_block, done


def test_blocks_are_whole_chunks_of_one_variable() -> None:
    assert SHAPE.blocks[:3] == [(0, 0, 4), (0, 4, 8), (0, 8, 12)]
    assert SHAPE.blocks[10:12] == [(1, 0, 3), (1, 3, 6)] and SHAPE.blocks[-1] == (1, 39, 40)
    assert len(SHAPE.blocks) == 10 + 14
    states, pids, nbytes = SHAPE.offsets()
    claimed_at = SHAPE.times_at()  # float64 each, between the states and the ids
    assert states == 40 * 2 * 64 and claimed_at == states + 64 and pids == claimed_at + 8 * 24
    assert nbytes == pids + 8 * 24


@pytest.mark.parametrize(
    ("fields", "stacks"),
    [
        ([Field(list(VARS), steps=range(-1, 1)), Field(list(VARS), steps=[1]), "time"], [VARS]),
        # after the stack, a field of one of its variables (or of them reordered) reads lanes
        ([Field(list(VARS)), Field("u10", steps=[-2, 1]), Field(["v10", "t2m"])], [VARS]),
        ([Field("u10"), Field(list(VARS))], None),  # u10 has its own reader first
        ([Field(["t2m", "u10"]), Field(["u10", "v10"])], None),  # u10 in two stacks
        ([Field(["t2m", "t2m"])], None),  # a variable twice
        ([Field("t2m", steps=[0, 1]), "time"], []),  # nothing stacked: each reader its own
    ],
)
def test_the_stacks_are_the_ones_the_readers_make(
    store: Path, fields: list[Any], stacks: list[tuple[str, ...]] | None
) -> None:
    ds = ChunkDataset(store, fields=fields, preload_bytes=1 << 30)
    found = stack_shapes(ds.layout, ds.fields)
    assert (None if found is None else [s.arrays for s in found]) == stacks
    if found == []:  # nothing to share: the loader makes no segment
        assert held_segments(ds.layout, ds.fields) is None
    if not found:
        return
    ds.read_batch([0, 5])  # the reader makes exactly the planned stacks
    shared = ds._handle().ctx.shared
    assert [k for k in shared if isinstance(k, tuple)] == stacks


@pytest.mark.timeout(120)
def test_two_processes_fill_one_stack_decoding_each_block_once(segment: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        runs = [pool.submit(fill, segment, SHAPE, 0.005) for _ in range(2)]
        results = [r.result() for r in runs]
    pids = {pid for pid, _ in results}
    done = [d for _, d in results]
    blocks = [b for d in done for b in d]
    assert sorted(blocks) == sorted(SHAPE.blocks), done  # claims are atomic: each block once
    states, claimers = _table(segment, SHAPE)
    assert (states == READY).all() and set(claimers.tolist()) <= pids
    # a third reader finds it complete and decodes nothing
    read_block, mine = _reader(SHAPE)
    stack = fill_shared(segment, SHAPE, read_block)
    assert stack is not None and mine == []
    np.testing.assert_array_equal(stack, pattern(SHAPE))


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("claimer", ["dead", "hung"])
def test_a_block_claimed_by_a_dead_or_hung_process_is_decoded_by_a_waiter(
    claimer: str, monkeypatch: pytest.MonkeyPatch, segment: str, sleeper: Any
) -> None:
    """A claimer that died leaves its block to whoever waits for it; one still alive that never
    finishes (stuck: the sleeper) does after ``STALL_S``."""
    monkeypatch.setattr(shared_stack, "STALL_S", 0.05)
    states, claimers = _table(segment, SHAPE)
    claimers[3] = _dead_pid() if claimer == "dead" else sleeper.pid
    states[3] = CLAIMED
    read_block, done = _reader(SHAPE)
    stack = fill_shared(segment, SHAPE, read_block)
    assert stack is not None and SHAPE.blocks[3] in done
    np.testing.assert_array_equal(stack, pattern(SHAPE))
    assert (states == READY).all() and claimers[3] == os.getpid()
    assert sleeper.poll() is None  # asking whether a claimer lives sends it no signal


def test_a_failed_decode_frees_its_block_for_the_next_reader(segment: str) -> None:
    states, _ = _table(segment, SHAPE)
    read_block, _ = _reader(SHAPE, fail_at=5)
    with pytest.raises(ValueError, match="a corrupt chunk"):
        fill_shared(segment, SHAPE, read_block)
    assert states[5] == FREE
    read_block, done = _reader(SHAPE)
    stack = fill_shared(segment, SHAPE, read_block)
    assert stack is not None and SHAPE.blocks[5] in done
    np.testing.assert_array_equal(stack, pattern(SHAPE))


def test_a_segment_that_is_gone_or_too_small_is_not_used() -> None:
    segments = HeldSegments([SHAPE])
    name = segments.names[SHAPE.arrays]
    bigger = StackShape(("a", "b"), (2, 3), 80, (16,), "<f4", 256)
    read_block, done = _reader(bigger)
    assert fill_shared(name, bigger, read_block) is None and done == []
    segments.close()
    assert not os.path.exists(f"/dev/shm/{name}")
    assert fill_shared(name, SHAPE, _reader(SHAPE)[0]) is None
    segments.close()  # idempotent


def test_segments_are_unlinked_when_garbage_collected() -> None:
    segments = HeldSegments([SHAPE])
    name = segments.names[SHAPE.arrays]
    assert os.path.exists(f"/dev/shm/{name}")
    del segments
    gc.collect()
    assert not os.path.exists(f"/dev/shm/{name}")


def test_no_segments_when_dev_shm_is_too_small(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = ChunkDataset(store, fields=[Field(list(VARS), steps=[0, 1])])
    need = sum(s.offsets()[2] for s in stack_shapes(ds.layout, ds.fields) or [])
    monkeypatch.setattr(shared_stack, "free_bytes", lambda: need - 1)
    assert held_segments(ds.layout, ds.fields) is None
    monkeypatch.setattr(shared_stack, "free_bytes", lambda: need)
    found = held_segments(ds.layout, ds.fields)
    assert found is not None and list(found.names) == [VARS]
    found.close()


def test_segment_pages_are_reserved_up_front_or_none_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pages are allocated when the segment is made (a ``/dev/shm`` that fills up later
    would fail the workers with SIGBUS); no room for them: no segment, nothing left behind."""
    segments = HeldSegments([SHAPE])
    name = segments.names[SHAPE.arrays]
    assert os.stat(f"/dev/shm/{name}").st_blocks * 512 >= SHAPE.offsets()[2]
    segments.close()
    mine = f"chunkio_{os.getpid()}_"  # this process's segments (other test processes run too)
    before = {n for n in os.listdir("/dev/shm") if n.startswith(mine)}

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shared_stack.os, "posix_fallocate", full)
    assert HeldSegments.if_room([SHAPE, SHAPE]) is None
    assert {n for n in os.listdir("/dev/shm") if n.startswith(mine)} == before


@pytest.mark.parametrize(
    ("fields", "stacks"),
    [
        ([Field(["a", "b"], steps=[0, 1])], [("a", "b")]),  # two variables are a stack too
        # the same stack again, then a field sharing one of its variables with another
        ([Field(["a", "b"]), Field(["a", "b"], steps=[1]), Field(["b", "c"])], None),
        ([Field(["a", "b", "c"]), Field(["c", "a", "b"])], [("a", "b", "c")]),  # reordered
        ([Field("a"), Field("b"), Field(["a", "c"])], None),  # a read apart, before
        ([Field(["a", "b"]), Field(["c", "d"]), Field(["a", "e"])], None),  # a in two stacks
        ([Field(["a", "b"]), Field(["c", "d"]), "e"], [("a", "b"), ("c", "d")]),
    ],
)
def test_which_fields_are_stacked(five: Path, fields: list[Any], stacks: Any) -> None:
    ds = ChunkDataset(five, fields=fields, preload_bytes=1 << 30)
    found = stack_shapes(ds.layout, ds.fields)
    assert (None if found is None else [s.arrays for s in found]) == stacks
    if found:
        ds.read_batch([0, 5])  # the reader makes exactly the planned stacks
        shared = ds._handle().ctx.shared
        assert [k for k in shared if isinstance(k, tuple)] == stacks


def test_a_dataset_given_segments_fills_and_then_reads_them(
    five: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process (as a loader's worker does): the first dataset decodes every block into
    the segment; a second one given the same segment decodes nothing; both equal the source
    (blocks of about 64 bytes: several per variable)."""
    import chunkio.read.windows as windows

    monkeypatch.setattr(windows, "BLOCK_BYTES", 64)
    fields = [Field(["a", "b", "c"], steps=[-1, 0]), Field(["a", "b", "c"], steps=[1])]
    ds = ChunkDataset(five, fields=fields, preload_bytes=1 << 30)
    (shape,) = stack_shapes(ds.layout, ds.fields) or []
    assert shape.data_nbytes == T * 3 * 2 * 4 and shape.dtype == "<f4"
    assert len(shape.blocks) > 3 * 4  # rows 8 bytes: a 64-byte block holds whole chunks
    segments = held_segments(ds.layout, ds.fields)
    assert segments is not None
    (name,) = segments.names.values()
    assert os.path.getsize(f"/dev/shm/{name}") == shape.offsets()[2]
    idx = [0, 37, 5, 5, 20]
    want = {v: _five(five, v) for v in "abc"}
    try:
        for first in (True, False):
            reader = ChunkDataset(five, fields=fields, preload_bytes=1 << 30)
            reader.held_segments = dict(segments.names)
            got = reader.read_batch(idx)
            assert reader.anchors is not None
            anchors = reader.anchors[idx]
            x = np.stack([np.stack([want[v][anchors + s] for v in "abc"], 1) for s in (-1, 0)], 1)
            np.testing.assert_array_equal(got[reader.fields[0]], x)
            y = np.stack([want[v][anchors + 1] for v in "abc"], 1)[:, None]
            np.testing.assert_array_equal(got[reader.fields[1]], y)
            stats = reader.read_stats()
            chunks = sum(-(-T // CHUNK_ROWS[v]) for v in "abc")
            assert (stats.chunks_read, stats.rows_decoded) == ((chunks, 3 * T) if first else (0, 0))
        states, claimers = _table(name, shape)
        assert (states == READY).all() and set(claimers.tolist()) == {os.getpid()}
    finally:
        segments.close()


@pytest.mark.parametrize(("spare", "stacked"), [(0, True), (-1, False)])
def test_a_stack_is_made_when_each_variable_fits_preload_bytes(
    five: Path, spare: int, stacked: bool
) -> None:
    """``preload_bytes`` bounds each variable, exactly: at the bound its rows are stacked."""
    per_variable = T * 2 * 4
    fields = [Field(["a", "b"], steps=[0])]
    ds = ChunkDataset(five, fields=fields, preload_bytes=per_variable + spare)
    ds.read_batch([1, 2])
    assert (("a", "b") in ds._handle().ctx.shared) == stacked


def test_a_waiter_leaves_a_live_claimers_block_to_it_and_takes_over_a_dead_ones(
    segment: str, sleeper: Any
) -> None:
    """Block 3 is claimed by a process that died, block 5 by a live one (the sleeper) that
    finishes it a little later (a thread does it for it): the waiter decodes block 3 itself,
    then waits for block 5 (it does not decode it: the live claimer is within ``STALL_S``)."""
    states, claimers = _table(segment, SHAPE)
    want = pattern(SHAPE)
    data = SegmentMapping(attach(segment)).bytes()[: SHAPE.data_nbytes].view(want.dtype)
    data = data.reshape(want.shape)
    j, a, b = SHAPE.blocks[5]

    def finish() -> None:
        data[a:b, j] = want[a:b, j]
        states[5] = READY

    claimers[3], states[3] = _dead_pid(), CLAIMED
    claimers[5], states[5] = sleeper.pid, CLAIMED
    read_block, done = _reader(SHAPE)
    timer = threading.Timer(0.3, finish)
    timer.start()
    try:
        stack = fill_shared(segment, SHAPE, read_block)
    finally:
        timer.join()
    assert stack is not None and SHAPE.blocks[3] in done and SHAPE.blocks[5] not in done
    np.testing.assert_array_equal(stack, want)
    assert sleeper.poll() is None  # asking whether a claimer lives sends it no signal


def test_whether_a_claimer_is_alive(sleeper: Any) -> None:
    assert shared_stack._alive(sleeper.pid) and not shared_stack._alive(_dead_pid())
    assert sleeper.poll() is None  # no signal was sent
    assert shared_stack._alive(2**70)  # no such process id can be asked about: assume alive


def test_an_empty_stack_and_a_segment_removed_by_hand() -> None:
    empty = StackShape(("a", "b"), (2, 3), 0, (16,), "<f4", 256)
    segments = HeldSegments([empty])
    read_block, done = _reader(empty)
    stack = fill_shared(segments.names[empty.arrays], empty, read_block)
    assert stack is not None and stack.shape == (0, 2, 16) and done == []
    del stack
    os.unlink(f"/dev/shm/{segments.names[empty.arrays]}")  # gone already: closing still works
    segments.close()


def test_blocks_of_one_byte_rows_and_one_row_chunks() -> None:
    assert shared_stack.lane_blocks(10, 1, 1, 4) == [(0, 4), (4, 8), (8, 10)]
    assert shared_stack.lane_blocks(5, 1, 1, 1) == [(k, k + 1) for k in range(5)]


#: when each of the fillers of the staggered test starts, after the first (seconds)
STAGGERS = (0.0, 0.001, 0.003, 0.007)


@pytest.mark.timeout(120)
def test_fillers_starting_apart_decode_every_block_once() -> None:
    """Four processes fill one stack, all starting at the same block, the first at once and the
    others 0, 1, 3 or 7 ms apart (a block takes 2 ms), many times over: each block is decoded
    by exactly one of them (a claimer that found a block free claims it only if it still is),
    and every one of them gets the whole stack."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        assert len(set(pool.map(busy_pid, [0.2] * 4))) == 4
        for rep in range(8):
            for stagger in STAGGERS:
                segments = HeldSegments([SHAPE])
                name = segments.names[SHAPE.arrays]
                start = time.monotonic() + 0.05
                try:
                    runs = [
                        pool.submit(fill_from, name, SHAPE, rep, start + i * stagger, 0.002)
                        for i in range(4)
                    ]
                    results = [r.result() for r in runs]
                    states, _ = _table(name, SHAPE)
                    assert (states == READY).all()
                finally:
                    segments.close()
                blocks = sorted(b for _, done, _ in results for b in done)
                assert blocks == sorted(SHAPE.blocks), (stagger, rep, results)
                assert [whole for _, _, whole in results] == [True] * 4
                assert len({pid for pid, _, _ in results}) == 4


def test_a_block_taken_while_a_claimer_waits_for_the_lock_is_left_alone(segment: str) -> None:
    """A filler that finds every block free but must wait for the claim lock (held here, as a
    process claiming at the same instant holds it) while another process decodes them all
    decodes none of them: it checks the state again once it holds the lock."""
    held = attach(segment)
    states, _ = _table(segment, SHAPE)
    read_block, done = _reader(SHAPE)
    got: list[Any] = []
    fcntl.flock(held._fd, fcntl.LOCK_EX)
    try:
        filler = threading.Thread(
            target=lambda: got.append(fill_shared(segment, SHAPE, read_block))
        )
        filler.start()
        time.sleep(0.3)
        assert done == []  # it waits for the lock
        stack = SegmentMapping(attach(segment)).bytes()[: SHAPE.data_nbytes].view("<f4")
        stack[:] = pattern(SHAPE).ravel()
        states[:] = READY
    finally:
        fcntl.flock(held._fd, fcntl.LOCK_UN)
        held.close()
    filler.join(10)
    assert not filler.is_alive() and done == []
    np.testing.assert_array_equal(got[0], pattern(SHAPE))


def test_claims_go_unlocked_where_flock_is_refused(
    segment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without ``flock``: the stack is filled all the same."""
    tried: list[int] = []

    def refused(fd: int, op: int) -> None:
        tried.append(op)
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(shared_stack.fcntl, "flock", refused)
    read_block, done = _reader(SHAPE)
    stack = fill_shared(segment, SHAPE, read_block)
    assert stack is not None and sorted(done) == sorted(SHAPE.blocks)
    np.testing.assert_array_equal(stack, pattern(SHAPE))
    assert tried == [fcntl.LOCK_EX]  # asked once, then not again


def test_a_failed_decode_leaves_a_block_taken_over_meanwhile_to_its_new_claimer(
    segment: str, sleeper: Any
) -> None:
    """A stuck claimer whose block a waiter took over (see ``STALL_S``), failing at last, does
    not free the block under the waiter decoding it."""
    states, claimers = _table(segment, SHAPE)

    def read_block(out: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        claimers[SHAPE.blocks.index((j, a, b))] = sleeper.pid  # taken over while decoding
        raise ValueError("a corrupt chunk")

    with pytest.raises(ValueError, match="a corrupt chunk"):
        fill_shared(segment, SHAPE, read_block)
    (k,) = np.flatnonzero(states != FREE).tolist()
    assert (states[k], claimers[k]) == (CLAIMED, sleeper.pid)
