"""A held stack filled as batches first need its blocks (:class:`SharedStack.ensure_rows`):
only the blocks a batch's rows reach are decoded, each once, and a block is ready only once
its whole decode returned (a reader killed or failing mid-block never leaves it ready).

The claim protocol itself (two processes, stalls, the lock) is tested on the whole fill in
tests/read/test_shared_stack.py; these tests are about what a batch at a time adds.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from held_fill import pattern

from chunkio.util.shared_stack import CLAIMED, FREE, READY, HeldSegments, SharedStack, StackShape
from chunkio.util.shm import SegmentMapping, attach

#: two variables of 40 rows, chunked 2 and 3 rows; blocks of 4 and 3 rows (whole chunks)
SHAPE = StackShape(("a", "b"), (2, 3), 40, (16,), "<f4", 256)


@pytest.fixture
def segment() -> Iterator[str]:
    segments = HeldSegments([SHAPE])
    yield segments.names[SHAPE.arrays]
    segments.close()


def _states(name: str) -> np.ndarray[Any, Any]:
    states_at = SHAPE.offsets()[0]
    return SegmentMapping(attach(name)).bytes()[states_at : states_at + len(SHAPE.blocks)]


def _reader(fail_at: tuple[int, int, int] | None = None) -> tuple[Any, list[Any]]:
    want, done = pattern(SHAPE), []

    def read_block(stack: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        if (j, a, b) == fail_at:
            stack[a : a + 1, j] = want[a : a + 1, j]  # half written, then the chunk is bad
            raise ValueError("a corrupt chunk")
        stack[a:b, j] = want[a:b, j]
        done.append((j, a, b))

    return read_block, done


@pytest.mark.parametrize("where", ["segment", "own"])
def test_a_batch_decodes_only_the_blocks_its_rows_reach(segment: str, where: str) -> None:
    read_block, done = _reader()
    found = (
        SharedStack.attach(segment, SHAPE, read_block)
        if where == "segment"
        else SharedStack.own(SHAPE, read_block)
    )
    assert found is not None and not found.complete
    found.ensure_rows(np.array([6, 5, 5]))
    # rows 5 and 6: a's block of rows 4-8, b's blocks of rows 3-6 and 6-9
    assert sorted(done) == [(0, 4, 8), (1, 3, 6), (1, 6, 9)]
    np.testing.assert_array_equal(found.stack[5:7], pattern(SHAPE)[5:7])
    found.ensure_rows(np.array([4, 7, 8]))  # rows 4 and 7 are ready already: one new block
    assert sorted(done)[-1] == (1, 6, 9) and len(done) == 4 and (0, 8, 12) in done
    found.ensure_rows(np.arange(SHAPE.num_rows))
    assert found.complete and len(done) == len(SHAPE.blocks)  # each block once
    np.testing.assert_array_equal(found.stack, pattern(SHAPE))


def test_a_block_whose_decode_fails_halfway_is_never_ready(segment: str) -> None:
    read_block, _ = _reader(fail_at=(0, 4, 8))
    found = SharedStack.attach(segment, SHAPE, read_block)
    assert found is not None
    with pytest.raises(ValueError, match="a corrupt chunk"):
        found.ensure_rows(np.array([5]))
    states = _states(segment)
    assert states[SHAPE.blocks.index((0, 4, 8))] == FREE and not found.complete
    read_block, done = _reader()
    again = SharedStack.attach(segment, SHAPE, read_block)
    assert again is not None
    again.ensure_rows(np.array([5]))
    assert (0, 4, 8) in done
    np.testing.assert_array_equal(again.stack[4:8, 0], pattern(SHAPE)[4:8, 0])


def _killed_mid_block(name: str) -> None:
    """A reader that dies (SIGKILL) with its block half written."""
    want = pattern(SHAPE)

    def read_block(stack: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        stack[a : a + 1, j] = want[a : a + 1, j]
        os.kill(os.getpid(), signal.SIGKILL)

    found = SharedStack.attach(name, SHAPE, read_block)
    assert found is not None
    found.ensure_rows(np.array([5]))


def test_a_reader_killed_mid_block_leaves_it_to_the_next_one(segment: str) -> None:
    """The killed reader's block stays claimed (never ready, though half its rows are
    written); the next reader that needs those rows decodes the block whole."""
    child = multiprocessing.get_context("fork").Process(target=_killed_mid_block, args=(segment,))
    child.start()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    states = _states(segment)
    killed = [k for k, state in enumerate(states.tolist()) if state != FREE]
    assert len(killed) == 1 and states[killed[0]] == CLAIMED
    read_block, done = _reader()
    found = SharedStack.attach(segment, SHAPE, read_block)
    assert found is not None
    found.ensure_rows(np.array([5]))
    assert SHAPE.blocks[killed[0]] in done and states[killed[0]] == READY
    np.testing.assert_array_equal(found.stack[5], pattern(SHAPE)[5])
