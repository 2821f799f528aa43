"""Chunks rewritten with their checksums valid: the ``short``, ``long`` and ``shard-index``
mutations of :mod:`fuzz_mutate`.

A chunk's bytes are decoded through the store's own codecs (Zarr v3 and v2 with numcodecs'
Blosc, Zstd, GZip; HDF5's gzip and LZ4 filters), cut or extended, and encoded again with the
crc32c (Zarr v3) or fletcher32 (HDF5) recomputed, so that only a reader's size checks can catch
them; a shard's index is rewritten likewise.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np


def crc32c(data: bytes) -> bytes:
    """Zarr v3's crc32c codec: 4 bytes, little-endian, of the bytes before them."""
    import google_crc32c

    return int(google_crc32c.value(data)).to_bytes(4, "little")


def _codec(config: dict[str, Any]) -> Any:
    import numcodecs

    name, conf = config["name"], config.get("configuration", {})
    if name == "blosc":
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}.get(conf.get("shuffle"), 0)
        return numcodecs.Blosc(
            cname=conf.get("cname", "lz4"), clevel=conf.get("clevel", 5), shuffle=shuffle
        )
    if name == "zstd":
        return numcodecs.Zstd(level=conf.get("level", 0))
    if name == "gzip":
        return numcodecs.GZip(level=conf.get("level", 5))
    raise ValueError(f"no re-encoder for codec {name!r}")


def _recode(raw: bytes, codecs: list[dict[str, Any]], delta: int) -> bytes:
    """Decode ``raw`` through ``codecs`` (Zarr v3 bytes-to-bytes, after ``bytes``), cut or
    extend the decoded bytes by ``delta``, encode again (checksums recomputed)."""
    chain = [c for c in codecs if c["name"] not in ("bytes", "transpose")]
    data = raw
    for c in reversed(chain):
        data = data[:-4] if c["name"] == "crc32c" else bytes(_codec(c).decode(data))
    data = data[:delta] if delta < 0 else data + bytes(range(7, 7 + delta))
    for c in chain:
        data = data + crc32c(data) if c["name"] == "crc32c" else bytes(_codec(c).encode(data))
    return data


def rechunk_zarr(root: Path, array: str, target: Path, delta: int) -> None:
    folder = root / array
    raw = target.read_bytes()
    if (folder / ".zarray").exists():
        import numcodecs

        meta = json.loads((folder / ".zarray").read_text())
        codec = numcodecs.get_codec(meta["compressor"]) if meta.get("compressor") else None
        data = bytes(codec.decode(raw)) if codec else raw
        data = data[:delta] if delta < 0 else data + bytes(range(7, 7 + delta))
        target.write_bytes(bytes(codec.encode(data)) if codec else data)
        return
    codecs = json.loads((folder / "zarr.json").read_text())["codecs"]
    if codecs[0]["name"] != "sharding_indexed":
        target.write_bytes(_recode(raw, codecs, delta))
        return
    conf = codecs[0]["configuration"]
    entries, chunks = _shard_entries(raw, conf, _shard_count(folder))
    present = [i for i, (off, _) in enumerate(entries) if off != 2**64 - 1]
    if present:
        k = present[len(present) // 2]
        chunks[k] = _recode(chunks[k], conf["codecs"], delta)
    target.write_bytes(_shard_bytes(chunks, conf))


def _shard_entries(
    raw: bytes, conf: dict[str, Any], n: int
) -> tuple[list[tuple[int, int]], list[bytes]]:
    """(offset, nbytes) of each of the ``n`` inner chunks of a shard (index at the end), and
    their bytes (empty where absent)."""
    if conf.get("index_location", "end") != "end":
        raise ValueError("shards with the index at the start are not mutated")
    has_crc = any(c["name"] == "crc32c" for c in conf["index_codecs"])
    start = len(raw) - 16 * n - (4 if has_crc else 0)
    index = np.frombuffer(raw[start : start + 16 * n], "<u8")
    entries = [(int(index[2 * i]), int(index[2 * i + 1])) for i in range(n)]
    chunks = [raw[o : o + b] if o != 2**64 - 1 else b"" for o, b in entries]
    return entries, chunks


def _shard_bytes(chunks: list[bytes], conf: dict[str, Any]) -> bytes:
    body, index = b"", []
    for c in chunks:
        if c:
            index += [len(body), len(c)]
            body += c
        else:
            index += [2**64 - 1, 2**64 - 1]
    packed = np.array(index, "<u8").tobytes()
    if any(c["name"] == "crc32c" for c in conf["index_codecs"]):
        packed += crc32c(packed)
    return body + packed


def _shard_count(folder: Path) -> int:
    meta = json.loads((folder / "zarr.json").read_text())
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    inner = meta["codecs"][0]["configuration"]["chunk_shape"]
    return int(np.prod([s // i for s, i in zip(shard, inner, strict=True)]))


def shard_index(folder: Path, target: Path, rng: np.random.Generator) -> None:
    """One entry of a shard's index set to a hostile offset or size (crc32c recomputed)."""
    conf = json.loads((folder / "zarr.json").read_text())["codecs"][0]["configuration"]
    raw = target.read_bytes()
    n = _shard_count(folder)
    has_crc = any(c["name"] == "crc32c" for c in conf["index_codecs"])
    start = len(raw) - 16 * n - (4 if has_crc else 0)
    index = np.frombuffer(raw[start : start + 16 * n], "<u8").copy()
    k = int(rng.integers(2 * n))
    choice = int(rng.integers(5))
    if choice == 4 and n > 1:  # two chunks' entries swapped (out of order)
        index = index.reshape(n, 2)[rng.permutation(n)].reshape(-1)
    else:
        index[k] = [2**40, 10**12, 2**64 - 1, (int(index[k]) + 1) % 2**64][min(choice, 3)]
    packed = index.astype("<u8").tobytes()
    target.write_bytes(raw[:start] + packed + (crc32c(packed) if has_crc else b""))


def fletcher32(data: bytes) -> bytes:
    """HDF5's fletcher32 checksum of ``data`` as its filter appends it (H5_checksum_fletcher32,
    stored little-endian)."""
    padded = data + (b"\0" if len(data) % 2 else b"")
    words = np.frombuffer(padded, ">u2").astype(np.uint64)
    sum1 = sum2 = 0
    for start in range(0, len(words), 360):
        block = words[start : start + 360]
        sums = np.cumsum(block)
        sum2 += int(sums.sum()) + sum1 * len(block)
        sum1 += int(sums[-1])
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return ((sum2 << 16) | sum1).to_bytes(4, "little")


def _lz4_h5_decode(raw: bytes) -> bytes:
    """The HDF5 LZ4 filter's (32004) framing: 8-byte big-endian size, 4-byte block size, then
    blocks each with its 4-byte big-endian compressed size."""
    import numcodecs

    total = int.from_bytes(raw[:8], "big")
    block = int.from_bytes(raw[8:12], "big")
    out, pos = b"", 12
    while len(out) < total:
        want = min(block, total - len(out))
        n = int.from_bytes(raw[pos : pos + 4], "big")
        payload = raw[pos + 4 : pos + 4 + n]
        out += (
            payload
            if n == want
            else bytes(numcodecs.LZ4().decode(want.to_bytes(4, "little") + payload))
        )
        pos += 4 + n
    return out


def _lz4_h5_encode(data: bytes) -> bytes:
    import numcodecs

    packed = bytes(numcodecs.LZ4().encode(data))[4:]
    if len(packed) >= len(data):
        packed = data
    return (
        len(data).to_bytes(8, "big")
        + len(data).to_bytes(4, "big")
        + len(packed).to_bytes(4, "big")
        + packed
    )


def rechunk_h5(path: Path, name: str, rng: np.random.Generator, delta: int) -> None:
    """One chunk of dataset ``name`` rewritten to decode to ``delta`` more (or fewer) bytes,
    through the dataset's own filters (gzip, LZ4, fletcher32 recomputed)."""
    import h5py

    with h5py.File(path, "r+") as f:
        d = f[name]
        filters = d._filters
        info = d.id.get_chunk_info(int(rng.integers(d.id.get_num_chunks())))
        mask, raw = d.id.read_direct_chunk(info.chunk_offset)
        data = bytes(raw)
        if "fletcher32" in filters:
            data = data[:-4]
        if "gzip" in filters:
            data = zlib.decompress(data)
        elif "32004" in filters:
            data = _lz4_h5_decode(data)
        elif set(filters) - {"fletcher32", "shuffle"}:
            return  # a filter this harness cannot re-encode: left as it is
        data = data[:delta] if delta < 0 else data + bytes(range(7, 7 + delta))
        if "gzip" in filters:
            data = zlib.compress(data, filters["gzip"] or 4)
        elif "32004" in filters:
            data = _lz4_h5_encode(data)
        if "fletcher32" in filters:
            data += fletcher32(data)
        d.id.write_direct_chunk(info.chunk_offset, data, mask)
