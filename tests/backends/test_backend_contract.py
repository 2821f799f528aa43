"""Every backend runs the same contract suite."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from chunkio.backends._memory import delete_memory_store
from chunkio.testing.contract import BackendContract

_ids = itertools.count()


class TestZarrBackend(BackendContract):
    @pytest.fixture
    def location(self, tmp_path: Path) -> str:
        return str(tmp_path / "data.zarr")


class TestHDF5Backend(BackendContract):
    @pytest.fixture
    def location(self, tmp_path: Path) -> str:
        return str(tmp_path / "data.h5")


class TestMemoryBackend(BackendContract):
    @pytest.fixture
    def location(self) -> Iterator[str]:
        name = f"memory://contract-{next(_ids)}"
        yield name
        delete_memory_store(name)
