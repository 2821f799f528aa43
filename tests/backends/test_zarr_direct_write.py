"""Whole chunks of local Zarr arrays are encoded and written by chunkio, not zarr-python.

The files must be exactly what zarr-python writes (so any Zarr reader reads them), written
atomically (no ``.partial`` left behind), and any write that is not whole chunks must still go
through zarr-python and read back right.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from chunkio import Execution, Output
from chunkio.backends import Compression, open_reader, open_writer
from chunkio.backends.base import CODECS
from chunkio.backends.codec_table import zarr_compressors
from chunkio.backends.zarr.backend import CHUNK_KEY_ENCODING, ZarrWriter

SHAPES: list[tuple[str, tuple[int, ...], Any]] = [
    ("label", (), np.int64),
    ("path", (13,), np.uint8),
    ("image", (3, 5, 4), np.uint8),
    ("value", (2,), np.float32),
]


def _chunk_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("codec", CODECS)
def test_direct_chunks_are_the_bytes_zarr_writes(
    tmp_path: Path, codec: str, checksum: bool
) -> None:
    compression = Compression(codec=codec, checksum=checksum)
    rng = np.random.default_rng(0)
    n, spc = 23, 4  # the last chunk is short: zarr pads it with the fill value
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    writer = open_writer(str(ours), format="zarr")
    assert isinstance(writer, ZarrWriter)
    group = zarr.open_group(str(theirs), mode="w", zarr_format=3)
    for name, sample, dtype in SHAPES:
        data = (rng.random((n, *sample)) * 200).astype(dtype)
        writer.create_array(
            name,
            shape=data.shape,
            dtype=np.dtype(dtype),
            chunks=(spc, *sample),
            compression=compression,
        )
        writer.write_block(name, 0, data[:8])  # two whole chunks
        writer.write_block(name, 8, data[8:])  # the rest, ending in the short last chunk
        assert writer._encoder(name) is not None, "this layout should take the direct path"
        arr = group.create_array(
            name,
            shape=data.shape,
            dtype=dtype,
            chunks=(spc, *sample),
            compressors=zarr_compressors(compression),
            fill_value=0,
            config={"write_empty_chunks": True},
            chunk_key_encoding=CHUNK_KEY_ENCODING,
        )
        arr[:] = data
        reader = open_reader(str(ours))
        out = np.empty_like(data)
        reader.read_into(name, [(0, n)], out)
        reader.close()
        np.testing.assert_array_equal(out, data)
        np.testing.assert_array_equal(zarr.open_array(str(ours), path=name)[:], data)
    writer.close()
    mine, zarrs = _chunk_files(ours), _chunk_files(theirs)
    assert sorted(mine) == sorted(zarrs)
    if codec == "gzip":  # a gzip header holds its writing time (bytes 4..7), and the
        end = -4 if checksum else None  # crc32c covers it: neither is compared
        mine = {k: v[:4] + v[8:end] for k, v in mine.items()}
        zarrs = {k: v[:4] + v[8:end] for k, v in zarrs.items()}
    different = [k for k in mine if mine[k] != zarrs[k]]
    assert not different, f"chunk files differ from zarr-python's: {different[:5]}"
    assert not [k for k in mine if k.endswith(".partial")]


def test_writes_that_are_not_whole_chunks_go_through_zarr(tmp_path: Path) -> None:
    path = str(tmp_path / "d.zarr")
    writer = open_writer(path, format="zarr")
    data = np.arange(40, dtype=np.int64).reshape(20, 2)
    writer.create_array(
        "x", shape=data.shape, dtype=data.dtype, chunks=(6, 2), compression=Compression()
    )
    writer.write_block("x", 0, data[:6])  # one whole chunk: direct
    writer.write_block("x", 6, data[6:9])  # half a chunk: zarr
    writer.write_block("x", 9, data[9:])  # starts mid-chunk: zarr
    writer.write_block("x", 6, data[6:9].astype(np.int32))  # another dtype: zarr casts it
    writer.close()
    np.testing.assert_array_equal(zarr.open_array(path, path="x")[:], data)


def test_an_existing_chunk_is_replaced_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "d.zarr")
    writer = open_writer(path, format="zarr")
    writer.create_array(
        "x", shape=(8,), dtype=np.dtype(np.uint8), chunks=(4,), compression=Compression()
    )
    writer.write_block("x", 0, np.full(8, 1, np.uint8))
    writer.write_block("x", 4, np.full(4, 7, np.uint8))
    writer.close()
    np.testing.assert_array_equal(zarr.open_array(path, path="x")[:], [1] * 4 + [7] * 4)
    assert sorted(n for n in os.listdir(os.path.join(path, "x")) if n != "zarr.json") == [
        "c.0",
        "c.1",
    ]


def test_datasets_with_nested_chunk_keys_still_read_and_grow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Datasets written before chunk keys were flat (``c/<i>/0``) read, verify and append."""
    from chunkio import ChunkDataset, append_arrays, write_arrays
    from chunkio.backends import storage_for
    from chunkio.backends._storage import chunk_files
    from chunkio.backends.zarr import writing as _zarr_writing

    path = tmp_path / "old.zarr"
    rng = np.random.default_rng(1)
    first = {"image": rng.integers(0, 255, (10, 2, 3), np.uint8), "label": np.arange(10)}
    with monkeypatch.context() as m:
        m.setattr(_zarr_writing, "CHUNK_KEY_ENCODING", {"name": "default", "separator": "/"})
        write_arrays(
            path, first, shuffle=False, output=Output(chunks=4), execution=Execution(progress=False)
        )
    assert (path / "image" / "c" / "2" / "0" / "0").is_file()
    assert chunk_files(str(path / "image"), range(3)) == [
        str(path / "image" / "c" / str(k)) for k in range(3)
    ]
    storage_for("zarr").sync_chunks(str(path), ["image", "label"], 0, 3)

    more = {"image": rng.integers(0, 255, (5, 2, 3), np.uint8), "label": np.arange(10, 15)}
    append_arrays(path, more, shuffle=False)
    ds = ChunkDataset(path, fields=["image", "label"])
    batch = ds.read_batch(list(range(15)))
    np.testing.assert_array_equal(batch["image"], np.concatenate([first["image"], more["image"]]))
    np.testing.assert_array_equal(batch["label"], np.arange(15))


def test_chunk_files_names_every_file_of_a_sample_chunk(tmp_path: Path) -> None:
    """What a synced task must fsync: every chunk file of its sample-axis chunks."""
    from chunkio.backends._storage import chunk_files

    path = str(tmp_path / "v.zarr")
    writer = open_writer(path, format="zarr")
    writer.create_array(
        "vol",
        shape=(3, 5, 4),
        dtype=np.dtype(np.int16),
        chunks=(1, 2, 3),
        compression=Compression(),
    )
    writer.write_region("vol", (slice(0, 2), slice(0, 5), slice(0, 4)), np.ones((2, 5, 4), "i2"))
    writer.close()
    array_dir = os.path.join(path, "vol")
    on_disk = sorted(n for n in os.listdir(array_dir) if n.startswith("c."))
    assert len(on_disk) == 2 * 3 * 2  # sample chunks 0 and 1, 3 x 2 chunks each
    found = chunk_files(array_dir, range(0, 3))  # chunk 2 was never written
    assert sorted(os.path.basename(p) for p in found) == on_disk
    assert sorted(os.path.basename(p) for p in chunk_files(array_dir, range(1, 2))) == [
        n for n in on_disk if n.startswith("c.1.")
    ]
