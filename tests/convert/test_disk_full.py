"""Disk full during a conversion (RELIABILITY row 11).

The N-th chunk write fails with ``ENOSPC``: the conversion raises a :class:`ConversionError`
naming the destination, with the ``OSError`` chained; nothing appears at the destination;
once space is back, rerunning the same call resumes (finished blocks are skipped) and yields
exactly what an uninterrupted run writes.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkio import ChunkDataset, Output, write_arrays
from chunkio.backends.hdf5.write import HDF5Writer
from chunkio.backends.zarr.backend import ZarrWriter
from chunkio.errors import ConversionError

SPC = 10
WRITER = {"zarr": ZarrWriter, "hdf5": HDF5Writer}
SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}


def arrays(n: int = 95) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "image": rng.integers(0, 255, size=(n, 2, 6, 6), dtype=np.uint8),
        "label": (np.arange(n) % 5).astype(np.int16),
    }


def read_everything(path: Path) -> dict[str, Any]:
    ds = ChunkDataset(path, preload_bytes=0)
    batch = ds.read_batch(np.arange(len(ds)))
    return {"layout": ds.layout, **batch}


def chunk_digests(path: Path) -> dict[str, str]:
    """Every file of a Zarr group by relative path -> sha256 (chunk bytes are deterministic)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = Path(root, name)
            out[str(full.relative_to(path))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


class DiskFull:
    """Patches a writer class so that its ``fail_at``-th ``write_block`` raises ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type, fail_at: int) -> None:
        self.calls = 0
        self.fail_at = fail_at
        self.full = True
        original = cls.write_block

        def write_block(writer: Any, name: str, start: int, data: np.ndarray) -> None:
            self.calls += 1
            if self.full and self.calls >= self.fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            original(writer, name, start, data)

        monkeypatch.setattr(cls, "write_block", write_block)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("fail_at", [1, 7])
def test_enospc_is_a_clear_error_and_resume_matches_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, fail_at: int
) -> None:
    data = arrays()
    reference = tmp_path / f"reference{SUFFIX[fmt]}"
    write_arrays(reference, data, output=Output(chunks=SPC))

    dst = tmp_path / f"out{SUFFIX[fmt]}"
    disk = DiskFull(monkeypatch, WRITER[fmt], fail_at)
    with pytest.raises(ConversionError) as info:
        write_arrays(dst, data, output=Output(chunks=SPC))
    err = info.value
    text = str(err)
    assert "No space left on device" in text or "ENOSPC" in text, text
    assert dst.name in text, f"the message should name the destination: {text}"
    assert "rerun" in text, text
    chained = err.__cause__
    assert isinstance(chained, OSError) and chained.errno == errno.ENOSPC
    assert not dst.exists(), "no final artifact while the conversion is unfinished"

    disk.full = False  # space is back
    result = write_arrays(dst, data, output=Output(chunks=SPC))
    # blocks with all 3 fields written: the 2 given and source_index (shuffled by default)
    finished_before = (fail_at - 1) // (len(data) + 1)
    assert result.resumed_blocks == finished_before, result
    assert result.resumed_blocks + result.written_blocks == -(-len(data["label"]) // SPC)

    got, want = read_everything(dst), read_everything(reference)
    assert got["layout"] == want["layout"]
    np.testing.assert_array_equal(got["source_index"], want["source_index"])
    for name in data:
        np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_array_equal(got[name], data[name][got["source_index"]])
    if fmt == "zarr":
        assert chunk_digests(dst) == chunk_digests(reference)
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == sorted([dst.name, reference.name]), "no staging or lock left behind"


def test_enospc_while_recording_progress_is_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest append itself hits the full disk: the block is redone, never trusted."""
    from chunkio.convert.durability import staging

    data = arrays()
    dst = tmp_path / "m.zarr"
    calls = {"n": 0}
    original = staging.StagedDestination.record

    def record(self: Any, first: int, stop: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        original(self, first, stop)

    monkeypatch.setattr(staging.StagedDestination, "record", record)
    with pytest.raises(ConversionError, match="No space left") as info:
        write_arrays(dst, data, output=Output(chunks=SPC))
    assert dst.name in str(info.value)
    assert not dst.exists()
    monkeypatch.setattr(staging.StagedDestination, "record", original)
    result = write_arrays(dst, data, output=Output(chunks=SPC))
    assert result.resumed_blocks == 2
    got = read_everything(dst)
    for name in data:
        np.testing.assert_array_equal(got[name], data[name][got["source_index"]])
