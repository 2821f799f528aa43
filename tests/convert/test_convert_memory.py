"""``convert_arrays`` holds a bounded number of blocks whatever the source's size
(RELIABILITY row 38; ``benchmarks/bench_scale.py`` measures it at 1M-100M rows).

The blocks are made small (``STORE_BLOCK_BYTES``, ``STORE_READ_BYTES``) and the numpy order
(held whole) is limited to small sources (``WHOLE_ORDER_MAX``), so that a source 10x larger
runs the same blocks, only more of them: its traced peak must stay that of the small one
(both measured after a first conversion that imports and caches what any conversion does).
The conversion runs in this process (``workers=1``): a worker runs the same code per block.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

import chunkio.convert.arrays as arrays
from chunkio import ChunkDataset, Execution, Output, convert_arrays
from chunkio.convert.shuffle import order

WARM, SMALL, LARGE = 2_000, 50_000, 500_000
#: the large source's traced peak may exceed the small one's by this factor at most (the
#: per-row terms it replaced, the order and its inverse, made it ~4x)
GROWTH = 1.5


def _source(folder: Path, rows: int) -> Path:
    path = folder / f"src-{rows}.h5"
    with h5py.File(path, "w") as f:
        chunk = min(rows, 8192)
        x = f.create_dataset("x", shape=(rows, 2), dtype="f4", chunks=(chunk, 2))
        y = f.create_dataset("y", shape=(rows,), dtype="i4", chunks=(chunk,))
        for start in range(0, rows, 1 << 18):
            stop = min(rows, start + (1 << 18))
            x[start:stop] = np.arange(2 * start, 2 * stop, dtype=np.float32).reshape(-1, 2)
            y[start:stop] = np.arange(start, stop, dtype=np.int32)
    return path


def _traced_peak(src: Path, dst: Path, *, shuffle: bool) -> int:
    tracemalloc.start()
    try:
        convert_arrays(
            src,
            dst,
            fields={"x": "x", "y": "y"},
            shuffle=shuffle,
            seed=3,
            output=Output(chunks=4096),
            execution=Execution(workers=1, progress=False),
        )
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shuffle", [True, False])
def test_convert_arrays_memory_does_not_grow_with_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffle: bool
) -> None:
    monkeypatch.setattr(arrays, "STORE_BLOCK_BYTES", 256 << 10)
    monkeypatch.setattr(arrays, "STORE_READ_BYTES", 256 << 10)
    # absent before the order was served per block: then the test measures numpy's order
    monkeypatch.setattr(order, "WHOLE_ORDER_MAX", 20_000, raising=False)
    peaks = {}
    for rows in (WARM, SMALL, LARGE):
        src = _source(tmp_path, rows)
        dst = tmp_path / f"out-{rows}.zarr"
        peaks[rows] = _traced_peak(src, dst, shuffle=shuffle)
        got = ChunkDataset(dst)
        sample = got[rows - 1]
        got.close()
        index = int(sample["source_index"]) if shuffle else rows - 1
        assert int(sample["y"]) == index  # the data went where the order says
    assert peaks[LARGE] <= GROWTH * peaks[SMALL], (
        f"traced peak {peaks[LARGE] / 2**20:.1f} MiB at {LARGE} rows vs "
        f"{peaks[SMALL] / 2**20:.1f} MiB at {SMALL}: memory grows with the source"
    )
