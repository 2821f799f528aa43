"""Warnings a user's call raises name the user's line, not a line inside chunkio.

A warning's ``stacklevel`` counted by hand goes stale as soon as the call inside chunkio gets
one frame deeper (LabelMixingWarning pointed at ``chunkio/loader.py``); chunkio computes it
(:func:`chunkio.errors.caller_stacklevel`), and these tests hold it to the user's file.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chunkio
from chunkio.errors import caller_stacklevel
from chunkio.loader import RingFallbackWarning
from chunkio.sampling.label_check import LabelMixingWarning

N, CLASSES, CHUNK = 2000, 20, 50


def _sorted_store(path: Path) -> Path:
    """A dataset stored sorted by label, which a one-chunk pool mixes badly."""
    arrays = {
        "image": np.zeros((N, 3, 4, 4), np.uint8),
        "label": np.repeat(np.arange(CLASSES), N // CLASSES),
    }
    chunkio.write_arrays(
        path,
        arrays,
        shuffle=False,
        output=chunkio.Output(chunks=CHUNK),
        execution=chunkio.Execution(progress=False),
    )
    return path


def _caught(category: type[Warning], call: Any) -> warnings.WarningMessage:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    found = [w for w in caught if issubclass(w.category, category)]
    assert found, f"no {category.__name__}: {[str(w.message) for w in caught]}"
    return found[0]


def test_label_mixing_warning_names_the_line_that_called_make_loader(tmp_path: Path) -> None:
    path = _sorted_store(tmp_path / "sorted.zarr")
    small: dict[str, Any] = {
        "ordering": chunkio.Ordering(pool_bytes=CHUNK * (3 * 4 * 4 + 8), lanes=1),
        "num_workers": 0,
    }
    w = _caught(LabelMixingWarning, lambda: chunkio.make_loader(path, 64, **small))
    assert w.filename == __file__, w.filename
    # a dataset given instead of a path: another route through make_loader, the same line
    ds = chunkio.ChunkDataset(path, fields=["image", "label"])
    w = _caught(LabelMixingWarning, lambda: chunkio.make_loader(ds, 32, **small))
    assert w.filename == __file__, w.filename


def test_ring_fallback_warning_names_the_line_that_called_make_loader(tmp_path: Path) -> None:
    path = _sorted_store(tmp_path / "any.zarr")
    ds = chunkio.ChunkDataset(path, fields=["image", "label"], transform=lambda s: s)
    w = _caught(RingFallbackWarning, lambda: chunkio.make_loader(ds, 8, num_workers=0))
    assert w.filename == __file__, w.filename


@pytest.mark.skipif(torch.cuda.is_available(), reason="pin_memory warns only without CUDA")
def test_pin_memory_warning_names_the_line_that_called_make_loader(tmp_path: Path) -> None:
    path = _sorted_store(tmp_path / "pin.zarr")
    pinned = chunkio.Workers(pin_memory=True)
    call = lambda: chunkio.make_loader(path, 8, num_workers=0, workers=pinned)  # noqa: E731
    w = _caught(UserWarning, call)
    assert "pin_memory" in str(w.message) and w.filename == __file__, w.filename


def test_caller_stacklevel_counts_the_frames_inside_chunkio() -> None:
    # called from here, outside chunkio: the function that warns is the user's own
    assert caller_stacklevel() == 1
