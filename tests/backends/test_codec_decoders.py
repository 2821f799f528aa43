"""The codec table's decoders turn real stored chunks back into what their own library decodes.

Each chunk here was written by the library that owns the format: zarr-python (Zarr v3 and v2
arrays on disk), numcodecs, and h5py with hdf5plugin's filters (raw chunks read back with
``read_direct_chunk``). The expected bytes are the ones zarr-python, numcodecs or h5py decode
from the same chunk, never the decoder under test. The HDF5 LZ4 frames cover several blocks, a
short last block, blocks stored uncompressed, a block size past 2**24, and cuts at each place
a frame can end early.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numcodecs
import numpy as np
import numpy.typing as npt
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from chunkio.backends.codec_table import (
    HDF5_DECODERS,
    HDF5_SHUFFLE,
    Decode,
    lz4_block,
    lz4_unblock,
    unshuffle,
    zarr2_decoder,
    zarr_decoder,
)


def _payload(n: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    """Bytes that compress (a repeating ramp) with random stretches that do not."""
    rng = np.random.default_rng(seed)
    out = (np.arange(n) % 251).astype(np.uint8)
    for start in range(0, n, 997):
        out[start : start + 300] = rng.integers(0, 256, min(300, n - start), np.uint8)
    return out


def _decode(decode: Decode | None, stored: bytes, nbytes: int) -> npt.NDArray[np.uint8]:
    assert decode is not None
    dst = np.zeros(nbytes, np.uint8)
    decode(np.frombuffer(stored, np.uint8).copy(), dst)
    return dst


# -- Zarr v3 and v2: chunk files zarr-python wrote -------------------------------------------


@pytest.mark.parametrize(
    "codec",
    [
        ZstdCodec(level=3),
        ZstdCodec(level=1, checksum=True),
        BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"),
        BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"),
        GzipCodec(level=6),
    ],
    ids=["zstd", "zstd-checksum", "blosc-lz4", "blosc-zstd", "gzip"],
)
def test_zarr_v3_chunk_files_decode_as_zarr_python_reads_them(tmp_path: Path, codec: Any) -> None:
    data = _payload(6000).view(np.int32).reshape(300, 5)
    arr = zarr.create_array(
        tmp_path / "a.zarr", shape=data.shape, chunks=data.shape, dtype=data.dtype,
        compressors=[codec],
    )  # fmt: skip
    arr[...] = data
    meta = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    stored = (tmp_path / "a.zarr" / "c" / "0" / "0").read_bytes()
    (entry,) = [c for c in meta["codecs"] if c["name"] != "bytes"]
    got = _decode(zarr_decoder(entry), stored, data.nbytes)
    assert got.tobytes() == np.ascontiguousarray(arr[...]).tobytes() == data.tobytes()


def test_zarr_v3_codecs_chunkio_does_not_decode_have_no_decoder() -> None:
    for name in ("bytes", "crc32c", "transpose", "numcodecs.zlib", "sharding_indexed", None):
        assert zarr_decoder({"name": name}) is None
    assert zarr_decoder({}) is None


@pytest.mark.parametrize(
    "compressor",
    [
        numcodecs.Zlib(level=1),
        numcodecs.GZip(level=5),
        numcodecs.Zstd(level=2),
        numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        numcodecs.LZ4(acceleration=1),
    ],
    ids=["zlib", "gzip", "zstd", "blosc", "lz4"],
)
def test_zarr_v2_chunk_files_decode_as_numcodecs_reads_them(
    tmp_path: Path, compressor: Any
) -> None:
    data = _payload(4000).view(np.uint16)
    arr = zarr.create_array(
        tmp_path / "v2.zarr", shape=data.shape, chunks=data.shape, dtype=data.dtype,
        zarr_format=2, compressors=compressor,
    )  # fmt: skip
    arr[...] = data
    config = json.loads((tmp_path / "v2.zarr" / ".zarray").read_text())["compressor"]
    stored = (tmp_path / "v2.zarr" / "0").read_bytes()
    got = _decode(zarr2_decoder(config), stored, data.nbytes)
    expected = np.frombuffer(numcodecs.get_codec(config).decode(stored), np.uint8)
    assert np.array_equal(got, expected)
    assert got.tobytes() == data.tobytes()


def test_zarr_v2_compressors_chunkio_does_not_decode_have_no_decoder() -> None:
    for config in ({"id": "bz2", "level": 1}, {"id": "pickle"}, {"level": 1}):
        assert zarr2_decoder(config) is None


def test_inflate_refuses_a_stream_of_another_size() -> None:
    data = _payload(100)
    gzipped = numcodecs.GZip(level=1).encode(data)  # its trailer says 100: refused unread
    with pytest.raises(ValueError, match="deflate stream declares 100 decoded bytes, expected 99"):
        _decode(zarr_decoder({"name": "gzip"}), gzipped, 99)
    zlibbed = numcodecs.Zlib(level=1).encode(data)  # no size stored: what the decoder wrote
    with pytest.raises(ValueError, match="deflate gave 100 bytes, expected 101"):
        _decode(zarr2_decoder({"id": "zlib"}), zlibbed, 101)


def test_lz4_block_is_numcodecs_lz4_format_both_ways() -> None:
    raw = _payload(5000, seed=3)
    block = lz4_block(raw)
    assert np.frombuffer(numcodecs.LZ4().decode(block), np.uint8).tobytes() == raw.tobytes()
    dst = np.zeros(raw.size, np.uint8)
    lz4_unblock(np.frombuffer(numcodecs.LZ4(acceleration=3).encode(raw), np.uint8), dst)
    assert np.array_equal(dst, raw)


# -- HDF5: raw chunks h5py wrote through each filter ------------------------------------------


def _hdf5_chunk(
    path: Path, data: npt.NDArray[Any], **filters: Any
) -> tuple[bytes, list[int], npt.NDArray[Any]]:
    """Write ``data`` as one chunk; its stored bytes, filter ids and what h5py reads back."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=data.shape, **filters)
    with h5py.File(path, "r") as f:
        ds = f["x"]
        plist = ds.id.get_create_plist()
        ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        mask, stored = ds.id.read_direct_chunk((0,) * data.ndim)
        assert mask == 0
        return bytes(stored), ids, ds[...]


@pytest.mark.parametrize(
    ("filters", "fid"),
    [
        ({"compression": "gzip", "compression_opts": 4}, 1),
        ({"compression": hdf5plugin.Zstd(clevel=2)}, 32015),
        ({"compression": hdf5plugin.Blosc(cname="zstd", clevel=4)}, 32001),
        ({"compression": hdf5plugin.LZ4()}, 32004),
    ],
    ids=["gzip", "zstd", "blosc", "lz4"],
)
def test_hdf5_chunks_decode_as_h5py_reads_them(
    tmp_path: Path, filters: dict[str, Any], fid: int
) -> None:
    data = _payload(8000, seed=1).view(np.float32).reshape(40, 50)
    stored, ids, read = _hdf5_chunk(tmp_path / "f.h5", data, **filters)
    assert ids == [fid]
    got = _decode(HDF5_DECODERS[fid], stored, data.nbytes)
    assert got.tobytes() == read.tobytes() == data.tobytes()


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.float64])
def test_unshuffle_undoes_hdf5s_shuffle_filter(tmp_path: Path, dtype: Any) -> None:
    data = _payload(4800, seed=2).view(dtype)
    stored, ids, read = _hdf5_chunk(tmp_path / "s.h5", data, shuffle=True)
    assert ids == [HDF5_SHUFFLE]
    assert stored != data.tobytes()  # the filter did move bytes
    got = np.zeros(data.nbytes, np.uint8)
    unshuffle(np.frombuffer(stored, np.uint8), got, data.itemsize)
    assert got.tobytes() == read.tobytes()


def test_unshuffle_under_compression_as_h5py_reads_it(tmp_path: Path) -> None:
    data = _payload(3000, seed=4).view(np.int16)
    stored, ids, read = _hdf5_chunk(
        tmp_path / "sg.h5", data, shuffle=True, compression="gzip", compression_opts=1
    )
    assert ids == [HDF5_SHUFFLE, 1]
    shuffled = _decode(HDF5_DECODERS[1], stored, data.nbytes)
    got = np.zeros(data.nbytes, np.uint8)
    unshuffle(shuffled, got, 2)
    assert got.tobytes() == read.tobytes()


def test_unshuffle_keeps_a_tail_shorter_than_an_element_in_place() -> None:
    # HDF5's shuffle filter copies the bytes past the last whole element as they are;
    # numcodecs' Shuffle (the same byte order) undoes the whole elements
    whole = _payload(40, seed=5)
    tail = np.array([7, 8, 9], np.uint8)
    src = np.concatenate([np.frombuffer(numcodecs.Shuffle(4).encode(whole), np.uint8), tail])
    dst = np.zeros(src.size, np.uint8)
    unshuffle(src, dst, 4)
    assert dst[:40].tobytes() == whole.tobytes()
    assert dst[40:].tolist() == [7, 8, 9]


# -- the HDF5 LZ4 filter's frames ---------------------------------------------------------------


def _lz4_frame(tmp_path: Path, data: npt.NDArray[Any], block: int) -> bytes:
    stored, ids, read = _hdf5_chunk(tmp_path / "l.h5", data, compression=hdf5plugin.LZ4(block))
    assert ids == [32004] and read.tobytes() == data.tobytes()
    return stored


def _blocks(frame: bytes) -> list[tuple[int, int]]:
    """(offset of each block's size field, its stored size), from the filter's frame layout."""
    pos, out = 12, []
    while pos < len(frame):
        size = int.from_bytes(frame[pos : pos + 4], "big")
        out.append((pos, size))
        pos += 4 + size
    return out


def test_hdf5_lz4_frames_of_many_blocks_decode_as_h5py_reads_them(tmp_path: Path) -> None:
    # 1000-byte blocks over 7,000 bytes of ramp and noise: some blocks shrink, the noisy ones
    # are stored as they are (size == block), and the last block is shorter (700 bytes)
    rng = np.random.default_rng(6)
    data = _payload(6700, seed=6)
    data[2000:3000] = rng.integers(0, 256, 1000, np.uint8)
    data[6000:] = rng.integers(0, 256, 700, np.uint8)
    frame = _lz4_frame(tmp_path, data, 1000)
    sizes = [size for _, size in _blocks(frame)]
    assert len(sizes) == 7 and sizes[2] == 1000 and sizes[-1] == 700 and min(sizes) < 1000
    assert np.array_equal(_decode(HDF5_DECODERS[32004], frame, data.size), data)


def test_hdf5_lz4_frame_with_a_block_size_past_2_to_the_24(tmp_path: Path) -> None:
    data = np.zeros(2**24 + 5000, np.uint8)
    data[::4093] = 7
    data[-300:] = np.arange(300) % 13
    frame = _lz4_frame(tmp_path, data, 2**24)
    assert len(_blocks(frame)) == 2
    assert np.array_equal(_decode(HDF5_DECODERS[32004], frame, data.size), data)


def test_hdf5_lz4_frame_of_no_bytes_is_its_header() -> None:
    frame = (0).to_bytes(8, "big") + (0).to_bytes(4, "big")
    assert _decode(HDF5_DECODERS[32004], frame, 0).size == 0


def test_hdf5_lz4_frames_cut_short_or_of_another_size_are_refused(tmp_path: Path) -> None:
    data = _payload(2500, seed=7)
    frame = _lz4_frame(tmp_path, data, 1000)
    (first, size0), (second, _), _ = _blocks(frame)
    decode = HDF5_DECODERS[32004]
    with pytest.raises(ValueError, match="LZ4 frame of 11 bytes is shorter than its header"):
        _decode(decode, frame[:11], data.size)
    with pytest.raises(ValueError, match=f"LZ4 stream declares {data.size} decoded bytes, exp"):
        _decode(decode, frame, 2400)
    with pytest.raises(ValueError, match=rf"of {data.size} bytes ends at byte {len(frame)} of"):
        _decode(decode, frame + b"\0", data.size)  # a byte past the last block
    for cut in (first, first + 2, second, second + 3):  # inside or right before a size field
        with pytest.raises(ValueError, match=r"^LZ4 frame ends inside a block header$"):
            _decode(decode, frame[:cut], data.size)
    for cut in (first + 4, first + 4 + size0 - 1, second + 4, len(frame) - 1):
        with pytest.raises(ValueError, match=r"LZ4 block of \d+ bytes runs past the frame's end"):
            _decode(decode, frame[:cut], data.size)
