"""Zarr v3 shards built and parsed by chunkio (``chunkio.backends.zarr.shard``).

Every shard chunkio builds must be byte for byte what zarr-python writes for the same data,
and zarr-python must read it back; damaged indexes must raise CorruptChunkError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

from chunkio.backends._checksum import crc32c
from chunkio.backends.codec_table import zarr_encoder
from chunkio.backends.zarr.shard import (
    EMPTY,
    ShardLayout,
    check_index,
    encode_shard,
    index_nbytes,
    inner_range,
    merged_ranges,
    morton_order,
    parse_index,
    shard_layout,
    shard_parts,
    sharding_codec,
)
from chunkio.backends.zarr.writing import write_file
from chunkio.errors import CorruptChunkError, FormatError

KEYS = {"name": "default", "separator": "."}
LZ4 = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "noshuffle"}}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}
CRC = {"name": "crc32c"}
LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}

# (id, dtype, sample shape, rows, inner rows, shard rows, zarr compressors, chunkio's codecs)
CASES: list[tuple[str, Any, tuple[int, ...], int, int, int, list[Any], list[dict[str, Any]]]] = [
    (
        "images-lz4-crc",
        np.uint8,
        (3, 8, 8),
        10,
        2,
        8,
        [BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"), Crc32cCodec()],
        [LZ4, CRC],
    ),
    ("labels-zstd-crc", np.int64, (), 21, 4, 12, [ZstdCodec(level=3), Crc32cCodec()], [ZSTD, CRC]),
    ("labels-zstd", np.int64, (), 24, 4, 12, [ZstdCodec(level=3)], [ZSTD]),
    ("images-none", np.uint8, (3, 8, 8), 16, 2, 8, [], []),
    ("floats-none-crc", np.float32, (5,), 13, 3, 9, [Crc32cCodec()], [CRC]),
    (
        "images-gzip-crc",
        np.uint8,
        (2, 4),
        11,
        2,
        4,
        [GzipCodec(level=5), Crc32cCodec()],
        [GZIP, CRC],
    ),
]


def _data(dtype: Any, sample: tuple[int, ...], rows: int) -> npt.NDArray[Any]:
    rng = np.random.default_rng(rows)
    data = rng.integers(0, 200, (rows, *sample)).astype(dtype)
    data[1:5] = 0  # all-zero (fill value) inner chunks
    return data


def _write_zarr(
    path: Path,
    data: npt.NDArray[Any],
    inner: int,
    shard: int,
    compressors: list[Any],
    *,
    write_empty_chunks: bool = True,
    index_location: str = "end",
) -> Any:
    arr = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=(inner, *data.shape[1:]),
        shards={"shape": (shard, *data.shape[1:]), "index_location": index_location},  # type: ignore[arg-type]
        dtype=data.dtype,
        compressors=compressors,
        filters=None,
        fill_value=0,
        chunk_key_encoding=KEYS,  # type: ignore[arg-type]
        config={"write_empty_chunks": write_empty_chunks},
    )
    arr[:] = data
    return arr


def _meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((path / "zarr.json").read_text())
    return meta


def _shard_path(path: Path, s: int, ndim: int) -> Path:
    return path / ".".join(["c", str(s), *("0" for _ in range(ndim - 1))])


def _encode_inner(chunk: npt.NDArray[Any], codecs: list[dict[str, Any]]) -> bytes:
    """One inner chunk through chunkio's own (unsharded) encoder path."""
    assert codecs[0]["name"] == "bytes"
    rest = list(codecs[1:])
    checksum = bool(rest) and rest[-1]["name"] == "crc32c"
    if checksum:
        rest = rest[:-1]
    payload = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
    compress = zarr_encoder(rest[0]) if rest else None
    body = bytes(payload if compress is None else compress(payload))
    if checksum:
        body += crc32c(np.frombuffer(body, np.uint8)).to_bytes(4, "little")
    return body


def _inner_chunks(
    data: npt.NDArray[Any],
    layout: ShardLayout,
    s: int,
    *,
    keep_empty: bool = True,
) -> list[bytes | None]:
    """Shard ``s``'s inner chunks encoded by chunkio, ``None`` where zarr stores none."""
    inner = layout.inner_chunks[0]
    out: list[bytes | None] = []
    for j in range(layout.n_inner):
        start = s * layout.shard_shape[0] + j * inner
        if start >= len(data):
            out.append(None)  # wholly past the array's end
            continue
        chunk = np.zeros(layout.inner_chunks, data.dtype)
        part = data[start : start + inner]
        chunk[: len(part)] = part
        if not keep_empty and not chunk.any():
            out.append(None)
            continue
        out.append(_encode_inner(chunk, layout.inner_codecs))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_shards_are_the_bytes_zarr_writes(tmp_path: Path, case: Any) -> None:
    name, dtype, sample, rows, inner, shard, compressors, _ = case
    data = _data(dtype, sample, rows)
    _write_zarr(tmp_path / "a", data, inner, shard, compressors)
    layout = shard_layout(_meta(tmp_path / "a"))
    assert layout is not None
    assert layout.n_inner == shard // inner
    n_shards = -(-rows // shard)
    for s in range(n_shards):
        theirs = _shard_path(tmp_path / "a", s, data.ndim).read_bytes()
        ours = encode_shard(_inner_chunks(data, layout, s))
        # a gzip stream holds its writing time (header bytes 4..7), so chunks re-encoded in
        # another second differ there; zarr's own chunks rebuilt below are compared whole
        if "gzip" not in name:
            assert ours == theirs, f"shard {s}"
        else:
            assert len(ours) == len(theirs), f"shard {s}"
        # slicing zarr's shard by its own index gives the same chunks
        index = layout.parse_index(theirs, where=f"shard {s}")
        sliced = [
            None if (r := inner_range(index, j)) is None else theirs[r[0] : r[1]]
            for j in range(layout.n_inner)
        ]
        again = _inner_chunks(data, layout, s)
        if "gzip" in name:  # the writing time again: compare what the header does not hold
            sliced_cmp = [None if c is None else c[:4] + c[8:-4] for c in sliced]
            again = [None if c is None else c[:4] + c[8:-4] for c in again]
            assert sliced_cmp == again
        else:
            assert sliced == again
        assert encode_shard(sliced) == theirs
    if rows % shard:  # the partial last shard stores only chunks reaching into the array
        last = layout.parse_index(
            _shard_path(tmp_path / "a", n_shards - 1, data.ndim).read_bytes(), where="last"
        )
        stored = [inner_range(last, j) is not None for j in range(layout.n_inner)]
        reach = -(-(rows - (n_shards - 1) * shard) // inner)
        assert stored == [j < reach for j in range(layout.n_inner)]


@pytest.mark.parametrize("case", CASES[:2], ids=[c[0] for c in CASES[:2]])
def test_write_empty_chunks_false_leaves_fill_chunks_out(tmp_path: Path, case: Any) -> None:
    _, dtype, sample, rows, inner, shard, compressors, _ = case
    data = _data(dtype, sample, rows)
    data[inner : 2 * inner] = 0  # inner chunk 1 of shard 0: fill values
    data[shard : 2 * shard] = 0  # a whole shard of fill values
    _write_zarr(tmp_path / "a", data, inner, shard, compressors, write_empty_chunks=False)
    layout = shard_layout(_meta(tmp_path / "a"))
    assert layout is not None
    assert not _shard_path(tmp_path / "a", 1, data.ndim).exists()  # zarr writes no object
    theirs = _shard_path(tmp_path / "a", 0, data.ndim).read_bytes()
    index = layout.parse_index(theirs, where="shard 0")
    assert inner_range(index, 1) is None  # left out
    assert encode_shard(_inner_chunks(data, layout, 0, keep_empty=False)) == theirs
    assert encode_shard(_inner_chunks(data, layout, 0)) != theirs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_sharding_codec_is_zarrs_metadata(tmp_path: Path, case: Any) -> None:
    _, dtype, sample, rows, inner, shard, compressors, codecs = case
    data = _data(dtype, sample, rows)
    _write_zarr(tmp_path / "a", data, inner, shard, compressors)
    (theirs,) = _meta(tmp_path / "a")["codecs"]
    ours = sharding_codec((inner, *sample), [LITTLE, *codecs], dtype=dtype)
    assert ours == theirs
    assert json.dumps(ours) == json.dumps(theirs)  # key order too
    # given as zarr writes them, the inner codecs are kept as they are
    assert sharding_codec((inner, *sample), theirs["configuration"]["codecs"]) == theirs


def test_index_at_start_is_the_bytes_zarr_writes(tmp_path: Path) -> None:
    data = _data(np.int64, (), 21)
    _write_zarr(tmp_path / "a", data, 4, 12, [ZstdCodec(level=3)], index_location="start")
    meta = _meta(tmp_path / "a")
    layout = shard_layout(meta)
    assert layout is not None and layout.index_location == "start"
    assert meta["codecs"][0] == sharding_codec((4,), [LITTLE, ZSTD], index_location="start")
    for s in range(2):
        theirs = _shard_path(tmp_path / "a", s, 1).read_bytes()
        inner = _inner_chunks(data, layout, s)
        assert layout.encode(inner) == theirs
        assert encode_shard(inner, index_location="start") == theirs
        index = layout.parse_index(theirs, where="x")
        assert [None if (r := inner_range(index, j)) is None else theirs[r[0] : r[1]]
                for j in range(3)] == inner  # fmt: skip


def test_chunks_are_stored_in_morton_order(tmp_path: Path) -> None:
    """With a 2-D grid of inner chunks zarr stores them in Morton order (index in C order)."""
    data = np.arange(64, dtype=np.int16).reshape(8, 8) + 1
    arr = zarr.create_array(
        str(tmp_path / "a"),
        shape=(8, 8),
        chunks=(2, 2),
        shards=(8, 8),
        dtype=np.int16,
        compressors=[],
        filters=None,
        fill_value=0,
    )
    arr[:] = data
    theirs = (tmp_path / "a" / "c" / "0" / "0").read_bytes()
    chunks: list[bytes | None] = [
        data[2 * i : 2 * i + 2, 2 * j : 2 * j + 2].tobytes() for i in range(4) for j in range(4)
    ]
    assert encode_shard(chunks, grid=(4, 4)) == theirs
    assert encode_shard(chunks) != theirs
    assert morton_order((4, 4))[:6].tolist() == [0, 4, 1, 5, 8, 12]
    assert morton_order((5, 1, 1)).tolist() == [0, 1, 2, 3, 4]


def test_zarr_reads_shards_chunkio_builds(tmp_path: Path) -> None:
    data = _data(np.uint8, (3, 8, 8), 10)
    path = tmp_path / "a"
    arr = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=(2, 3, 8, 8),
        shards=(8, 3, 8, 8),
        dtype=np.uint8,
        compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"), Crc32cCodec()],
        filters=None,
        fill_value=0,
        chunk_key_encoding=KEYS,  # type: ignore[arg-type]
    )
    layout = shard_layout(_meta(path))
    assert layout is not None
    for s in range(2):  # shard 0 without its all-zero chunk: zarr fills it in
        _shard_path(path, s, 4).write_bytes(
            encode_shard(_inner_chunks(data, layout, s, keep_empty=s == 1))
        )
    np.testing.assert_array_equal(arr[:], data)
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[3:9], data[3:9])
    # a shard of nothing but empty chunks: the bare index reads as fill values
    _shard_path(path, 1, 4).write_bytes(encode_shard([None] * 4))
    expected = data.copy()
    expected[8:] = 0
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[:], expected)


def test_parse_index_round_trip() -> None:
    rng = np.random.default_rng(1)
    chunks: list[bytes | None] = [
        None if i % 3 == 1 else rng.bytes(int(rng.integers(1, 50))) for i in range(7)
    ]
    shard = encode_shard(chunks)
    assert len(shard) == sum(len(c) for c in chunks if c) + index_nbytes(7) == len(shard)
    assert index_nbytes(7) == 16 * 7 + 4
    for tail in (shard, shard[-index_nbytes(7) :], memoryview(shard), np.frombuffer(shard, "u1")):
        index = parse_index(tail, 7, where="x", shard_size=len(shard))
        assert index.shape == (7, 2) and index.dtype == np.uint64
        got = [
            None if (r := inner_range(index, i)) is None else shard[r[0] : r[1]] for i in range(7)
        ]
        assert got == chunks
    assert parse_index(shard, 7, where="x")[1].tolist() == [EMPTY, EMPTY]
    # b"" is a chunk not stored, as zarr-python treats it
    assert encode_shard([b"", b"a"]) == encode_shard([None, b"a"])
    # without the index crc32c
    bare = encode_shard(chunks, checksum=False)
    assert bare == shard[:-4]
    np.testing.assert_array_equal(parse_index(bare, 7, where="x", checksum=False), index)


def _damaged(shard: bytes, at: int) -> bytes:
    out = bytearray(shard)
    out[at] ^= 0x01
    return bytes(out)


def test_corrupt_index_crc_raises() -> None:
    shard = encode_shard([b"abc", b"defg", None])
    n = index_nbytes(3)
    for at in (len(shard) - n, len(shard) - 5, len(shard) - 1):  # entry bytes and the crc
        with pytest.raises(CorruptChunkError, match=r"shard c\.7.*crc32c"):
            parse_index(_damaged(shard, at), 3, where="shard c.7")
    layout = ShardLayout((1,), (3,), [LITTLE], "end", [LITTLE, CRC], True)
    with pytest.raises(CorruptChunkError, match="crc32c"):
        layout.parse_index(_damaged(shard, len(shard) - 20), where="s")
    layout.parse_index(shard, where="s")


def test_truncated_shard_raises() -> None:
    shard = encode_shard([b"abc" * 10, b"defg" * 10, b"xyz"])
    with pytest.raises(CorruptChunkError, match="crc32c"):
        parse_index(shard[:-10], 3, where="s")  # the tail is no longer the index
    with pytest.raises(CorruptChunkError, match=r"shard 5: shard is truncated: 30 bytes"):
        parse_index(shard[:30], 3, where="shard 5")
    # the front lost: the index is intact but points past the shard's end
    with pytest.raises(CorruptChunkError, match="index points past its end"):
        parse_index(shard[20:], 3, where="s", shard_size=len(shard) - 20)
    parse_index(shard[20:], 3, where="s")  # without shard_size only the checksum is checked
    layout = ShardLayout((1,), (3,), [LITTLE], "end", [LITTLE, CRC], True)
    with pytest.raises(CorruptChunkError, match="index points past its end"):
        layout.parse_index(shard[20:], where="s")
    with pytest.raises(CorruptChunkError, match="truncated"):
        layout.parse_index(shard[-40:], where="s")


def _index(entries: list[tuple[int, int]]) -> npt.NDArray[np.uint64]:
    return np.array(entries, dtype=np.uint64).reshape(-1, 2)


def test_index_pointing_past_the_end_raises() -> None:
    size = 100 + index_nbytes(3)
    check_index(_index([(0, 40), (EMPTY, EMPTY), (40, 60)]), size, where="w")
    with pytest.raises(CorruptChunkError, match=r"w: shard index points past its end.*chunk 2"):
        check_index(_index([(0, 40), (EMPTY, EMPTY), (40, 200)]), size, where="w")
    with pytest.raises(CorruptChunkError, match="index points past its end"):
        check_index(_index([(0, 40), (size + 1, 1), (40, 60)]), size, where="w")
    with pytest.raises(CorruptChunkError, match="past its end"):  # no uint64 wrap-around
        check_index(_index([(0, 40), (40, 2**64 - 41), (0, 1)]), size, where="w")
    with pytest.raises(CorruptChunkError, match="past its end"):  # into the index at the end
        check_index(_index([(0, 40), (90, 20), (40, 60)]), size, where="w")
    with pytest.raises(CorruptChunkError, match="half empty"):
        check_index(_index([(0, 40), (EMPTY, 0), (40, 60)]), size, where="w")
    with pytest.raises(CorruptChunkError, match="into the index"):  # index at the start
        check_index(_index([(0, 40), (EMPTY, EMPTY), (40, 60)]), size, where="w",
                    index_location="start")  # fmt: skip
    # through parse_index, with a valid checksum over the bad entries
    bad = _index([(0, 40), (EMPTY, EMPTY), (40, 200)]).astype("<u8").tobytes()
    shard = bytes(100) + bad + crc32c(np.frombuffer(bad, np.uint8)).to_bytes(4, "little")
    with pytest.raises(CorruptChunkError, match="index points past its end"):
        parse_index(shard, 3, where="w", shard_size=len(shard))


def test_merged_ranges_merges_neighbours_and_respects_gap() -> None:
    # chunk i at [10 i, 10 i + 8): 2-byte gaps; chunk 3 empty
    index = _index([(10 * i, 8) if i != 3 else (EMPTY, EMPTY) for i in range(6)])
    assert merged_ranges(index, [4, 0, 2]) == [(0, 8, [0]), (20, 28, [2]), (40, 48, [4])]
    assert merged_ranges(index, [0, 1, 2], gap=1) == [(0, 8, [0]), (10, 18, [1]), (20, 28, [2])]
    assert merged_ranges(index, [2, 1, 0, 1], gap=2) == [(0, 28, [0, 1, 2])]
    assert merged_ranges(index, [0, 2, 3, 4], gap=2) == [(0, 8, [0]), (20, 28, [2]), (40, 48, [4])]
    assert merged_ranges(index, [0, 2, 4], gap=12) == [(0, 48, [0, 2, 4])]
    assert merged_ranges(index, [0, 2, 4], gap=11) == [(0, 8, [0]), (20, 28, [2]), (40, 48, [4])]
    assert merged_ranges(index, [3]) == []
    touching = parse_index(encode_shard([b"aa", b"bbb", None, b"c"]), 4, where="x")
    assert merged_ranges(touching, [3, 1, 0]) == [(0, 6, [0, 1, 3])]
    assert merged_ranges(touching, [3, 0]) == [(0, 2, [0]), (5, 6, [3])]


def test_shard_layout_from_zarr_metadata(tmp_path: Path) -> None:
    data = _data(np.uint8, (3, 8, 8), 10)
    _write_zarr(tmp_path / "a", data, 2, 8, [BloscCodec(cname="lz4", shuffle="noshuffle")])
    meta = _meta(tmp_path / "a")
    layout = shard_layout(meta)
    assert layout == ShardLayout(
        inner_chunks=(2, 3, 8, 8),
        shard_shape=(8, 3, 8, 8),
        inner_codecs=meta["codecs"][0]["configuration"]["codecs"],
        index_location="end",
        index_codecs=[LITTLE, CRC],
        index_checksum=True,
    )
    assert layout.n_inner == 4 and layout.grid == (4, 1, 1, 1) and layout.index_nbytes == 68
    with pytest.raises(AttributeError):
        layout.n_inner = 3  # type: ignore[misc]
    zarr.create_array(str(tmp_path / "plain"), shape=(4,), chunks=(2,), dtype=np.int64)
    assert shard_layout(_meta(tmp_path / "plain")) is None


def _with(meta: dict[str, Any], **conf: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(meta))
    out["codecs"][0]["configuration"].update(conf)
    return out


def test_shard_layout_refuses_what_chunkio_cannot_read(tmp_path: Path) -> None:
    _write_zarr(tmp_path / "a", _data(np.int64, (), 8), 2, 4, [ZstdCodec(level=3)])
    meta = _meta(tmp_path / "a")
    sharding = meta["codecs"][0]
    with pytest.raises(FormatError, match="nested sharding"):
        shard_layout(_with(meta, codecs=[sharding]), where="labels")
    with pytest.raises(FormatError, match=r"labels: shard index codecs.*zstd"):
        shard_layout(_with(meta, index_codecs=[LITTLE, ZSTD, CRC]), where="labels")
    big = {"name": "bytes", "configuration": {"endian": "big"}}
    with pytest.raises(FormatError, match="index codecs"):
        shard_layout(_with(meta, index_codecs=[big, CRC]))
    with pytest.raises(FormatError, match="index_location"):
        shard_layout(_with(meta, index_location="middle"))
    with pytest.raises(FormatError, match="whole number"):
        shard_layout(_with(meta, chunk_shape=[3]))
    around = json.loads(json.dumps(meta))
    around["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0]}})
    with pytest.raises(FormatError, match="around"):
        shard_layout(around)
    no_crc = shard_layout(_with(meta, index_codecs=[LITTLE]))
    assert no_crc is not None and not no_crc.index_checksum and no_crc.index_nbytes == 32
    start = shard_layout(_with(meta, index_location="start"))
    assert start is not None and start.index_span(100) == (0, 36)


def test_shard_parts_with_split_chunks_make_the_same_shard() -> None:
    """A chunk given as (body, crc) pieces is indexed and stored as one chunk."""
    whole = [b"abc" + b"1234", None, b"", b"xy"]
    split: list[Any] = [(memoryview(b"abc"), b"1234"), None, (b"", b""), (b"x", b"y")]
    parts = shard_parts(split)
    assert b"".join(parts) == encode_shard(whole)
    assert parse_index(b"".join(parts), 4, where="x").tolist()[:2] == [[0, 7], [EMPTY, EMPTY]]


@pytest.mark.parametrize("step", [1, 5, 4096])
def test_write_file_finishes_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """``writev`` may write less than asked (signals, large buffers): the rest follows."""
    real = os.writev

    def short(fd: int, views: Any) -> int:
        return real(fd, [memoryview(b"".join(views))[:step]])

    monkeypatch.setattr(os, "writev", short)
    parts = [b"head", np.arange(3000, dtype=np.uint8), memoryview(b""), b"tail" * 500]
    path = tmp_path / "c.0"
    write_file(str(path), parts, 0xDEADBEEF)
    want = b"".join(bytes(memoryview(p).cast("B")) for p in parts) + (0xDEADBEEF).to_bytes(
        4, "little"
    )
    assert path.read_bytes() == want
    assert not list(tmp_path.glob("*.partial"))
