"""A child process's side of the shared-stack tests (tests/read/test_held.py): fill a segment
with a known pattern, slowly, and report which blocks this process decoded. Imports only
NumPy and chunkio.util.shared_stack, so a spawned child starts fast."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from chunkio.util.shared_stack import StackShape, fill_shared


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

    def read_block(stack: np.ndarray[Any, Any], j: int, a: int, b: int) -> None:
        time.sleep(delay_s)
        stack[a:b, j] = want[a:b, j]
        done.append((j, a, b))

    stack = fill_shared(name, shape, read_block)
    assert stack is not None
    np.testing.assert_array_equal(stack, want)
    return os.getpid(), done
