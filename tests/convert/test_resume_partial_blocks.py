"""Resuming a conversion whose staging holds some chunks of a block but not all of them.

A block (``block_chunks`` chunks) is redone unless *every* one of its chunks is staged and
verified (RELIABILITY row 10): a block with one chunk missing or corrupt, or a block wider
than the blocks of the interrupted run, must be written again, never published as it is.
The other resume tests use one-chunk blocks, where "any chunk done" and "all chunks done"
are the same thing.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import zarr_chunk_file
from test_convert_core import SUFFIX, SlowSource, assert_same_dataset, staging_of

from chunkio import ChunkDataset, Execution, Output
from chunkio.convert import run_conversion
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import SourceError

#: 200 samples, 5 per chunk: 40 chunks
CHUNKS = Output(chunks=5)
ONE_PROCESS = Execution(workers=1, progress=False)


def _interrupted(dst: Path, *, block_chunks: int, fail_at: int) -> None:
    """A conversion that fails at sample ``fail_at``, leaving its staging behind."""
    with pytest.raises(SourceError, match=f"sample {fail_at}"):
        run_conversion(
            SlowSource(fail_at=fail_at),
            dst,
            output=CHUNKS,
            execution=ONE_PROCESS,
            block_chunks=block_chunks,
        )


def _spoil(dst: Path, fmt: str, chunk: int) -> None:
    """Chunk ``chunk`` of field ``x`` in the staging: its Zarr file removed (as a writer
    killed before the rename leaves it), or one byte of its HDF5 bytes flipped."""
    data = staging_of(dst) / "data"
    if fmt == "zarr":
        zarr_chunk_file(data, "x", chunk).unlink()
        return
    with h5py.File(data, "r") as f:
        info = f["x"].id.get_chunk_info_by_coord((chunk * 5, 0, 0))
    with open(data, "r+b") as fh:
        fh.seek(info.byte_offset + 8)
        byte = fh.read(1)
        fh.seek(info.byte_offset + 8)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _finish_and_check(tmp_path: Path, dst: Path, fmt: str, *, resumed: int) -> None:
    """Resume with blocks of 4 chunks: ``resumed`` of the 10 blocks kept, the dataset equal
    to an uninterrupted run's and every chunk's checksum valid."""
    result = run_conversion(SlowSource(), dst, output=CHUNKS, execution=ONE_PROCESS, block_chunks=4)
    assert (result.resumed_blocks, result.written_blocks) == (resumed, 10 - resumed)
    report = verify(str(dst))
    assert report.ok, report.problems
    ref = tmp_path / f"ref{SUFFIX[fmt]}"
    run_conversion(SlowSource(), ref, output=CHUNKS, execution=ONE_PROCESS, block_chunks=4)
    assert_same_dataset(str(dst), str(ref))
    x = np.arange(200)[:, None, None] * 16.0 + np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(_read_x(dst), x.astype(np.float32))


def _read_x(dst: Path) -> np.ndarray:
    ds = ChunkDataset(dst, fields=["x"])
    try:
        return np.asarray(ds.read_batch(np.arange(len(ds)))["x"])
    finally:
        ds.close()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_a_block_with_one_chunk_lost_is_redone(tmp_path: Path, fmt: str) -> None:
    """Blocks of 4 chunks; the run fails in block 5 (chunk 21): blocks 0-4 are staged. Chunk
    6 (the middle of block 1) is then lost: block 1 is written again, blocks 0, 2, 3, 4 kept."""
    dst = tmp_path / f"d{SUFFIX[fmt]}"
    _interrupted(dst, block_chunks=4, fail_at=21 * 5)
    _spoil(dst, fmt, 6)
    _finish_and_check(tmp_path, dst, fmt, resumed=4)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_blocks_wider_than_the_interrupted_runs_are_redone_unless_whole(
    tmp_path: Path, fmt: str
) -> None:
    """The interrupted run wrote blocks of 1 chunk and failed at chunk 10 (chunks 0-9
    staged); resumed with blocks of 4, block 2 (chunks 8-11) is half done: written again."""
    dst = tmp_path / f"w{SUFFIX[fmt]}"
    _interrupted(dst, block_chunks=1, fail_at=10 * 5)
    _finish_and_check(tmp_path, dst, fmt, resumed=2)
