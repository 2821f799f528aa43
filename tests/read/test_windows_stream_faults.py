"""The streamed stack when a fill fails half-way: a held chunk's copy out of the part that
raises, or an interrupt while the decode threads still write. No slot the failed batch was
given is served later before it is filled again."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from foreign_stores import noise_windows_store
from window_streams import fill_part_at_once, streamed_stack, window_dataset

import chunkio
from chunkio import Field
from chunkio.read.base import DecodeThreads

VARS = ("t2m", "u10")
STEPS, PER_CHUNK, BATCH = 160, 8, 16
FIELDS = [Field(list(VARS), steps=[-1, 0, 1])]
#: decoded bytes of one row chunk of the stack (2 variables x 8 rows x 2x3 float32)
STACK_CHUNK = 2 * PER_CHUNK * 24
PART_CHUNKS = 10
#: one sample of the field: 3 steps x 2 variables x 2x3 float32
SAMPLE = 3 * 2 * 24


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noise_windows_store(
        tmp_path_factory.mktemp("faults") / "era.zarr", VARS, STEPS, (2, 3), PER_CHUNK, 5
    )


def _loader(path: Path) -> Any:
    """A stack whose first chunks are held (a loader's budget), read in this process."""
    ds = window_dataset(path, FIELDS)
    ordering = chunkio.Ordering(pool_bytes=2 * PER_CHUNK * SAMPLE, lanes=1)  # 2 chunks
    probe = chunkio.make_loader(ds, BATCH, num_workers=0, seed=0, ordering=ordering,
                                workers=chunkio.Workers(hold_bytes=0))  # fmt: skip
    pool = probe.dataset.cache_bytes
    probe.close()
    hold = chunkio.Workers(hold_bytes=pool + PART_CHUNKS * STACK_CHUNK)
    return chunkio.make_loader(ds, BATCH, num_workers=0, seed=0, ordering=ordering, workers=hold)


def _check(path: Path, ds: Any, idx: np.ndarray) -> None:
    arrays = {v: np.asarray(zarr.open_array(path / v, mode="r")[:]) for v in VARS}
    anchors = ds.anchors[idx]
    want = np.stack([np.stack([arrays[v][anchors + s] for v in VARS], axis=1)
                     for s in (-1, 0, 1)], axis=1)  # fmt: skip
    (got,) = ds.read_batch(idx).values()
    np.testing.assert_array_equal(got, want, err_msg=f"anchors {anchors.tolist()}")


def test_a_held_chunk_whose_copy_fails_is_not_served_unfilled(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held chunks come back into the cache by a copy out of the part: the second copy of a
    batch raises, and the batch's chunks not filled are forgotten (they were in the cache's
    table already: served next time, they were other chunks' rows)."""
    fill_part_at_once(monkeypatch)  # every held chunk the first batches decode is written
    loader = _loader(store)
    try:
        ds = loader.dataset
        end = PART_CHUNKS * PER_CHUNK  # the part's first row past it
        # a batch across the part's end: its held chunks are decoded, then written into it
        across = np.flatnonzero((ds.anchors >= end - 20) & (ds.anchors < end + 20))
        _check(store, ds, across)
        stack = streamed_stack(ds)
        assert stack.part_rows == end
        _check(store, ds, np.flatnonzero(ds.anchors >= STEPS - 40))  # the cache cycles
        calls = [0]
        copy_out = stack.held.copy_out

        def failing(chunk: int, slot: np.ndarray) -> bool:
            calls[0] += 1
            if calls[0] == 2:
                raise OSError("copy out of the part failed")
            return bool(copy_out(chunk, slot))

        monkeypatch.setattr(stack.held, "copy_out", failing)
        with pytest.raises(OSError, match="copy out of the part failed"):
            ds.read_batch(across)
        assert calls[0] == 2
        _check(store, ds, across)  # the same anchors again: every chunk filled, none stale
    finally:
        loader.close()


def test_an_interrupt_right_after_the_admit_leaves_no_slot_unfilled(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C just after the cache put a batch's new chunks in its table, before they are
    filled: they are forgotten, and the same batch read again is read right."""
    loader = _loader(store)
    try:
        ds = loader.dataset
        far = np.flatnonzero(ds.anchors >= STEPS - 40)
        _check(store, ds, np.arange(4))  # the stack made
        stack = streamed_stack(ds)
        admit = stack.cache.admit

        def interrupted(chunks: list[int]) -> Any:
            admit(chunks)
            raise KeyboardInterrupt

        monkeypatch.setattr(stack.cache, "admit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ds.read_batch(far)
        monkeypatch.setattr(stack.cache, "admit", admit)
        _check(store, ds, far)
    finally:
        loader.close()


@pytest.mark.timeout(30)
def test_an_interrupt_waits_for_the_decodes_already_running() -> None:
    """Ctrl-C while the decode threads run: the error reaches the caller only once every
    call already started has finished writing (its caller frees those slots next)."""
    threads = DecodeThreads(2)
    finished: list[int] = []
    started = threading.Event()
    caller = threading.get_ident()

    def interrupt() -> None:
        """A KeyboardInterrupt raised in the caller's thread, as a Ctrl-C's is (whatever the
        process's SIGINT handler: a runner may ignore SIGINT)."""
        exc = ctypes.py_object(KeyboardInterrupt)
        assert ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(caller), exc) == 1

    def decode(i: int) -> int:
        if i == 0:
            started.wait(10)  # the other decode runs
            interrupt()
            return i
        started.set()
        threading.Event().wait(0.2)  # a slow decode, still writing when the interrupt comes
        finished.append(i)
        return i

    def stop(_: int) -> bool:
        raise KeyboardInterrupt  # in the caller's own loop, between two results

    try:
        with pytest.raises(KeyboardInterrupt):
            list(threads.map(decode, range(2)))
        assert finished == [1]
        finished.clear()
        started.clear()
        with pytest.raises(KeyboardInterrupt):
            [r for r in threads.map(decode, range(2)) if stop(r)]
        assert finished == [1]
    finally:
        threads.close()
