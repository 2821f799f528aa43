"""``make_loader(num_workers=N)`` with more workers than this process's cores warns once, at
the user's line (torch's DataLoader warns likewise); up to the cores, and by default, it is
silent. The cores are pinned by the test (``available_cores``), not read from the machine."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import chunkio
from chunkio import loader_options
from chunkio.loader_options import WorkerCountWarning


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(loader_options, "available_cores", lambda: 2)
    out = str(tmp_path / "d.zarr")
    chunkio.write_arrays(out, {"x": np.arange(8)}, shuffle=False)
    return out


def test_more_workers_than_cores_warns_at_the_callers_line(path: str) -> None:
    with pytest.warns(WorkerCountWarning, match=r"num_workers=3\).* 2 cores") as caught:
        chunkio.make_loader(path, 4, num_workers=3).close()
    assert len(caught) == 1 and caught[0].filename == __file__


@pytest.mark.parametrize("workers", [None, 0, 2])
def test_up_to_the_cores_is_silent(path: str, workers: int | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkerCountWarning)
        chunkio.make_loader(path, 4, num_workers=workers).close()
