"""The held part past the budget filled by the streamed cache (chunkio.read.windows.held):
nothing decoded before the first batch, each chunk of the part written once by whichever
process decodes it first, then read from there; a chunk another process claimed (alive or
dead) is still served; at the budget's edge the part holds exactly the chunks that fit; batches
equal the dataset's own read in every epoch. And a held stack's blocks of every variable are
written into the segment with one ``pwrite`` each, not page by page through the mapping."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_stores import noise_windows_store
from held_fill import pattern
from window_streams import check_window_epoch, fill_part_at_once, streamed_stack, window_dataset

import chunkio
import chunkio.util.shared_stack as shared_stack
from chunkio import ChunkDataset, Field
from chunkio.util.shared_stack import CLAIMED, FREE, READY, HeldSegments, StackShape, fill_shared

VARS = ("t2m", "u10", "v10")
STEPS, PER_CHUNK, BATCH = 480, 8, 16
CHUNKS = STEPS // PER_CHUNK
FIELDS = [Field(list(VARS), steps=[-1, 0]), Field(list(VARS), steps=[1]), "time"]
#: decoded bytes of one row chunk of the stack (3 variables x 8 rows x 2x3 float32)
STACK_CHUNK = 3 * PER_CHUNK * 24


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noise_windows_store(
        tmp_path_factory.mktemp("fill") / "era.zarr", VARS, STEPS, (2, 3), PER_CHUNK, 5
    )


def _dataset(path: Path) -> ChunkDataset:
    return window_dataset(path, FIELDS)


def _loader(ds: ChunkDataset, hold: int) -> chunkio.ChunkLoader:
    return chunkio.make_loader(ds, BATCH, num_workers=0, seed=0,
                               ordering=chunkio.Ordering(pool_bytes=4 * STACK_CHUNK, lanes=2),
                               workers=chunkio.Workers(hold_bytes=hold, copy=True))  # fmt: skip


def _pool_bytes(ds: ChunkDataset) -> int:
    """The reader's mixing pool: what a budget holds beside the part."""
    loader = _loader(ds, 0)
    pool = loader.dataset.cache_bytes
    loader.close()
    return pool


@pytest.fixture
def part_loader(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[chunkio.ChunkLoader]:
    """A loader (0 workers) whose budget holds 20 of the 60 row chunks beside its pool, each
    chunk it decodes written (no credit to earn first: these tests are of the writes)."""
    fill_part_at_once(monkeypatch)
    ds = _dataset(store)
    loader = _loader(ds, _pool_bytes(ds) + 20 * STACK_CHUNK)
    yield loader
    loader.close()


def test_the_part_is_filled_as_batches_decode_it_not_before_the_first(
    store: Path, part_loader: chunkio.ChunkLoader
) -> None:
    """The first batch decodes only its own chunks (none of the part up front); by the end of
    the first epoch every chunk of the part is written, each decoded once; later epochs decode
    only the chunks past it, and every batch equals the dataset's own read."""
    reference = _dataset(store)
    part_loader.set_epoch(0)
    batches = iter(part_loader)
    next(batches)
    stack = streamed_stack(part_loader.dataset)
    states = stack.held.shared.states
    assert stack.part_rows == 20 * PER_CHUNK and len(states) == 20  # a block a row chunk
    first = int((states == READY).sum())
    decoded = part_loader.dataset.read_stats().per_field["v_t2m"]
    assert first <= decoded < 20, (first, decoded)  # what the batch read, no more
    del batches
    counts = []
    for epoch in range(3):
        check_window_epoch(part_loader, reference, epoch)
        counts.append(part_loader.dataset.read_stats().per_field["v_t2m"])
        assert (states == READY).all()
    # read amplification <= 1.1 over the first epoch; the part never decoded again
    assert CHUNKS <= counts[0] <= decoded + 1.1 * CHUNKS, counts
    assert CHUNKS - 20 <= counts[2] - counts[1] <= 1.1 * (CHUNKS - 20), counts


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_chunk_claimed_elsewhere_is_served_and_a_dead_claimers_one_taken_over(
    store: Path, part_loader: chunkio.ChunkLoader, sleeper: Any
) -> None:
    """Chunk 2 of the part claimed by a live process (another worker writing it): batches
    decode it themselves and never read it from the part; chunk 3 claimed by a process that
    died mid-write: written here. Every batch equals the dataset's own read."""
    reference = _dataset(store)
    part_loader.dataset.read_batch(np.arange(1))  # the handle and its stack, as a worker's
    held = streamed_stack(part_loader.dataset).held
    states, pids = held.shared.states, held.shared.pids
    states[2], pids[2] = CLAIMED, sleeper.pid
    held.shared.claimed_at[2] = time.monotonic()  # claimed just now: within STALL_S
    states[3], pids[3] = CLAIMED, _dead_pid()
    held.data[2:4] = np.nan  # what half-written chunks could hold (chunk-major)
    for epoch in range(2):
        check_window_epoch(part_loader, reference, epoch)
    assert states[2] == CLAIMED and pids[2] == sleeper.pid  # left to its live claimer
    assert states[3] == READY and pids[3] == os.getpid()
    assert sleeper.poll() is None  # asking whether a claimer lives sends it no signal


@pytest.mark.parametrize("spare", [0, -1])
def test_the_part_at_the_budgets_edge_holds_the_chunks_that_fit(
    store: Path, spare: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget of the pool and exactly 7 row chunks holds 7; one byte less holds 6."""
    fill_part_at_once(monkeypatch)
    reference = _dataset(store)
    ds = _dataset(store)
    loader = _loader(ds, _pool_bytes(ds) + 7 * STACK_CHUNK + spare)
    try:
        check_window_epoch(loader, reference, 0)
        stack = streamed_stack(loader.dataset)
        held = 7 if spare == 0 else 6
        assert stack.part_rows == held * PER_CHUNK and stack.part.nbytes == held * STACK_CHUNK
        assert (stack.held.shared.states == READY).all()
    finally:
        loader.close()


def test_blocks_of_every_variable_are_written_with_one_pwrite_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Variables chunked alike: a block is rows of all of them, one contiguous run written
    with ``pwrite`` (never page by page through the mapping); without a file descriptor, the
    same bytes through the mapping."""
    shape = StackShape(("a", "b", "c"), (4, 4, 4), 30, (8,), "<f4", 3 * 8 * 4 * 8)
    assert shape.blocks == [(None, a, min(a + 8, 30)) for a in range(0, 30, 8)]
    calls: list[int] = []
    real = os.pwrite

    def counted(fd: int, data: Any, offset: int) -> int:
        calls.append(offset)
        return real(fd, data, offset)

    monkeypatch.setattr(shared_stack.os, "pwrite", counted)
    want = pattern(shape)
    for fd in (True, False):
        if not fd:  # a SharedMemory without a descriptor (not POSIX)
            monkeypatch.setattr(shared_stack, "_BlockWriter", _without_fd(shared_stack))
        calls.clear()
        segments = HeldSegments([shape])
        try:
            name = segments.names[shape.arrays]
            got = fill_shared(name, shape, lambda out, j, a, b: out.__setitem__(..., want[a:b, j]))
            assert got is not None
            np.testing.assert_array_equal(got, want)
            row = 3 * 8 * 4
            assert sorted(calls) == ([a * row for a in range(0, 30, 8)] if fd else [])
            del got
        finally:
            segments.close()


def _without_fd(module: Any) -> Any:
    real = module._BlockWriter

    class NoFd(real):  # type: ignore[misc,valid-type]
        def __init__(self, shape: StackShape, stack: Any, fd: int, name: str) -> None:
            super().__init__(shape, stack, -1, name)

    return NoFd


def test_a_short_pwrite_is_finished_and_a_refused_one_frees_its_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``pwrite`` cut short (a signal) is continued where it stopped; one that writes
    nothing raises (never loops) and leaves the block free for another process."""
    shape = StackShape(("a", "b"), (5, 5), 10, (4,), "<f4", 1 << 20)
    want = pattern(shape)
    real = os.pwrite

    def short(fd: int, data: Any, offset: int) -> int:
        return real(fd, bytes(memoryview(data)[:7]), offset)

    def read_block(out: Any, j: int, a: int, b: int) -> None:
        out[...] = want[a:b, j]

    segments = HeldSegments([shape])
    try:
        name = segments.names[shape.arrays]
        monkeypatch.setattr(shared_stack.os, "pwrite", lambda fd, data, offset: 0)
        with pytest.raises(OSError, match=f"segment '{name}'.* wrote nothing"):
            fill_shared(name, shape, read_block)
        shared = shared_stack.SharedStack.attach(name, shape)
        assert shared is not None and (shared.states == FREE).all()
        monkeypatch.setattr(shared_stack.os, "pwrite", short)
        got = fill_shared(name, shape, read_block)
        assert got is not None
        np.testing.assert_array_equal(got, want)
        del got, shared
    finally:
        segments.close()


def _refused(*args: Any) -> int:
    raise OSError(errno.ESPIPE, "Illegal seek")  # what macOS answers on a POSIX shm fd


_PWRITE = os.pwrite


def _short(fd: int, data: Any, offset: int) -> int:
    """``os.pwrite`` cut short after 7 bytes, as by a signal."""
    return _PWRITE(fd, bytes(memoryview(data).cast("B")[:7]), offset)


@pytest.mark.parametrize("write", ["refused", "short"])
def test_the_part_is_written_when_pwrite_is_refused_or_cut_short(
    store: Path, part_loader: chunkio.ChunkLoader, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """``pwrite`` refused (ESPIPE): the first chunk's write is tried once, then the part is
    written through the mapping; cut short: finished where it stopped. Either way every chunk
    of the part is written in the first epoch and right in the next (copied out of it)."""
    reference = _dataset(store)
    calls: list[int] = []
    wrapped = _refused if write == "refused" else _short

    def counted(*args: Any) -> int:
        calls.append(1)
        return int(wrapped(*args))

    monkeypatch.setattr(shared_stack.os, "pwrite", counted)
    check_window_epoch(part_loader, reference, 0)
    held = streamed_stack(part_loader.dataset).held
    assert (held.shared.states == READY).all()
    if write == "refused":
        assert len(calls) == 1 and held.shared.write.fd == -1  # never tried again
    else:
        assert len(calls) > 20 and held.shared.write.fd >= 0
    monkeypatch.undo()
    check_window_epoch(part_loader, reference, 1)  # every chunk of the part copied out of it


def test_a_failed_write_into_the_part_frees_its_chunk_and_keeps_the_batch(
    store: Path,
    part_loader: chunkio.ChunkLoader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A write into the part that fails (a ``pwrite`` writing nothing: EIO) loses no batch:
    every batch is right, the chunks are left free, and the next epoch writes them; the first
    failure is logged once, each counted."""
    reference = _dataset(store)
    monkeypatch.setattr(shared_stack.os, "pwrite", lambda *args: 0)
    with caplog.at_level("WARNING", logger="chunkio"):
        check_window_epoch(part_loader, reference, 0)
    held = streamed_stack(part_loader.dataset).held
    assert (held.shared.states == FREE).all()
    said = [r for r in caplog.records if "held part failed" in r.getMessage()]
    assert len(said) == 1 and held.failed_writes >= len(held.shared.states) > 1
    monkeypatch.undo()
    check_window_epoch(part_loader, reference, 1)
    assert (held.shared.states == READY).all()
    check_window_epoch(part_loader, reference, 2)


def test_a_part_chunk_claimed_too_long_ago_is_taken_over(
    store: Path, part_loader: chunkio.ChunkLoader, sleeper: Any
) -> None:
    """A live claimer stuck on chunk 2 for ``STALL_S`` (or a reused id): the chunk is written
    here, not decoded every epoch by every process for the loader's life."""
    reference = _dataset(store)
    part_loader.dataset.read_batch(np.arange(1))
    shared = streamed_stack(part_loader.dataset).held.shared
    shared.states[2], shared.pids[2] = CLAIMED, sleeper.pid
    shared.claimed_at[2] = time.monotonic() - shared_stack.STALL_S - 1
    check_window_epoch(part_loader, reference, 0)
    assert shared.states[2] == READY and shared.pids[2] == os.getpid()
    check_window_epoch(part_loader, reference, 1)
