"""``make_loader(num_workers=N)`` with more workers than this process's cores warns once, at
the user's line (torch's DataLoader warns likewise); up to the cores, and by default, it is
silent. The cores are pinned by the test (``available_cores``), not read from the machine.

The count lives in ``Workers(count=N)``; ``num_workers=N`` is its PyTorch spelling: either
one gives the loader's count, both must agree."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import chunkio
from chunkio import Workers, loader_options
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


def test_the_count_in_workers_is_the_loaders_and_checked_against_the_cores(path: str) -> None:
    loader = chunkio.make_loader(path, 4, workers=Workers(count=0))
    assert (loader.num_workers, loader.transport) == (0, "local")
    loader.close()
    with pytest.warns(WorkerCountWarning, match=r"3 worker processes") as caught:
        chunkio.make_loader(path, 4, workers=Workers(count=3)).close()
    assert len(caught) == 1 and caught[0].filename == __file__


def test_num_workers_and_the_count_agree_or_are_refused(path: str) -> None:
    loader = chunkio.make_loader(path, 4, num_workers=0, workers=Workers(count=0))
    assert loader.num_workers == 0
    loader.close()
    with pytest.raises(ValueError, match=r"num_workers=0\) and Workers\(count=2\) give two"):
        chunkio.make_loader(path, 4, num_workers=0, workers=Workers(count=2))


@pytest.mark.parametrize(
    ("count", "error"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_a_count_that_is_not_an_int_from_0_is_refused(count: object, error: type) -> None:
    with pytest.raises(error, match="count must be an int"):
        Workers(count=count)  # type: ignore[arg-type]
