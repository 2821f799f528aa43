"""Raw box reads of N-D chunked HDF5 datasets (:mod:`chunkio.backends.hdf5.grid`) return what
h5py returns: random shapes and chunk grids along every axis (edge chunks), dtypes (big-endian
too), every filter chunkio decodes with and without shuffle and fletcher32, chunks Blosc stored
unfiltered, partial edge chunks stored unfiltered (``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``);
chains chunkio cannot decode stay with h5py."""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio.backends import _checksum
from chunkio.backends._checksum import Fletcher32, fletcher32_reference
from chunkio.backends.base import StageClock
from chunkio.backends.hdf5 import grid as grid_module
from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.hdf5.grid import RawGrid, partial_chunks_unfiltered
from chunkio.backends.hdf5.raw import RawChunks
from chunkio.errors import MissingChunkError

FILTERS: dict[str, dict[str, Any]] = {
    "none": {},
    "gzip": {"compression": "gzip", "compression_opts": 4},
    "lz4": {"compression": hdf5plugin.LZ4()},
    "zstd": {"compression": hdf5plugin.Zstd(clevel=2)},
    "blosc": {"compression": hdf5plugin.Blosc(cname="zstd", clevel=5)},
}


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 11), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, n)) for n in shape)
    return {
        "shape": shape,
        "chunks": chunks,
        "dtype": draw(st.sampled_from(["u1", "<i2", ">i2", "<f4", ">f8", "bool"])),
        "filter": draw(st.sampled_from(list(FILTERS))),
        "shuffle": draw(st.booleans()),
        "fletcher32": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _boxes(
    shape: tuple[int, ...], rng: np.random.Generator, n: int, chunks: tuple[int, ...] = ()
) -> list[tuple[slice, ...]]:
    """The whole array, ``n`` random boxes and, given ``chunks``, 3 boxes of one chunk each
    (a patch read's chunk: whole, or an edge chunk cut short)."""
    boxes = [tuple(slice(0, s) for s in shape)]
    for _ in range(n):
        lo = [int(rng.integers(0, s)) for s in shape]
        boxes.append(
            tuple(slice(a, int(rng.integers(a + 1, s + 1))) for a, s in zip(lo, shape, strict=True))
        )
    for _ in range(3 if chunks else 0):
        at = [int(rng.integers(0, -(-s // c))) * c for s, c in zip(shape, chunks, strict=True)]
        boxes.append(
            tuple(slice(a, min(a + c, s)) for a, c, s in zip(at, chunks, shape, strict=True))
        )
    return boxes


def _assert_boxes_agree(path: str, data: np.ndarray[Any, Any], rng: np.random.Generator) -> None:
    raw, general = HDF5Reader(path), HDF5Reader(path, raw_chunks=False)
    try:
        assert raw.read_path("x") == "raw" and general.read_path("x") == "h5py"
        chunks = tuple(general._dataset("x").chunks)
        for box in _boxes(data.shape, rng, 12, chunks):
            a = np.full([s.stop - s.start for s in box], 3, data.dtype)
            b = np.full_like(a, 5)
            raw.read_region("x", box, a)
            general.read_region("x", box, b)
            np.testing.assert_array_equal(a, data[box])
            np.testing.assert_array_equal(b, a)
        rows = np.full_like(data, 4)
        stop = data.shape[0]
        raw.read_into("x", [(0, stop)], rows)
        np.testing.assert_array_equal(rows, data)
    finally:
        raw.close()
        general.close()


@settings(max_examples=60, deadline=None)
@given(spec=layouts())
def test_raw_box_reads_equal_h5py(spec: dict[str, Any]) -> None:
    rng = np.random.default_rng(spec["seed"])
    data = (rng.random(spec["shape"]) * 100).astype(spec["dtype"])
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "a.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=data, chunks=spec["chunks"], shuffle=spec["shuffle"],
                             fletcher32=spec["fletcher32"], **FILTERS[spec["filter"]])  # fmt: skip
        _assert_boxes_agree(path, data, rng)


def test_chunks_blosc_left_unfiltered_decode_without_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 2**16, (8, 40, 40), dtype=np.uint16)
    data[:, :20] = 3  # chunks of constant value compress, the chunks of noise do not
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(4, 20, 20), shuffle=True, fletcher32=True,
                         compression=hdf5plugin.Blosc(cname="lz4", clevel=5))  # fmt: skip
        grid = RawGrid.build(f["x"], "x")
    assert grid is not None and not grid.masked
    assert {m for _, _, m in grid.index.values()} == {0, 2}  # Blosc (filter 1) skipped on some
    _assert_boxes_agree(path, data, rng)


def _libhdf5() -> Any:
    with open("/proc/self/maps") as f:
        maps = [line.split()[-1] for line in f if "/libhdf5-" in line]
    return ctypes.CDLL(maps[0]) if maps else None


def _unfiltered_partial_chunks(f: h5py.File, name: str, data: Any, chunks: Any) -> Any:
    """``data`` as dataset ``name`` (gzip, fletcher32), partial edge chunks left unfiltered
    (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS: h5py cannot set it, ctypes does)."""
    lib = _libhdf5()
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_deflate(4)
    dcpl.set_fletcher32()
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert lib.H5Pset_chunk_opts(dcpl.id, 2) >= 0
    space = h5py.h5s.create_simple(data.shape)
    dset = h5py.Dataset(h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_I16LE, space, dcpl=dcpl))
    dset[...] = data
    assert partial_chunks_unfiltered(dset.id.get_create_plist()) is True
    return dset


@pytest.mark.parametrize("chunks", [(4, 5, 7), (4, 13, 7)], ids=["grid", "rows"])
def test_partial_edge_chunks_stored_unfiltered_read_raw(
    tmp_path: Path, chunks: tuple[int, ...]
) -> None:
    """Partial edge chunks stored as they are, at the full chunk size, whatever the filters:
    read raw by boxes and (chunks of whole samples) by rows, as h5py reads them."""
    if _libhdf5() is None:
        pytest.skip("libhdf5 is not a shared library of its own here")
    data = np.random.default_rng(2).integers(-9, 9, (10, 13, 7)).astype(np.int16)
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        dset = _unfiltered_partial_chunks(f, "x", data, chunks)
        grid, rows = RawGrid.build(dset, "x"), RawChunks.build(dset, path, "x")
        edge_size = dset.id.get_chunk_info_by_coord((8, 10, 0)).size
    assert edge_size == int(np.prod(chunks)) * 2  # stored unfiltered
    assert grid is not None and not grid.masked
    assert (rows is None) == (chunks[1] != 13)
    if rows is not None:  # its edge chunk decoded raw, not left to h5py
        assert not rows.masked and rows.skipped == {2: 0xFFFFFFFF}
    _assert_boxes_agree(path, data, np.random.default_rng(3))


def test_where_libhdf5_cannot_be_asked_full_size_edge_chunks_go_to_h5py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if _libhdf5() is None:
        pytest.skip("libhdf5 is not a shared library of its own here")
    data = np.random.default_rng(5).integers(-9, 9, (10, 13, 7)).astype(np.int16)
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        _unfiltered_partial_chunks(f, "x", data, (4, 5, 7))
    monkeypatch.setattr(grid_module, "partial_chunks_unfiltered", lambda plist: None)
    with h5py.File(path, "r") as f:
        grid = RawGrid.build(f["x"], "x")
    partial = {c for c in itertools.product(range(3), range(3), range(1)) if 2 in c[:2]}
    assert grid is not None and grid.masked == partial  # the chunks h5py reads
    _assert_boxes_agree(path, data, np.random.default_rng(6))


@pytest.mark.parametrize(
    "filters",
    [{"compression": "lzf"}, {"scaleoffset": 0}, {"compression": hdf5plugin.Bitshuffle()}],
    ids=["lzf", "scaleoffset", "bitshuffle"],
)
def test_chains_chunkio_cannot_decode_are_read_by_h5py(
    tmp_path: Path, filters: dict[str, Any]
) -> None:
    data = np.random.default_rng(4).integers(0, 500, (9, 10, 11)).astype(np.int32)
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(4, 4, 4), **filters)
        assert RawGrid.build(f["x"], "x") is None
    reader = HDF5Reader(path)
    try:
        assert reader.read_path("x") == "h5py"
        out = np.empty((5, 6, 7), np.int32)
        reader.read_region("x", (slice(2, 7), slice(3, 9), slice(4, 11)), out)
        np.testing.assert_array_equal(out, data[2:7, 3:9, 4:11])
    finally:
        reader.close()


def refuse_h5py(*args: Any) -> None:
    raise AssertionError("read through h5py")


def test_a_box_of_one_whole_chunk_missing_filled_or_left_to_h5py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box that is one whole chunk (a patch read's chunk, decoded straight into its slot):
    never written, it is the fill value or a MissingChunkError; one HDF5 must decode itself
    goes to h5py; the others decode to the data."""
    data = np.random.default_rng(5).integers(-900, 900, (8, 8, 6)).astype(np.int16)
    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data.shape, np.int16, chunks=(4, 4, 3), fillvalue=7,
                             compression="gzip", fletcher32=True)  # fmt: skip
        d[:4] = data[:4]  # the chunks of rows 4..7 are never written
    written, never = (
        (slice(0, 4), slice(4, 8), slice(3, 6)),
        (slice(4, 8), slice(0, 4), slice(0, 3)),
    )
    filled, strict = HDF5Reader(path, fill_missing=True), HDF5Reader(path)
    try:
        out = np.full((4, 4, 3), 3, np.int16)
        filled.read_region("x", never, out)
        assert (out == 7).all()
        with pytest.raises(MissingChunkError, match=r"a\.h5: array 'x': chunk \(1, 0, 0\) is"):
            strict.read_region("x", never, out)  # the reader lists never-written chunks first
        strict.read_region("x", written, out)
        np.testing.assert_array_equal(out, data[written])
        grid = strict._chunk_readers("x")[1]
        assert grid is not None
        # a reader of the file's bytes by ranges (a remote file) asks the grid directly
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(MissingChunkError, match=r"'x': chunk \(1, 0, 0\) \(elements \[4:8"):
                grid.read_region(never, out, grid.pread(fd), StageClock(), fallback=refuse_h5py)
        finally:
            os.close(fd)
        grid.masked = frozenset({(0, 1, 1)})

        def refuse(*args: Any) -> None:
            raise AssertionError("a chunk HDF5 must decode was decoded raw")

        monkeypatch.setattr(grid, "decode_into", refuse)
        out[...] = 3
        strict.read_region("x", written, out)
        np.testing.assert_array_equal(out, data[written])
    finally:
        filled.close()
        strict.close()


@pytest.mark.parametrize("size", [0, 1, 2, 3, 7, 8, 9, 4097, 65536, 786432, 786433, 786438])
def test_fletcher32_of_small_and_large_buffers_is_hdf5s(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Buffers up to 768 KiB are summed by numcodecs' C loop, larger ones by NumPy: both give
    HDF5's sum (the reference loop), on either side of the threshold and forced each way."""
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    data[: size // 3] = 255  # long runs of 0xff: sums that wrap modulo 65535
    want = fletcher32_reference(data.tobytes())
    assert Fletcher32()(data) == want
    monkeypatch.setattr(_checksum, "_C_BELOW", -1)  # NumPy for every size
    assert Fletcher32()(data) == want
    monkeypatch.setattr(_checksum, "_C_BELOW", 1 << 30)  # numcodecs for every size
    assert Fletcher32()(data) == want
