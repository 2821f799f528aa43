"""HDF5 raw chunk reads (chunkio's pread + the codec table's decoders) return what h5py returns.

Random arrays written by h5py itself: dtypes, 1-3 axes, chunks of whole samples (what raw reads
serve) or contiguous storage, edge chunks, every filter chunkio decodes, with and without the
byte shuffle filter and fletcher32. Each is read
through the raw path and through ``HDF5Reader(..., raw_chunks=False)`` (h5py). The default
run draws 12 layouts plus one per filter; ``-m slow`` draws 200.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.hdf5.raw import RawChunks
from chunkio.testing.contract import assert_row_reads_agree


def _filters(name: str) -> dict[str, Any]:
    return {
        "none": {},
        "gzip": {"compression": "gzip", "compression_opts": 4},
        "lz4": {"compression": hdf5plugin.LZ4()},
        "zstd": {"compression": hdf5plugin.Zstd(clevel=2)},
        "blosc": {"compression": hdf5plugin.Blosc(cname="lz4", clevel=5)},
    }[name]


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim)))
    return {
        "shape": shape,
        "rows": draw(st.integers(1, shape[0])),
        "contiguous": draw(st.booleans()),
        "shuffle": draw(st.booleans()),
        "dtype": draw(st.sampled_from(["uint8", "int16", "float32", "int64", "bool"])),
        "filter": draw(st.sampled_from(["none", "gzip", "lz4", "zstd", "blosc"])),
        "fletcher32": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _every_filter_once() -> list[dict[str, Any]]:
    """A chunked layout per filter, so that the default run's few random layouts cannot miss one."""
    base = {"shape": (7, 5), "rows": 3, "contiguous": False, "dtype": "int16", "seed": 1}
    return [
        {**base, "filter": name, "shuffle": i % 2 == 0, "fletcher32": i % 2 == 1}
        for i, name in enumerate(["none", "gzip", "lz4", "zstd", "blosc"])
    ]


def _with_examples(test: Any) -> Any:
    for spec in _every_filter_once():
        test = example(spec=spec)(test)
    return test


@_with_examples
@settings(max_examples=12, deadline=None)
@given(spec=layouts())
def test_raw_chunk_reads_equal_h5py(spec: dict[str, Any]) -> None:
    _assert_raw_reads_equal_h5py(spec)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(spec=layouts())
def test_raw_chunk_reads_equal_h5py_on_many_layouts(spec: dict[str, Any]) -> None:
    _assert_raw_reads_equal_h5py(spec)


def _assert_raw_reads_equal_h5py(spec: dict[str, Any]) -> None:
    rng = np.random.default_rng(spec["seed"])
    data = (rng.random(spec["shape"]) * 100).astype(spec["dtype"])
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "a.h5")
        with h5py.File(path, "w") as f:
            if spec["contiguous"]:  # no chunks, no filters: rows in order at one offset
                f.create_dataset("x", data=data)
            else:
                f.create_dataset(
                    "x",
                    data=data,
                    chunks=(spec["rows"], *data.shape[1:]),
                    fletcher32=spec["fletcher32"],
                    shuffle=spec["shuffle"],
                    **_filters(spec["filter"]),
                )
        raw, general = HDF5Reader(path), HDF5Reader(path, raw_chunks=False)
        try:
            assert raw.read_path("x") == "raw"  # the raw path is what is tested
            assert general.read_path("x") == "h5py"
            assert_row_reads_agree(raw, general, "x", data, rng)
        finally:
            raw.close()
            general.close()


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("fletcher32", [False, True])
def test_chunks_stored_with_a_filter_skipped_read_raw_as_h5py_reads_them(
    tmp_path: Path, shuffle: bool, fletcher32: bool
) -> None:
    """Blosc's HDF5 filter skips chunks it cannot shrink (filter mask bit set, the bytes
    stored as they came, shuffled or not): raw reads decode those without Blosc."""
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2**16, (64, 2000), dtype=np.uint16)
    data[::2] = 3  # even chunks of 1 row compress, odd ones of noise do not
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=data, chunks=(1, 2000), shuffle=shuffle, fletcher32=fletcher32,
            compression=hdf5plugin.Blosc(cname="lz4", clevel=5),
        )  # fmt: skip
        raw_chunks = RawChunks.build(f["x"], path, "x")
    assert raw_chunks is not None
    assert set(raw_chunks.skipped) == set(range(1, 64, 2)) and not raw_chunks.masked
    raw, general = HDF5Reader(path), HDF5Reader(path, raw_chunks=False)
    try:
        a, b = np.full_like(data, 7), np.full_like(data, 9)
        raw.read_into("x", [(0, 64)], a)
        general.read_into("x", [(0, 64)], b)
        np.testing.assert_array_equal(a, data)
        np.testing.assert_array_equal(b, data)
        assert raw.read_path("x") == "raw"
    finally:
        raw.close()
        general.close()
