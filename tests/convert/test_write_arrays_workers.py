"""``write_arrays(workers=N)``: never slower than one process for in-memory NumPy inputs.

A pool only re-pickles in-memory arrays into every worker, and zarr already compresses a
block's chunks in threads, so NumPy inputs are written in this process whatever ``workers``
says (``benchmarks/bench_convert.py`` measures the two side by side). Inputs that have to be
read (h5py, zarr, dask) still use the pool. Large chunks of NumPy inputs travel in blocks of
several chunks: each block costs a manifest record and an fsync per file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import source_array
from pool_counter import pools_fixture  # noqa: F401 (the pools fixture)

from chunkio import ChunkDataset, Execution, Output
from chunkio.convert.array_source import ArraySource
from chunkio.convert.arrays import write_arrays
from chunkio.convert.engine import workers as pool_policy


def data(n: int = 120) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.integers(0, 255, (n, 3, 4), dtype=np.uint8), "y": np.arange(n)}


def read_all(path: Path) -> dict[str, Any]:
    ds = ChunkDataset(path)
    return ds.read_batch(list(range(len(ds))))


def test_numpy_inputs_are_written_here_whatever_workers_says(
    tmp_path: Path, pools: list[int]
) -> None:
    one = write_arrays(tmp_path / "one.zarr", data(), output=Output(chunks=10))
    two = write_arrays(
        tmp_path / "two.zarr", data(), output=Output(chunks=10), execution=Execution(workers=2)
    )
    assert pools == [] and two.written_blocks == one.written_blocks == 12
    got, expected = read_all(tmp_path / "two.zarr"), read_all(tmp_path / "one.zarr")
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)


@pytest.mark.timeout(120)
def test_the_pool_is_still_used_when_forced_or_when_inputs_must_be_read(
    tmp_path: Path, pools: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = {k: source_array("h5py", v, tmp_path, k, dask_rows=30) for k, v in data().items()}
    kw: dict[str, Any] = {
        "output": Output(chunks=10),
        "execution": Execution(workers=2),
        "shuffle": False,
    }
    write_arrays(tmp_path / "h5.zarr", stored, **kw)  # in order: a block per chunk
    assert pools == [2]
    monkeypatch.setattr(pool_policy, "POOL_MIN_SECONDS", 0.0)
    write_arrays(tmp_path / "forced.zarr", data(), **kw)
    assert pools == [2, 2]
    got, expected = read_all(tmp_path / "forced.zarr"), read_all(tmp_path / "h5.zarr")
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)


def test_large_numpy_chunks_travel_several_to_a_block() -> None:
    images = np.zeros((64, 3, 64, 64), np.uint8)  # 12 KiB per sample
    source = ArraySource({"image": images})
    assert source.in_memory
    assert source.block_chunks(32) == 21  # 384 KiB chunks: about 8 MiB per block
    assert source.block_chunks(8) == 1  # 96 KiB chunks: one per block, as asked
