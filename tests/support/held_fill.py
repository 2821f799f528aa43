"""A child process's side of the shared-stack tests (tests/read/test_shared_stack.py): fill a
segment with a known pattern, slowly, and report which blocks this process decoded. Imports
only NumPy and chunkio.util.shared_stack, so a spawned child starts fast."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np

import chunkio.util.shared_stack as shared_stack
from chunkio.util.shared_stack import HeldSegments, SharedStack, StackShape, fill_shared


def attached_stack(shape: StackShape) -> Iterator[SharedStack]:
    """A new segment for ``shape`` (as a loader makes for its workers), attached in this
    process, for a fixture: yielded, then closed."""
    segments = HeldSegments([shape])
    try:
        shared = SharedStack.attach(segments.names[shape.arrays], shape)
        assert shared is not None
        yield shared
        del shared
    finally:
        segments.close()


def pattern(shape: StackShape) -> np.ndarray[Any, Any]:
    """What a fully decoded stack holds: ``1000 * variable + row`` everywhere."""
    rows = np.arange(shape.num_rows, dtype=np.float64)[:, None]
    values = rows + 1000 * np.arange(len(shape.arrays))[None, :]
    full = np.broadcast_to(values[(...,) + (None,) * len(shape.sample_shape)],
                           (shape.num_rows, len(shape.arrays), *shape.sample_shape))  # fmt: skip
    return full.astype(shape.dtype)


def fill(name: str, shape: StackShape, delay_s: float) -> tuple[int, list[tuple[int, int, int]]]:
    """Fill segment ``name`` (each block takes ``delay_s``): this process's id and the blocks
    it read."""
    done: list[tuple[int, int, int]] = []
    want = pattern(shape)

    def read_block(out: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        time.sleep(delay_s)
        out[...] = want[a:b, j]
        done.append((j, a, b))

    stack = fill_shared(name, shape, read_block)
    assert stack is not None
    np.testing.assert_array_equal(stack, want)
    return os.getpid(), done


def fill_from(
    name: str, shape: StackShape, first_block: int, start_at: float, delay_s: float
) -> tuple[int, list[tuple[int, int, int]], bool]:
    """A filler (in a pool process) that starts at ``first_block`` at ``start_at`` (monotonic
    time: one clock for every process) and takes ``delay_s`` per block, its bytes half
    written meanwhile: its id, the blocks it decoded, and whether the stack it got was whole."""
    shared_stack.secrets = SimpleNamespace(randbelow=lambda n: first_block % n)
    want, done = pattern(shape), []

    def read_block(out: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        out[...] = -1  # what a reader of a block being rewritten would see
        time.sleep(delay_s)
        out[...] = want[a:b, j]
        done.append((j, a, b))

    time.sleep(max(0.0, start_at - time.monotonic()))
    stack = fill_shared(name, shape, read_block)
    return os.getpid(), done, stack is not None and np.array_equal(stack, want)


def busy_pid(seconds: float) -> int:
    """This process's id, after ``seconds`` (a pool given one per process starts them all)."""
    time.sleep(seconds)
    return os.getpid()
