"""The codec table's names and settings: what a conversion writes, and how a stored chain is named.

Each :class:`Compression` is written by zarr-python and by h5py with the table's codecs and
filters, and read back from the stored metadata (``zarr.json``, ``.zarray``, the HDF5 filter
pipeline), so the expected names, levels and settings are the ones the libraries stored.
:func:`zarr_encoder` writes chunks byte for byte as zarr-python: the chunk files zarr-python
wrote are the reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from chunkio.backends.codec_names import (
    CodecInfo,
    hdf5_codec_info,
    zarr2_codec_info,
    zarr2_codecs,
    zarr_codec_info,
)
from chunkio.backends.codec_table import (
    CODECS,
    Compression,
    hdf5_filters,
    hdf5plugin_filters,
    zarr_codec_registered,
    zarr_compressors,
    zarr_encoder,
)

DATA = (np.arange(3000, dtype=np.int32) % 97 * 1000).reshape(300, 10)


def _clamped(level: int) -> int:
    return max(0, min(level, 9))


def _expected(c: Compression, checksum: str) -> CodecInfo:
    """How a stored :class:`Compression` is named: Blosc and gzip levels clamp to 0..9, the
    HDF5 LZ4 filter stores none, ``none`` has none."""
    if c.codec == "none":
        return CodecInfo("none", None, checksum if c.checksum else None)
    level = c.level if c.codec == "zstd" else _clamped(c.level)
    return CodecInfo(c.codec, level, checksum if c.checksum else None)


# -- Compression --------------------------------------------------------------------------------


def test_compression_defaults_per_codec() -> None:
    assert Compression() == Compression("lz4", 5, True)
    levels = {c: Compression(c).level for c in CODECS}
    assert levels == {"zstd": 3, "lz4": 5, "blosc-zstd": 3, "blosc-lz4": 5, "gzip": 6, "none": 0}


@pytest.mark.parametrize("level", [-5, 22])
def test_compression_levels_at_the_bounds_are_taken(level: int) -> None:
    assert Compression("zstd", level).level == level


@pytest.mark.parametrize("level", [-6, 23, 3.0, "3"])
def test_compression_levels_outside_the_bounds_are_refused(level: Any) -> None:
    with pytest.raises(ValueError, match=rf"level must be an int in \[-5, 22\]; got {level!r}"):
        Compression("zstd", level)


def test_compression_refuses_an_unknown_codec() -> None:
    with pytest.raises(ValueError, match=r"codec must be one of \('zstd', .*got 'brotli'"):
        Compression("brotli")


# -- what a conversion writes, read back from the stored metadata --------------------------------

CASES = [
    Compression(codec, level, checksum)
    for codec in CODECS
    for level in (-3, 0, 7, 12)
    for checksum in (True, False)
]


@pytest.mark.parametrize("c", CASES, ids=str)
def test_zarr_compressors_are_stored_as_the_table_says(tmp_path: Path, c: Compression) -> None:
    arr = zarr.create_array(
        tmp_path / "a.zarr", shape=DATA.shape, chunks=(100, 10), dtype=DATA.dtype,
        compressors=zarr_compressors(c),
    )  # fmt: skip
    arr[...] = DATA
    assert np.array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], DATA)
    codecs = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())["codecs"]
    assert zarr_codec_info(codecs) == _expected(c, "crc32c")
    conf = {e["name"]: e.get("configuration") for e in codecs}
    if c.codec in ("lz4", "blosc-zstd", "blosc-lz4"):
        cname, shuffle = {"lz4": ("lz4", "noshuffle"), "blosc-zstd": ("zstd", "bitshuffle"),
                          "blosc-lz4": ("lz4", "bitshuffle")}[c.codec]  # fmt: skip
        assert (conf["blosc"]["cname"], conf["blosc"]["shuffle"]) == (cname, shuffle)
        assert conf["blosc"]["clevel"] == _clamped(c.level)
    names = [e["name"] for e in codecs]
    assert ("crc32c" in names) == c.checksum
    assert c.checksum <= (names[-1] == "crc32c")  # the checksum guards the stored bytes


def _hdf5_pipeline(path: Path, c: Compression) -> list[tuple[int, tuple[int, ...]]]:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=DATA, chunks=(100, 10), **hdf5_filters(c))
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["x"][...], DATA)
        plist = f["x"].id.get_create_plist()
        return [
            (plist.get_filter(i)[0], tuple(plist.get_filter(i)[2]))
            for i in range(plist.get_nfilters())
        ]


@pytest.mark.parametrize("c", CASES, ids=str)
def test_hdf5_filters_are_stored_as_the_table_says(tmp_path: Path, c: Compression) -> None:
    pipeline = _hdf5_pipeline(tmp_path / "f.h5", c)
    expected = _expected(c, "fletcher32")
    if c.codec == "lz4":
        expected = CodecInfo("lz4", None, expected.checksum)  # the LZ4 filter has no level
    assert hdf5_codec_info(pipeline) == expected
    assert (3 in [fid for fid, _ in pipeline]) == c.checksum
    if c.codec.startswith("blosc"):
        (values,) = [v for fid, v in pipeline if fid == 32001]
        assert values[5] == 2  # bit shuffle


# -- chunks written as zarr-python writes them ------------------------------------------------

ENCODED = [
    ZstdCodec(level=0),
    ZstdCodec(level=5, checksum=True),
    ZstdCodec(level=-2),
    GzipCodec(level=1),
    GzipCodec(level=9),
    BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"),
    BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"),
    BloscCodec(cname="zlib", clevel=1, shuffle="shuffle", blocksize=256),
    BloscCodec(cname="blosclz", clevel=9, shuffle="shuffle", typesize=2),
]


@pytest.mark.parametrize("codec", ENCODED, ids=lambda c: str(c.to_dict()["configuration"]))
def test_zarr_encoder_writes_chunk_files_byte_for_byte_as_zarr_python(
    tmp_path: Path, codec: Any
) -> None:
    arr = zarr.create_array(
        tmp_path / "e.zarr", shape=DATA.shape, chunks=DATA.shape, dtype=DATA.dtype,
        compressors=[codec],
    )  # fmt: skip
    arr[...] = DATA
    meta = json.loads((tmp_path / "e.zarr" / "zarr.json").read_text())
    (entry,) = meta["codecs"][1:]
    encode = zarr_encoder(entry)
    assert encode is not None
    stored = (tmp_path / "e.zarr" / "c" / "0" / "0").read_bytes()
    assert bytes(encode(DATA.tobytes())) == stored


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "zstd", "configuration": {}},
        {"name": "gzip", "configuration": {}},
        {"name": "blosc", "configuration": {"cname": "lz4", "shuffle": "shuffle", "typesize": 4}},
    ],
    ids=["zstd", "gzip", "blosc"],
)
def test_zarr_encoder_fills_settings_metadata_leaves_out_as_zarr_python_does(
    tmp_path: Path, entry: dict[str, Any]
) -> None:
    """A zarr.json written by hand without a level or block size: zarr-python's defaults
    (on values whose encodings differ from one level to the next)."""
    data = (np.random.default_rng(0).zipf(1.5, 20_000) % 1000).astype(np.int32).reshape(200, 100)
    path = tmp_path / "p.zarr"
    zarr.create_array(path, shape=data.shape, chunks=data.shape, dtype=data.dtype)
    meta = json.loads((path / "zarr.json").read_text())
    meta["codecs"] = [meta["codecs"][0], entry]
    (path / "zarr.json").write_text(json.dumps(meta))
    zarr.open_array(path, mode="r+")[...] = data
    encode = zarr_encoder(entry)
    assert encode is not None
    ours, theirs = bytes(encode(data.tobytes())), (path / "c" / "0" / "0").read_bytes()
    if entry["name"] == "gzip":  # the header's bytes 4-7 are the time it was written
        ours, theirs = ours[:4] + ours[8:], theirs[:4] + theirs[8:]
    assert ours == theirs


def test_zarr_encoder_has_none_for_codecs_it_does_not_write() -> None:
    for entry in (
        {"name": "crc32c"},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.zlib", "configuration": {"level": 1}},
        {"name": "blosc", "configuration": {"shuffle": "byteshuffle"}},
        {"configuration": {"level": 1}},
    ):
        assert zarr_encoder(entry) is None


# -- naming a stored Zarr chain -----------------------------------------------------------------


def _zarr_codecs(path: Path, **kw: Any) -> list[dict[str, Any]]:
    arr = zarr.create_array(path, shape=(40, 4), chunks=(10, 4), dtype="uint16", **kw)
    arr[...] = np.arange(160, dtype=np.uint16).reshape(40, 4)
    if kw.get("zarr_format") == 2:
        return []
    codecs: list[dict[str, Any]] = json.loads((path / "zarr.json").read_text())["codecs"]
    return codecs


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"compressors": None}, CodecInfo("none")),
        ({"compressors": [zarr.codecs.Crc32cCodec()]}, CodecInfo("none", None, "crc32c")),
        ({"compressors": [ZstdCodec(level=4)]}, CodecInfo("zstd", 4)),
        (
            {"compressors": [GzipCodec(level=2), zarr.codecs.Crc32cCodec()]},
            CodecInfo("gzip", 2, "crc32c"),
        ),
        (
            {"compressors": [BloscCodec(cname="lz4", clevel=7, shuffle="shuffle")]},
            CodecInfo("blosc-lz4", 7),
        ),
        (
            {"compressors": [BloscCodec(cname="zlib", clevel=2, shuffle="noshuffle")]},
            CodecInfo("blosc-zlib", 2),
        ),
        ({"compressors": [ZstdCodec(level=1), GzipCodec(level=3)]}, CodecInfo("zstd+gzip")),
        (
            {"compressors": [ZstdCodec(level=1), GzipCodec(level=3), zarr.codecs.Crc32cCodec()]},
            CodecInfo("zstd+gzip", None, "crc32c"),
        ),
        (
            {"compressors": [ZstdCodec(level=6), zarr.codecs.Crc32cCodec()], "shards": (20, 4)},
            CodecInfo("zstd", 6, "crc32c"),
        ),
        (
            {
                "compressors": [BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")],
                "shards": (40, 4),
            },
            CodecInfo("lz4", 5),
        ),
    ],
)
def test_zarr_codec_info_names_what_zarr_python_stored(
    tmp_path: Path, kw: dict[str, Any], expected: CodecInfo
) -> None:
    assert zarr_codec_info(_zarr_codecs(tmp_path / "n.zarr", **kw)) == expected


def test_zarr_codec_info_of_a_shard_without_inner_codecs() -> None:
    assert zarr_codec_info([{"name": "sharding_indexed", "configuration": {}}]) == CodecInfo("none")
    assert zarr_codec_info([{"name": "sharding_indexed"}]) == CodecInfo("none")


def test_zarr_codec_info_of_a_compressor_without_a_level() -> None:
    chain = [{"name": "bytes"}, {"name": "zstd", "configuration": {}}, {"name": "crc32c"}]
    assert zarr_codec_info(chain) == CodecInfo("zstd", None, "crc32c")


def test_codec_info_prints_as_compression_names_it() -> None:
    assert str(CodecInfo("lz4", 5, "crc32c")) == "lz4(5)+crc32c"
    assert str(CodecInfo("gzip", 0, None)) == "gzip(0)"
    assert str(CodecInfo("zstd+gzip", None, "crc32c")) == "zstd+gzip+crc32c"
    assert str(CodecInfo("none", None, None)) == "none"


# -- Zarr v2 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"compressors": None}, CodecInfo("none")),
        ({"compressors": numcodecs.Zlib(level=1)}, CodecInfo("gzip", 1)),
        ({"compressors": numcodecs.GZip(level=7)}, CodecInfo("gzip", 7)),
        ({"compressors": numcodecs.Zstd(level=2)}, CodecInfo("zstd", 2)),
        ({"compressors": numcodecs.BZ2(level=3)}, CodecInfo("bz2", 3)),
        ({"compressors": numcodecs.LZ4()}, CodecInfo("lz4")),
        (
            {"compressors": numcodecs.Blosc("lz4", 4, numcodecs.Blosc.NOSHUFFLE)},
            CodecInfo("lz4", 4),
        ),
        (
            {
                "compressors": numcodecs.Blosc("lz4", 4, numcodecs.Blosc.SHUFFLE),
                "filters": [numcodecs.Delta(dtype="<u2")],
            },
            CodecInfo("blosc-lz4", 4),
        ),
    ],
)
def test_zarr2_chains_are_named_from_what_zarr_python_stored(
    tmp_path: Path, kw: dict[str, Any], expected: CodecInfo
) -> None:
    _zarr_codecs(tmp_path / "v2.zarr", zarr_format=2, **kw)
    meta = json.loads((tmp_path / "v2.zarr" / ".zarray").read_text())
    assert zarr2_codec_info(meta) == expected
    chain = [*(meta["filters"] or []), *([meta["compressor"]] if meta["compressor"] else [])]
    assert zarr2_codecs(meta) == [
        {"name": c["id"], "configuration": {k: v for k, v in c.items() if k != "id"}} for c in chain
    ]
    assert len(chain) == ("filters" in kw) + (kw["compressors"] is not None)


def test_zarr2_codecs_of_a_chain_without_filters_or_compressor() -> None:
    assert zarr2_codecs({"compressor": None, "filters": None}) == []
    assert zarr2_codecs({}) == []


# -- naming a stored HDF5 pipeline --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, CodecInfo("none")),
        (
            {"shuffle": True, "compression": "gzip", "compression_opts": 3, "fletcher32": True},
            CodecInfo("gzip", 3, "fletcher32"),
        ),
        ({"shuffle": True}, CodecInfo("none")),  # the byte shuffle alone compresses nothing
        ({"compression": "lzf"}, CodecInfo("lzf")),
        ({"scaleoffset": 0}, CodecInfo("scaleoffset")),
        ({"compression": hdf5plugin.Bitshuffle()}, CodecInfo("bitshuffle")),
        ({"compression": hdf5plugin.Zstd(clevel=9)}, CodecInfo("zstd", 9)),
        (
            {"compression": hdf5plugin.Blosc("zstd", 5, hdf5plugin.Blosc.SHUFFLE)},
            CodecInfo("blosc-zstd", 5),
        ),
        (
            {"compression": hdf5plugin.Blosc("blosclz", 8, hdf5plugin.Blosc.NOSHUFFLE)},
            CodecInfo("blosc-blosclz", 8),
        ),
    ],
)
def test_hdf5_codec_info_names_what_h5py_stored(
    tmp_path: Path, kw: dict[str, Any], expected: CodecInfo
) -> None:
    with h5py.File(tmp_path / "p.h5", "w") as f:
        f.create_dataset("x", data=DATA, chunks=(100, 10), **kw)
    with h5py.File(tmp_path / "p.h5", "r") as f:
        plist = f["x"].id.get_create_plist()
        pipeline = [
            (plist.get_filter(i)[0], tuple(plist.get_filter(i)[2]))
            for i in range(plist.get_nfilters())
        ]
    assert hdf5_codec_info(pipeline) == expected


def test_hdf5_codec_info_of_filters_without_their_values() -> None:
    assert hdf5_codec_info([(1, ())]) == CodecInfo("gzip")
    assert hdf5_codec_info([(32015, ())]) == CodecInfo("zstd")
    assert hdf5_codec_info([(32001, (2, 2, 4, 0, 5, 1))]) == CodecInfo("blosc")
    assert hdf5_codec_info([(32001, (2, 2, 4, 0, 5, 1, 9))]) == CodecInfo("blosc-9", 5)
    assert hdf5_codec_info([(61000, (1,)), (3, ())]) == CodecInfo(
        "filter-61000", None, "fletcher32"
    )


# -- what the registries here know --------------------------------------------------------------


def test_zarr_codec_registered_asks_the_registry_of_the_format() -> None:
    assert zarr_codec_registered("zlib", 2)
    assert not zarr_codec_registered("no-such-codec", 2)
    assert zarr_codec_registered("zstd", 3)
    assert zarr_codec_registered("numcodecs.zlib", 3)
    assert not zarr_codec_registered("zlib", 3)  # a numcodecs id, not a Zarr v3 name
    assert not zarr_codec_registered("no-such-codec", 3)


def test_zarr_codec_registered_needs_numcodecs_for_its_names() -> None:
    # zarr-python registers numcodecs.pcodec whether or not pcodec is installed
    from zarr.registry import get_codec_class

    get_codec_class("numcodecs.pcodec")
    try:
        numcodecs.get_codec({"id": "pcodec"})
    except (ValueError, ImportError, KeyError):
        pass
    else:  # pragma: no cover - pcodec installed here
        pytest.skip("pcodec is installed: its numcodecs id is registered")
    assert not zarr_codec_registered("numcodecs.pcodec", 3)


def test_hdf5plugin_filters_are_the_ones_h5py_can_use() -> None:
    filters = hdf5plugin_filters()
    assert {32001: "blosc", 32004: "lz4", 32015: "zstd", 32008: "bshuf"}.items() <= filters.items()
    assert all(isinstance(fid, int) and h5py.h5z.filter_avail(fid) for fid in filters)
