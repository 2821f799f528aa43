"""What the windows tests share: the streamed stack a dataset's reader holds, a loader's
epoch checked against a reference dataset's own reads, and a held part's writes let free of
their credit."""

from __future__ import annotations

from typing import Any

import numpy as np

import chunkio.read.windows.held as held
from chunkio import ChunkDataset


def streamed_stack(ds: Any) -> Any:
    """The one :class:`~chunkio.read.windows.stream.StreamedStack` of ``ds``'s reader."""
    (stack,) = [v for v in ds._handle().ctx.shared.values() if type(v).__name__ == "StreamedStack"]
    return stack


def check_window_epoch(loader: Any, reference: Any, epoch: int) -> None:
    """``loader``'s batches of ``epoch`` (the anchor's time last) equal ``reference``'s reads of
    the same anchors, and cover every anchor once."""
    loader.set_epoch(epoch)
    seen = []
    for *got, t in loader:
        picks = np.searchsorted(reference.anchors, np.asarray(t))
        want = reference.read_batch(picks)
        for name, value in zip(reference.fields, got, strict=False):
            np.testing.assert_array_equal(np.asarray(value), want[name])
        seen += np.asarray(t).tolist()
    assert sorted(seen) == reference.anchors.tolist()  # every anchor once


def window_dataset(path: Any, fields: Any, preload_bytes: int = 0) -> ChunkDataset:
    """``ChunkDataset(path, fields=fields)`` with nothing preloaded by default: the windows
    tests read every variable through the streamed or held stack."""
    return ChunkDataset(path, fields=fields, preload_bytes=preload_bytes)


def fill_part_at_once(monkeypatch: Any) -> None:
    """Each process may write every chunk of a held part it decodes (a credit without end):
    for tests of how the part is written, not of how much a process may write
    (``tests/read/test_windows_part_credit.py``). Readers made after this call (in this
    process, or workers forked from it) take it up."""
    monkeypatch.setattr(held, "START_CREDIT", 1 << 40)
