"""The one Zarr read engine returns exactly what zarr-python returns (the general path).

Random arrays written by zarr-python itself: dtypes, 1-3 axes, chunkings that split samples,
edge chunks, shards (also split along several axes), every compressor the engine decodes, with
and without crc32c. Each is read through chunkio's engine and through ``ZarrReader(...,
use_engine=False)`` (zarr-python), by random boxes and by random row ranges. The default run
draws 15 layouts of each kind plus one per compressor; ``-m slow`` draws 200.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import example, given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

from chunkio.backends import ReaderOptions
from chunkio.backends.zarr.backend import ZarrReader
from chunkio.errors import MissingChunkError
from chunkio.testing.contract import assert_row_reads_agree

COMPRESSORS: dict[str, list[Any]] = {
    "none": [],
    "zstd": [ZstdCodec(level=1)],
    "blosc-lz4": [BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")],
    "blosc-zstd-shuffle": [BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")],
    "gzip": [GzipCodec(level=5)],
}


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 13), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, n)) for n in shape)
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    return {
        "shape": shape,
        "chunks": chunks,
        "shards": shards,
        "dtype": draw(st.sampled_from(["uint8", "int16", "float32", "bool", "int64"])),
        "codec": draw(st.sampled_from(sorted(COMPRESSORS))),
        "crc": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def _write(root: Path, spec: dict[str, Any]) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(spec["seed"])
    data = (rng.random(spec["shape"]) * 100).astype(spec["dtype"])
    group = zarr.open_group(root, mode="w", zarr_format=3)
    compressors = COMPRESSORS[spec["codec"]] + ([Crc32cCodec()] if spec["crc"] else [])
    arr = group.create_array(
        "x",
        shape=data.shape,
        dtype=data.dtype,
        chunks=spec["chunks"],
        shards=spec["shards"],
        compressors=compressors,
        fill_value=0,
        config={"write_empty_chunks": True},
    )
    arr[...] = data
    return data


def _boxes(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> list[tuple[slice, ...]]:
    out = []
    for _ in range(n):
        lo = [int(rng.integers(0, s)) for s in shape]
        hi = [int(rng.integers(a + 1, s + 1)) for a, s in zip(lo, shape, strict=True)]
        out.append(tuple(slice(a, b) for a, b in zip(lo, hi, strict=True)))
    return out


def _every_codec_once(test: Any) -> Any:
    """A layout per compressor (sharded and with crc32c every other time), so that the default
    run's few random layouts cannot miss one."""
    base = {"shape": (7, 5), "chunks": (3, 2), "dtype": "int16", "seed": 1}
    for i, codec in enumerate(sorted(COMPRESSORS)):
        shards = (6, 4) if i % 2 == 0 else None
        test = example(spec={**base, "codec": codec, "shards": shards, "crc": i % 2 == 1})(test)
    return test


@_every_codec_once
@settings(max_examples=15, deadline=None)
@given(spec=layouts())
def test_engine_reads_what_zarr_python_reads(spec: dict[str, Any]) -> None:
    _assert_engine_reads_what_zarr_python_reads(spec)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(spec=layouts())
def test_engine_reads_what_zarr_python_reads_on_many_layouts(spec: dict[str, Any]) -> None:
    _assert_engine_reads_what_zarr_python_reads(spec)


def _assert_engine_reads_what_zarr_python_reads(spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "a.zarr"
        data = _write(root, spec)
        engine, general = ZarrReader(str(root)), ZarrReader(str(root), use_engine=False)
        try:
            assert engine.read_path("x") == "engine"  # the engine is what is tested
            assert general.read_path("x") == "zarr-python"
            rng = np.random.default_rng(spec["seed"])
            for region in _boxes(rng, data.shape, 6):
                shape = tuple(s.stop - s.start for s in region)
                a = np.full(shape, 7, data.dtype)
                b = np.full(shape, 9, data.dtype)
                engine.read_region("x", region, a)
                general.read_region("x", region, b)
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(a, data[region])
            assert_row_reads_agree(engine, general, "x", data, rng)
            _assert_each_row_chunk_alone_agrees(engine, general, "x", data)
        finally:
            engine.close()
            general.close()


def _assert_each_row_chunk_alone_agrees(
    engine: ZarrReader, general: ZarrReader, name: str, data: np.ndarray[Any, Any]
) -> None:
    """Each row chunk read alone (one range: the engine reads a whole chunk with no plan, as
    the windows' streamed cache asks for them) equals zarr-python's read and ``data``."""
    step = engine.array_info(name).chunks[0]
    for start in range(0, len(data), step):
        stop = min(start + step, len(data))
        a = np.full((stop - start, *data.shape[1:]), 7, data.dtype)
        b = np.full((stop - start, *data.shape[1:]), 9, data.dtype)
        engine.read_into(name, [(start, stop)], a)
        general.read_into(name, [(start, stop)], b)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, data[start:stop])


@pytest.mark.parametrize("shards", [None, (8, 4)])
def test_a_missing_chunk_is_an_error_on_both_paths(tmp_path: Path, shards: Any) -> None:
    root = tmp_path / "a.zarr"
    spec = {"shape": (16, 4), "chunks": (4, 4), "shards": shards, "dtype": "uint8"}
    _write(root, {**spec, "codec": "zstd", "crc": True, "seed": 0})
    victim = sorted(p for p in (root / "x" / "c").rglob("*") if p.is_file())[-1]
    victim.unlink()
    for reader in (ZarrReader(str(root)), ZarrReader(str(root), use_engine=False)):
        out = np.empty((16, 4), np.uint8)
        with pytest.raises(MissingChunkError, match="'x'"):
            reader.read_into("x", [(0, 16)], out)
        with pytest.raises(MissingChunkError, match="'x'"):  # the last chunk read alone
            reader.read_into("x", [(12, 16)], out[:4])
        reader.close()


V2_COMPRESSORS: dict[str, Any] = {
    "none": None,
    "blosc": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE),
    "zstd": numcodecs.Zstd(level=1),
    "zlib": numcodecs.Zlib(level=4),
    "gzip": numcodecs.GZip(level=4),
    "lz4": numcodecs.LZ4(),
    "bz2": numcodecs.BZ2(level=3),
}


@st.composite
def v2_layouts(draw: st.DrawFn) -> dict[str, Any]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 11), min_size=ndim, max_size=ndim)))
    kind = draw(st.sampled_from(["u1", "i2", "f4", "i8"]))
    endian = "|" if kind == "u1" else draw(st.sampled_from(["<", ">"]))
    return {
        "shape": shape,
        "chunks": tuple(draw(st.integers(1, n)) for n in shape),
        "dtype": endian + kind,
        "compressor": draw(st.sampled_from(sorted(V2_COMPRESSORS))),
        "delta": draw(st.booleans()),
        "order": draw(st.sampled_from(["C", "F"])),
        "separator": draw(st.sampled_from([".", "/"])),
        "fill": draw(st.sampled_from([0, 3, None])),
        "skip": draw(st.booleans()),  # leave the last chunks unwritten: they read as the fill
        "seed": draw(st.integers(0, 2**16)),
    }


def _write_v2(root: Path, spec: dict[str, Any]) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(spec["seed"])
    dtype = np.dtype(spec["dtype"])
    data = (rng.random(spec["shape"]) * 100).astype(dtype)
    group = zarr.open_group(root, mode="w", zarr_format=2)
    arr = group.create_array(
        "train/x",
        shape=data.shape,
        dtype=dtype,
        chunks=spec["chunks"],
        compressors=V2_COMPRESSORS[spec["compressor"]],
        filters=[numcodecs.Delta(dtype=dtype.str)] if spec["delta"] else None,
        fill_value=spec["fill"],
        order=spec["order"],
        chunk_key_encoding={"name": "v2", "separator": spec["separator"]},
    )
    stop = len(data) - spec["chunks"][0] if spec["skip"] and len(data) > spec["chunks"][0] else None
    arr[:stop] = data[:stop]
    return np.asarray(arr[...])  # what zarr-python reads back, fill values included


def _every_v2_compressor_once(test: Any) -> Any:
    """A v2 layout per compressor, varying the other choices, for the default run."""
    for i, compressor in enumerate(sorted(V2_COMPRESSORS)):
        spec = {
            "shape": (7, 5),
            "chunks": (3, 2),
            "dtype": "<i2" if i % 2 else ">f4",
            "compressor": compressor,
            "delta": i % 3 == 0,
            "order": "F" if i % 2 else "C",
            "separator": "/" if i % 2 else ".",
            "fill": [0, 3, None][i % 3],
            "skip": i % 2 == 0,
            "seed": i,
        }
        test = example(spec=spec)(test)
    return test


@_every_v2_compressor_once
@settings(max_examples=15, deadline=None)
@given(spec=v2_layouts())
def test_engine_reads_zarr_v2_arrays_as_zarr_python_does(spec: dict[str, Any]) -> None:
    _assert_engine_reads_v2_as_zarr_python_does(spec)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(spec=v2_layouts())
def test_engine_reads_zarr_v2_arrays_as_zarr_python_does_on_many_layouts(
    spec: dict[str, Any],
) -> None:
    _assert_engine_reads_v2_as_zarr_python_does(spec)


def _assert_engine_reads_v2_as_zarr_python_does(spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "v2.zarr"
        expected = _write_v2(root, spec)
        fill = ReaderOptions(fill_missing=True)
        engine = ZarrReader(str(root), fill)
        general = ZarrReader(str(root), fill, use_engine=False)
        try:
            assert engine.read_path("train/x") == "engine"
            assert general.read_path("train/x") == "zarr-python"
            rng = np.random.default_rng(spec["seed"])
            whole = tuple(slice(0, n) for n in expected.shape)
            for region in [whole, *_boxes(rng, expected.shape, 4)]:
                shape = tuple(s.stop - s.start for s in region)
                a = np.full(shape, 7, expected.dtype)
                b = np.full(shape, 9, expected.dtype)
                engine.read_region("train/x", region, a)
                general.read_region("train/x", region, b)
                np.testing.assert_array_equal(a, expected[region])
                np.testing.assert_array_equal(b, expected[region])
            _assert_each_row_chunk_alone_agrees(engine, general, "train/x", expected)
        finally:
            engine.close()
            general.close()
