"""One decode contract for every codec chunkio decodes itself (RELIABILITY row 33).

Every row of :data:`~chunkio.backends.codec_table.DECODED` writes exactly the decoded size
into its destination or raises ValueError/RuntimeError, which the readers turn into a
:class:`~chunkio.errors.CorruptChunkError` naming array and chunk. Each stream here is decoded
into two destinations pre-filled with different patterns: where both decodes succeed they
must agree byte for byte (a byte the decoder left alone keeps its pattern, and the patterns
differ), and a stream decoding to anything but the destination's size must be refused.

The end-to-end tests (``test_short_chunk_end_to_end.py``) rewrite one stored chunk of a real
store to a valid stream of half its rows, checksum recomputed.
"""

from __future__ import annotations

from collections.abc import Callable

import numcodecs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio.backends import framing
from chunkio.backends.codec_table import DECODED, Decoded, lz4_block, unshuffle
from chunkio.backends.hdf5.raw import RawChunks
from chunkio.backends.zarr.chunks import ChunkFiles
from chunkio.errors import CorruptChunkError

Encode = Callable[[bytes], bytes]
N = 3000  # decoded bytes of the test chunk: several HDF5 LZ4 blocks, one zstd block


def _hdf5_lz4_frame(raw: bytes, block: int = 1000) -> bytes:
    """The HDF5 LZ4 filter's frame as the filter writes it (``test_codec_decoders`` checks the
    decoder on frames h5py wrote): sizes, then blocks, each stored raw if it would not shrink."""
    parts = [len(raw).to_bytes(8, "big"), block.to_bytes(4, "big")]
    for at in range(0, len(raw), block):
        piece = raw[at : at + block]
        packed = lz4_block(piece)[4:]
        stored = packed if len(packed) < len(piece) else piece
        parts += [len(stored).to_bytes(4, "big"), stored]
    return b"".join(parts)


def _zstd(raw: bytes) -> bytes:
    return bytes(numcodecs.Zstd(level=3).encode(raw))


def _zstd_unsized(raw: bytes) -> bytes:
    """A zstd frame without its content size, as streaming compressors write one: the
    single-segment frame numcodecs writes, re-headed with a window descriptor (8 MiB) and no
    size field."""
    frame = _zstd(raw)
    descriptor = frame[4]
    assert descriptor & 0x23 == 0x20, "numcodecs writes single-segment frames without dict ids"
    fcs_bytes = (1, 2, 4, 8)[descriptor >> 6]
    header = frame[:4] + bytes([descriptor & 0x04, 13 << 3])  # keep the checksum flag
    return header + frame[5 + fcs_bytes :]


def _zstd_frames(raw: bytes) -> bytes:
    """Two frames after a skippable one (zstd decodes their concatenation)."""
    half = len(raw) // 2
    skippable = (0x184D2A5A).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    return skippable + _zstd(raw[:half]) + _zstd(raw[half:])


#: every codec row's encoders, by the row's name: one per framing the row decodes
ENCODERS: dict[str, dict[str, Encode]] = {
    "zstd": {
        "zstd": _zstd,
        "zstd-checksum": numcodecs.Zstd(level=1, checksum=True).encode,
        "zstd-unsized": _zstd_unsized,
        "zstd-frames": _zstd_frames,
    },
    "Blosc": {
        "blosc-lz4": numcodecs.Blosc("lz4", 5, numcodecs.Blosc.NOSHUFFLE).encode,
        "blosc-zstd-bitshuffle": numcodecs.Blosc("zstd", 3, numcodecs.Blosc.BITSHUFFLE).encode,
        "blosc-stored": numcodecs.Blosc("lz4", 0).encode,  # level 0: the bytes copied
    },
    "deflate": {"gzip": numcodecs.GZip(level=6).encode, "zlib": numcodecs.Zlib(level=6).encode},
    "LZ4": {"lz4": numcodecs.LZ4().encode},
    "HDF5 LZ4": {"hdf5-lz4": _hdf5_lz4_frame},
}
CASES = [(row, label) for row in DECODED for label in ENCODERS.get(row.name, {"(none)": bytes})]


def _data(n: int = N, seed: int = 0) -> bytes:
    """Bytes that compress (a ramp) with random stretches that do not."""
    rng = np.random.default_rng(seed)
    out = (np.arange(n) % 251).astype(np.uint8)
    for start in range(0, n, 700):
        out[start : start + 200] = rng.integers(0, 256, min(200, n - start), np.uint8)
    return out.tobytes()


def _decode_twice(row: Decoded, stream: bytes, n: int) -> npt.NDArray[np.uint8] | Exception:
    """``stream`` decoded into two destinations of ``n`` bytes pre-filled with different
    patterns: the decoded bytes, or the error; a byte left unwritten fails here."""
    results: list[npt.NDArray[np.uint8] | Exception] = []
    for fill in (0x00, 0xFF):
        dst = np.full(n, fill, np.uint8)
        try:  # a fresh writable copy each time: the HDF5 LZ4 decoder works in place
            row.decode(np.frombuffer(bytearray(stream), np.uint8), dst)
        except (ValueError, RuntimeError) as err:  # the Decode contract's errors, and no other
            results.append(err)
        else:
            results.append(dst)
    first, second = results
    if isinstance(first, Exception) or isinstance(second, Exception):
        assert isinstance(first, Exception) and isinstance(second, Exception), (first, second)
        return first
    assert np.array_equal(first, second), "bytes of the destination were left unwritten"
    return first


@pytest.mark.parametrize(("row", "label"), CASES, ids=[f"{r.name}/{lab}" for r, lab in CASES])
def test_every_codec_decodes_exactly_or_refuses(row: Decoded, label: str) -> None:
    assert row.name in ENCODERS, f"codec row {row.name!r} has no encoder in this test"
    encode = ENCODERS[row.name][label]
    data = _data()
    stream = bytes(encode(data))
    got = _decode_twice(row, stream, N)
    assert not isinstance(got, Exception), got
    assert got.tobytes() == data

    # a valid stream of half the rows, or of twice them: refused, never a partial chunk
    for other in (data[: N // 2], data + data[::-1]):
        refused = _decode_twice(row, bytes(encode(other)), N)
        assert isinstance(refused, Exception), f"{len(other)} decoded bytes taken for {N}"
    # the stream's framing declares another size than the destination's (a smaller or larger
    # destination is what a header rewritten to say more or fewer bytes looks like)
    for n in (N - 1, N // 2, N + 1, 2 * N):
        assert isinstance(_decode_twice(row, stream, n), Exception), n
    # cut short or padded: refused, or (padding a decoder never reads) the exact data
    for variant in (
        *(stream[:cut] for cut in sorted({0, 1, 3, 4, 11, 12, 16, len(stream) // 2})),
        stream[:-1],
        stream + b"\0",
        stream + bytes(range(16)),
    ):
        got = _decode_twice(row, variant, N)
        assert isinstance(got, Exception) or got.tobytes() == data, len(variant)


@settings(max_examples=25, deadline=None)
@given(
    case=st.sampled_from(CASES),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    pad=st.binary(max_size=8),
)
def test_damaged_streams_never_leave_old_bytes(
    case: tuple[Decoded, str], edits: list[tuple[float, int]], cut: float | None, pad: bytes
) -> None:
    """Bytes anywhere in a stream (headers included) changed, cut, padded: an error, or a
    destination written through (wrong bytes are the checksum's to catch, not left-overs)."""
    row, label = case
    stream = bytearray(ENCODERS[row.name][label](_data(600, seed=1)))
    for where, value in edits:
        stream[int(where * (len(stream) - 1))] = value
    if cut is not None:
        stream = stream[: int(cut * len(stream))]
    _decode_twice(row, bytes(stream) + pad, 600)


def test_zstd_frames_are_summed_only_when_the_first_does_not_declare_the_whole() -> None:
    data = _data()
    src = np.frombuffer(_zstd_frames(data), np.uint8)
    assert framing.zstd_size(src, N) == N
    assert framing.zstd_size(np.frombuffer(_zstd(data), np.uint8), N) == N
    assert framing.zstd_size(np.frombuffer(_zstd_unsized(data), np.uint8), N) is None
    # a first frame declaring at least the destination is taken at its word (O(1)): the
    # decoder refuses what follows it, as it refuses any total past its destination
    padded = np.frombuffer(_zstd(data) + b"junk", np.uint8)
    assert framing.zstd_size(padded, N) == N
    with pytest.raises(ValueError, match="no zstd frame at byte"):
        framing.zstd_size(padded, N + 4)
    with pytest.raises(ValueError, match="ends inside the header"):
        framing.zstd_size(src[:16], N)


def test_blosc_header_must_count_the_streams_own_bytes() -> None:
    """Blosc reads as many input bytes as its header says: a header saying more than the
    stream holds is refused before Blosc runs."""
    stream = bytearray(numcodecs.Blosc("lz4", 5).encode(_data()))
    stream[12:16] = (len(stream) + 64).to_bytes(4, "little")
    with pytest.raises(ValueError, match=f"declares {len(stream) + 64} stored bytes; the stre"):
        framing.blosc_size(np.frombuffer(stream, np.uint8), N)


def test_unshuffle_refuses_another_size() -> None:
    with pytest.raises(ValueError, match="shuffled chunk of 7 bytes, expected 8"):
        unshuffle(np.zeros(7, np.uint8), np.zeros(8, np.uint8), 4)


# -- the readers name the array and chunk ------------------------------------------------------


def _zarr_files(row: Decoded) -> ChunkFiles:
    codec = {"name": row.zarr}
    meta = {
        "zarr_format": 3,
        "shape": [N],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [N]}},
        "chunk_key_encoding": {"name": "default"},
        "codecs": [{"name": "bytes"}, codec, {"name": "crc32c"}],
    }
    files = ChunkFiles.build("", "images", meta)
    assert files is not None and files.decompress is not None
    return files


@pytest.mark.parametrize("row", [r for r in DECODED if r.zarr is not None], ids=lambda r: r.name)
def test_zarr_chunks_that_decode_short_are_corrupt_chunks_naming_array_and_chunk(
    row: Decoded,
) -> None:
    from chunkio.backends._checksum import crc32c

    files = _zarr_files(row)
    encode = next(iter(ENCODERS[row.name].values()))
    body = bytes(encode(_data()[: N // 2]))
    stored = body + crc32c(np.frombuffer(body, np.uint8)).to_bytes(4, "little")  # valid
    out = np.full(N, 0xA5, np.uint8)
    with pytest.raises(CorruptChunkError, match=r"array 'images': chunk 3 cannot be decoded"):
        files.decode_bytes(stored, out, where=lambda: "chunk 3")


def test_uncompressed_zarr_chunks_of_another_size_are_refused_not_broadcast() -> None:
    meta = {
        "zarr_format": 2,
        "shape": [8],
        "chunks": [8],
        "dtype": "|u1",
        "compressor": None,
        "order": "C",
    }
    files = ChunkFiles.build("", "x", meta)
    assert files is not None and files.general is None and files.decompress is None
    out = np.zeros(8, np.uint8)
    for stored in (b"\x07", bytes(7), bytes(9)):
        with pytest.raises(CorruptChunkError, match=rf"{len(stored)} stored bytes, expected 8"):
            files.decode_bytes(stored, out, where=lambda: "chunk 0")
    assert not out.any()


@pytest.mark.parametrize("row", [r for r in DECODED if r.hdf5 is not None], ids=lambda r: r.name)
def test_hdf5_raw_chunks_that_decode_short_are_corrupt_chunks_naming_array_and_chunk(
    row: Decoded,
) -> None:
    from chunkio.backends.base import StageClock

    raw = RawChunks(
        path="d.h5", name="images", shape=(4 * 10, 75), chunks=(40, 75), dtype=np.dtype("u1"),
        decode=row.decode, checksum=False, index={0: (0, 0)},
    )  # fmt: skip
    encode = next(iter(ENCODERS[row.name].values()))
    stored = np.frombuffer(bytearray(encode(_data()[: N // 2])), np.uint8)
    out = np.full((40, 75), 0xA5, np.uint8)
    with pytest.raises(CorruptChunkError, match=r"array 'images': chunk 0 \(samples 0\.\.39\)"):
        raw.decode_into(stored, 0, out, StageClock())


def test_zarr_v2_chains_numcodecs_decodes_check_the_compressors_framing_first() -> None:
    """A v2 chain with filters is decoded by numcodecs whole; its Blosc would read as far as
    a header says, so a stream cut short is refused before numcodecs sees it, and a valid
    stream of half the rows is refused by its size."""
    delta = {"id": "delta", "dtype": "<u2"}
    blosc = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE)
    meta = {
        "zarr_format": 2, "shape": [N], "chunks": [N], "dtype": "<u2", "order": "C",
        "compressor": blosc.get_config(), "filters": [delta],
    }  # fmt: skip
    files = ChunkFiles.build("", "x", meta)
    assert files is not None and files.general is not None
    data = np.frombuffer(_data(2 * N), np.uint16)
    stored = blosc.encode(numcodecs.get_codec(delta).encode(data))
    out = np.full(N, 7, np.uint16)
    files.decode_bytes(stored, out, where=lambda: "chunk 0")
    np.testing.assert_array_equal(out, data)
    with pytest.raises(CorruptChunkError, match=r"'x': chunk 0 .*Blosc header declares \d+ sto"):
        files.decode_bytes(stored[: len(stored) // 2], out, where=lambda: "chunk 0")
    half = blosc.encode(numcodecs.get_codec(delta).encode(data[: N // 2]))
    with pytest.raises(CorruptChunkError, match=r"'x': chunk 0 cannot be decoded"):
        files.decode_bytes(half, out, where=lambda: "chunk 0")
