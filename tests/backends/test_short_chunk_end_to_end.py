"""A stored chunk rewritten to a valid stream of half its rows (RELIABILITY row 33, issue 40).

Each store has one chunk of ``image`` replaced by what the format's own library writes for
half the chunk's rows (zarr-python's chunk file with its crc32c; h5py's raw chunk with its
fletcher32), so checksums pass and only the decoded size is wrong. Reading that chunk raises
:class:`~chunkio.errors.CorruptChunkError` naming array and chunk, in the process and through
two loader workers; every other chunk still reads exactly. Before the decode contract these
reads returned the destination's old memory for the missing rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numcodecs
import numpy as np
import pytest
import zarr
from conftest import zarr_chunk_file

from chunkio import ChunkDataset, Output, make_loader, write_arrays
from chunkio.backends.codec_table import Compression, hdf5_filters
from chunkio.backends.zarr.pack import pack_arrays
from chunkio.backends.zarr.shard import inner_range, shard_layout
from chunkio.errors import CorruptChunkError

N, SPC, BAD = 100, 16, 2  # samples, samples per chunk, the chunk rewritten (samples 32..47)
EDGE = N // SPC  # the partial last chunk (samples 96..99), stored at the full chunk shape
HALF = SPC // 2


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 255, (N, 3, 8, 8), dtype=np.uint8),
        "label": np.arange(N, dtype=np.int64),
    }


def _half_chunk_v3(tmp: Path, field_dir: Path, rows: np.ndarray[Any, Any]) -> bytes:
    """zarr-python's chunk file of ``rows`` alone, with the codecs of ``field_dir``'s array."""
    like = zarr.open_array(field_dir, mode="r")
    meta = json.loads((field_dir / "zarr.json").read_text())
    inner = shard_layout(meta)
    codecs = inner.inner_codecs if inner is not None else meta["codecs"]
    compressors = [c for c in codecs if c["name"] != "bytes"]
    half = zarr.create_array(
        tmp / "half.zarr", shape=rows.shape, chunks=rows.shape, dtype=like.dtype,
        compressors=compressors, fill_value=0,
    )  # fmt: skip
    half[...] = rows
    (chunk,) = [p for p in (tmp / "half.zarr").rglob("*") if p.is_file() and p.name != "zarr.json"]
    return chunk.read_bytes()


def _zarr_v3(tmp: Path, compression: str, bad: int) -> str:
    path = tmp / "d.zarr"
    write_arrays(path, _arrays(), shuffle=False, output=Output(chunks=SPC, compression=compression))
    half = _half_chunk_v3(tmp, path / "image", _arrays()["image"][:HALF])
    zarr_chunk_file(path, "image", bad).write_bytes(half)
    return str(path)


def _zarr_sharded(tmp: Path, compression: str, bad: int) -> str:
    path = tmp / "d.zarr"
    write_arrays(path, _arrays(), shuffle=False, output=Output(chunks=SPC, compression=compression))
    assert "image" in pack_arrays(str(path))
    layout = shard_layout(json.loads((path / "image" / "zarr.json").read_text()))
    assert layout is not None
    shard = zarr_chunk_file(path, "image", bad)
    blob = shard.read_bytes()
    index = layout.parse_index(blob, where="test")
    inner: list[bytes | None] = []
    for i in range(layout.n_inner):
        span = inner_range(index, i)
        inner.append(None if span is None else blob[span[0] : span[1]])
    inner[bad % layout.grid[0]] = _half_chunk_v3(tmp, path / "image", _arrays()["image"][:HALF])
    shard.write_bytes(layout.encode(inner))
    return str(path)


def _zarr_v2(tmp: Path, compression: str, bad: int) -> str:
    """A store zarr-python wrote (Zarr v2, Blosc), one chunk rewritten by zarr-python too."""
    path = tmp / "v2.zarr"
    blosc = numcodecs.Blosc(cname=compression, clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    group = zarr.open_group(path, mode="w", zarr_format=2)
    for name, data in _arrays().items():
        chunks = (SPC, *data.shape[1:])
        arr = group.create_array(name, shape=data.shape, chunks=chunks, dtype=data.dtype,
                                 compressors=blosc)  # fmt: skip
        arr[...] = data
    rows = _arrays()["image"][:HALF]
    half = zarr.create_array(tmp / "half.zarr", shape=rows.shape, chunks=rows.shape,
                             dtype=rows.dtype, compressors=blosc, zarr_format=2)  # fmt: skip
    half[...] = rows
    (path / "image" / f"{bad}.0.0.0").write_bytes((tmp / "half.zarr" / "0.0.0.0").read_bytes())
    return str(path)


def _hdf5(tmp: Path, compression: str, bad: int) -> str:
    """fletcher32 on: h5py writes the half chunk with its filters and checksum."""
    path = tmp / "d.h5"
    write_arrays(path, _arrays(), shuffle=False, output=Output(chunks=SPC, compression=compression))
    rows = _arrays()["image"][:HALF]
    with h5py.File(tmp / "half.h5", "w") as f:  # a chunk of HALF rows, alone
        kw = hdf5_filters(Compression(compression))
        f.create_dataset("x", data=rows, chunks=rows.shape, **kw)
        mask, stored = f["x"].id.read_direct_chunk((0, 0, 0, 0))
    with h5py.File(path, "r+") as f:
        assert f["image"].fletcher32
        f["image"].id.write_direct_chunk((bad * SPC, 0, 0, 0), stored, mask)
    return str(path)


STORES: dict[str, Callable[[Path, str, int], str]] = {
    "zarr-v3": _zarr_v3,
    "zarr-sharded": _zarr_sharded,
    "zarr-v2-by-zarr-python": _zarr_v2,
    "hdf5": _hdf5,
}
#: the codecs each store is written with (Zarr v2: Blosc's inner compressor); the loader test
#: takes the first
CODECS = {
    "zarr-v3": ["lz4", "zstd", "gzip", "blosc-zstd", "none"],
    "zarr-sharded": ["lz4", "zstd"],
    "zarr-v2-by-zarr-python": ["lz4", "zstd"],
    "hdf5": ["blosc-zstd", "zstd", "lz4", "gzip", "none"],
}
CASES = [(store, codec, BAD) for store in STORES for codec in CODECS[store]]
CASES += [(store, CODECS[store][0], EDGE) for store in STORES]


def _expect_named(err: BaseException, bad: int = BAD) -> None:
    text = str(err)
    assert "'image'" in text, text
    assert f"chunk {bad}" in text or f"chunks {bad}..{bad}" in text, text


@pytest.mark.parametrize(
    ("store", "codec", "bad"), CASES, ids=[f"{s}-{c}-chunk{b}" for s, c, b in CASES]
)
def test_a_chunk_decoding_to_half_its_rows_is_a_corrupt_chunk(
    tmp_path: Path, store: str, codec: str, bad: int
) -> None:
    path = STORES[store](tmp_path, codec, bad)
    arrays = _arrays()
    rows = list(range(bad * SPC, min(N, (bad + 1) * SPC)))
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0)
    for batch in ([rows[0]], [rows[-1]], [0, rows[1], N - 1], list(range(N))):
        with pytest.raises(CorruptChunkError) as info:
            ds.read_batch(batch)
        _expect_named(info.value, bad)
    ok = [i for i in range(N) if i // SPC != bad]
    got = ds.read_batch(ok)
    np.testing.assert_array_equal(got["image"], arrays["image"][ok])
    np.testing.assert_array_equal(got["label"], arrays["label"][ok])
    labels = ChunkDataset(path, fields=["label"]).read_batch(rows)["label"]
    np.testing.assert_array_equal(labels, arrays["label"][rows])  # beside the bad chunk


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", list(STORES))
def test_the_same_error_reaches_the_user_through_loader_workers(tmp_path: Path, store: str) -> None:
    path = STORES[store](tmp_path, CODECS[store][0], BAD)
    loader = make_loader(path, SPC, fields=["image", "label"], shuffle=False, num_workers=2)
    with pytest.raises(CorruptChunkError) as info:
        for _ in loader:
            pass
    _expect_named(info.value)
