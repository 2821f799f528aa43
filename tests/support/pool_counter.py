"""``pools``: the worker count of every pool the conversion engine starts (a fixture the
conversion tests import)."""

from __future__ import annotations

from typing import Any

import pytest

from chunkio.convert.engine import core as engine


@pytest.fixture(name="pools")
def pools_fixture(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker count of every pool the engine starts."""
    started: list[int] = []
    real = engine.worker_processes

    def counting(workers: int, **kw: Any) -> Any:
        started.append(workers)
        return real(workers, **kw)

    monkeypatch.setattr(engine, "worker_processes", counting)
    return started
