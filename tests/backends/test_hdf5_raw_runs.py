"""HDF5 raw reads by runs: the chunks of touching row ranges read in one call, chunks stored back
to back in the file in one ``preadv`` (up to ``RUN_READ_BYTES``), rows exact against h5py, and a
file cut inside a run naming the chunk it ends in."""

from __future__ import annotations

import os
import shutil
from itertools import pairwise
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from chunkio.backends.base import StageClock
from chunkio.backends.hdf5 import raw as raw_module
from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.hdf5.raw import RawChunks
from chunkio.errors import CorruptChunkError, FormatError

ROWS, STEP = 50, 4  # 13 chunks, the last one of 2 rows


def _write(path: Path, *, gaps: bool = False, shuffled: bool = False) -> np.ndarray[Any, Any]:
    """An int32 (50, 3) array in gzip chunks of 4 rows; ``gaps``: chunks 3 and 7 never
    written (HDF5 reads them as the fill value, 0); ``shuffled``: the chunks written in a
    shuffled order, so few lie back to back in the file in the order of their rows."""
    data = np.arange(ROWS * 3, dtype=np.int32).reshape(ROWS, 3) + 1
    chunks = np.arange(-(-ROWS // STEP))
    if shuffled:
        np.random.default_rng(5).shuffle(chunks)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=data.shape, dtype=data.dtype, chunks=(STEP, 3),
                             compression="gzip")  # fmt: skip
        for c in chunks.tolist():
            if gaps and c in (3, 7):
                data[c * STEP : (c + 1) * STEP] = 0
            else:
                d[c * STEP : (c + 1) * STEP] = data[c * STEP : (c + 1) * STEP]
    return data


def _touching_ranges() -> list[tuple[int, int]]:
    """Every chunk as a range of its own (they touch at the chunks' edges), as the decoded
    chunk cache asks, then a range ending inside a chunk, then one apart."""
    ranges = [(c * STEP, (c + 1) * STEP) for c in range(8)]
    return [*ranges, (32, 35), (44, 50)]


@pytest.mark.parametrize("run_bytes", [1, 1 << 20])
@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
def test_touching_ranges_read_as_runs_equal_h5py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_bytes: int, gaps: bool, shuffled: bool
) -> None:
    path = tmp_path / "a.h5"
    data = _write(path, gaps=gaps, shuffled=shuffled)
    monkeypatch.setattr(raw_module, "RUN_READ_BYTES", run_bytes)
    reads = []
    preadv = os.preadv

    def counted(fd: int, buffers: Any, offset: int) -> int:
        reads.append(offset)
        return preadv(fd, buffers, offset)

    monkeypatch.setattr(raw_module.os, "preadv", counted)
    ranges = _touching_ranges()
    rows = sum(b - a for a, b in ranges)
    fast = HDF5Reader(str(path), fill_missing=gaps)
    general = HDF5Reader(str(path), raw_chunks=False, fill_missing=gaps)
    try:
        a, b = np.full((rows, 3), 7, np.int32), np.full((rows, 3), 9, np.int32)
        fast.read_into("x", ranges, a)
        general.read_into("x", ranges, b)
        assert fast.read_path("x") == "raw"
    finally:
        fast.close()
        general.close()
    expected = np.concatenate([data[p:q] for p, q in ranges])
    np.testing.assert_array_equal(b, expected)
    np.testing.assert_array_equal(a, expected)
    with h5py.File(path, "r") as f:
        index = RawChunks.build(f["x"], str(path), "x").index  # type: ignore[union-attr]
    runs = [[0, 1, 2], [4, 5, 6], [8], [11, 12]] if gaps else [list(range(9)), [11, 12]]
    stretches = sum(  # reads of chunks back to back in the file
        1 + sum(index[b][0] != index[a][0] + index[a][1] for a, b in pairwise(run)) for run in runs
    )
    chunks = sum(len(run) for run in runs)
    if not shuffled:
        assert stretches < chunks  # h5py wrote some chunks back to back
    else:
        assert stretches > len(runs)  # some runs' chunks apart in the file: read apart
    assert len(reads) == (chunks if run_bytes == 1 else stretches)


def test_the_read_buffer_stays_within_a_run_or_one_chunk(tmp_path: Path) -> None:
    """A read of many chunks stored back to back leaves each dataset's read buffer at most
    ``RUN_READ_BYTES`` (or its largest chunk): a worker keeps one per open dataset."""
    path = tmp_path / "big.h5"
    data = np.random.default_rng(0).integers(0, 1 << 30, (200_000, 4), dtype=np.int32)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(4096, 4), compression="gzip")
    reader = HDF5Reader(str(path))
    try:
        out = np.empty_like(data)
        reader.read_into("x", [(0, len(data))], out)
        assert reader.read_path("x") == "raw"
        chunks = reader._raw["x"]  # type: ignore[attr-defined]
        with h5py.File(path, "r") as f:
            largest = max(f["x"].id.get_chunk_info(i).size for i in range(49))  # type: ignore[union-attr]
    finally:
        reader.close()
    np.testing.assert_array_equal(out, data)
    assert 0 < chunks._buffer.size <= max(raw_module.RUN_READ_BYTES, largest)


def test_ranges_from_inside_a_chunk_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    _write(path)
    reader = HDF5Reader(str(path))
    try:
        with pytest.raises(FormatError, match=r"a\.h5: array 'x' is stored in chunks of 4 rows"):
            reader.read_into("x", [(0, 4), (6, 8)], np.empty((6, 3), np.int32))
    finally:
        reader.close()


def test_a_file_cut_inside_a_run_names_the_chunk_and_keeps_those_before(
    tmp_path: Path,
) -> None:
    path, cut = tmp_path / "a.h5", tmp_path / "cut.h5"
    data = _write(path)
    with h5py.File(path, "r") as f:
        chunks = RawChunks.build(f["x"], str(path), "x")
    assert chunks is not None
    last = max(chunks.index, key=lambda c: chunks.index[c][0])  # stored last in the file
    first = last - 2
    offset, size = chunks.index[last]
    assert chunks.index[first][0] + chunks.index[first][1] == chunks.index[first + 1][0]
    shutil.copy(path, cut)
    os.truncate(cut, offset + size - 5)  # its last 5 bytes gone
    out = np.full((ROWS - first * STEP, 3), 7, np.int32)
    fd = os.open(cut, os.O_RDONLY)
    try:
        with pytest.raises(
            CorruptChunkError,
            match=rf"array 'x': chunk {last} .*the file ends inside the chunk "
            rf"\({size - 5} of {size}\)",
        ):
            chunks.read_run_into(fd, first, last - first + 1, out, StageClock())
    finally:
        os.close(fd)
    np.testing.assert_array_equal(out[: 2 * STEP], data[first * STEP : (first + 2) * STEP])


def test_a_chunk_indexed_as_empty_ending_a_run_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    data = _write(path)
    with h5py.File(path, "r") as f:
        chunks = RawChunks.build(f["x"], str(path), "x")
    assert chunks is not None
    chunks.index[2] = (chunks.index[2][0], 0)  # a damaged index: no stored bytes
    out = np.full((3 * STEP, 3), 7, np.int32)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(CorruptChunkError, match=r"array 'x': chunk 2 .*cannot be decoded"):
            chunks.read_run_into(fd, 0, 3, out, StageClock())
    finally:
        os.close(fd)
    np.testing.assert_array_equal(out[: 2 * STEP], data[: 2 * STEP])
