"""Conversion sources the converter tests hand to worker pools, in a module that imports only
numpy and chunkio's conversion side.

A pool worker unpickles a source by importing the module that defines it: defined in a test
module, each worker (forkserver, spawn, dask) would import pytest, the test's conftest and,
through ``chunkio.ChunkDataset``, torch, seconds of CPU apiece before its first block.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from chunkio.convert.array_source import ArraySource
from chunkio.errors import SourceError
from chunkio.format.layout import FieldInfo

__all__ = ["BadShapeSource", "FailingArraySource", "SlowOrBadSource", "SlowSource"]


class SlowSource:
    """Deterministic samples (x encodes the index), optionally slow, failing at one block."""

    def __init__(self, n: int = 200, delay: float = 0.0, fail_at: int | None = None) -> None:
        import numpy as np

        from chunkio.format.layout import FieldInfo

        self.num_samples, self.delay, self.fail_at = n, delay, fail_at
        self.fields = (
            FieldInfo("x", np.dtype("float32"), (4, 4)),
            FieldInfo("y", np.dtype("int64"), ()),
        )

    def fingerprint(self) -> str:
        return f"slow-{self.num_samples}"  # fail_at and delay do not change the content

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        import time

        import numpy as np

        from chunkio.errors import SourceError

        time.sleep(self.delay)
        if self.fail_at is not None and start <= self.fail_at < stop:
            raise SourceError(f"sample {self.fail_at}: cannot decode item-{self.fail_at}.bin")
        idx = np.arange(start, stop)
        x = idx[:, None, None] * 16.0 + np.arange(16.0).reshape(4, 4)
        return {"x": x.astype("float32"), "y": idx * 3}


class FailingArraySource(ArraySource):
    """Picklable (importable from this module) and fails on samples 40..49."""

    def read_block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if start <= 45 < stop:
            raise SourceError("sample 45: bad item")
        return super().read_block(start, stop)


class SlowOrBadSource:
    """Four chunks of ten samples filled with ``value``; chunk 0 may fail, one chunk is slow."""

    def __init__(self, tag: str, value: int, *, fail: bool, slow: int, slow_s: float) -> None:
        self.tag, self.value, self.fail = tag, value, fail
        self.slow, self.slow_s = slow, slow_s
        self.num_samples = 40
        self.fields = (FieldInfo("x", np.dtype(np.uint8), (4,)),)

    def fingerprint(self) -> str:
        return self.tag

    def read_block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if start == 10 * self.slow:
            time.sleep(self.slow_s)
        if start == 0 and self.fail:
            raise SourceError("block 0 is bad")
        return {"x": np.full((stop - start, 4), self.value, np.uint8)}


class BadShapeSource(SlowSource):
    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        out = super().read_block(start, stop)
        if start >= 50:
            out["x"] = out["x"][:, :2]
        return out
