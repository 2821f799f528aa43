"""Corrupt, truncated, emptied and missing chunks (RELIABILITY rows 7, 8 and 9).

A damaged chunk must raise a typed error naming the array and the chunk, never come back as
wrong values; chunks it does not touch stay readable; ``chunkio.diagnose.dataset_report.verify``
lists every
damaged chunk. A missing chunk is an error, while a chunk of real zeros reads as zeros.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import sample_arrays
from conftest import zarr_chunk_file as conftest_chunk_file

from chunkio import ChunkDataset, Output, Workers, make_loader, write_arrays
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import ChunkioError, ChunkReadError, CorruptChunkError, MissingChunkError

SPC = 16  # samples per chunk; 100 samples -> chunks 0..6, the last holding 4


def zarr_chunk_file(path: str, field: str, chunk: int, ndim: int) -> Path:
    """The file of chunk ``chunk`` along the sample axis."""
    return conftest_chunk_file(path, field, chunk)


def hdf5_chunk_span(path: str, field: str, chunk: int) -> tuple[int, int]:
    """Byte offset and size of a chunk inside the HDF5 file."""
    with h5py.File(path, "r") as f:
        dset = f[field]
        info = dset.id.get_chunk_info_by_coord((chunk * SPC,) + (0,) * (dset.ndim - 1))
        return int(info.byte_offset), int(info.size)


def flip_byte(path: Path | str, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))


def damage_zarr(path: str, field: str, chunk: int, ndim: int, how: str) -> None:
    target = zarr_chunk_file(path, field, chunk, ndim)
    size = target.stat().st_size
    if how == "flip":
        flip_byte(target, size // 2)
    elif how == "truncate":
        os.truncate(target, size // 2)
    elif how == "empty":
        os.truncate(target, 0)
    else:
        raise ValueError(how)


def damage_hdf5(path: str, field: str, chunk: int) -> None:
    offset, size = hdf5_chunk_span(path, field, chunk)
    flip_byte(path, offset + size // 2)


CASES = [("zarr", "flip"), ("zarr", "truncate"), ("zarr", "empty"), ("hdf5", "flip")]


def damage(fmt: str, path: str, field: str, chunk: int, how: str, ndim: int) -> None:
    if fmt == "zarr":
        damage_zarr(path, field, chunk, ndim, how)
    else:
        damage_hdf5(path, field, chunk)


@pytest.mark.parametrize(("fmt", "how"), CASES)
def test_damaged_chunk_is_a_typed_error_and_others_stay_readable(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]], fmt: str, how: str
) -> None:
    path, arrays = make_dataset(fmt, sample_arrays(100), samples_per_chunk=SPC)
    damage(fmt, path, "image", 2, how, ndim=4)
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0)

    for batch in ([33], [32, 47], [5, 40, 90], list(range(100))):
        with pytest.raises(CorruptChunkError) as info:
            ds.read_batch(batch)
        err = info.value
        assert isinstance(err, OSError) and isinstance(err, ChunkioError)
        text = str(err)
        assert "'image'" in text, text
        assert "chunk 2" in text or "chunks 2..2" in text, text
        assert os.path.basename(path) in text, text

    # Batches that avoid chunk 2 still read, and read right.
    ok = [i for i in range(100) if i // SPC != 2]
    got = ds.read_batch(ok)
    np.testing.assert_array_equal(got["image"], arrays["image"][ok])
    np.testing.assert_array_equal(got["label"], arrays["label"][ok])
    # The loader surfaces the same error rather than a batch of wrong values.
    loader = make_loader(ds, 8, shuffle=False, num_workers=0)
    with pytest.raises(CorruptChunkError, match="'image'"):
        for _ in loader:
            pass


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_verify_lists_every_damaged_chunk(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]], fmt: str
) -> None:
    path, _ = make_dataset(fmt, sample_arrays(100), samples_per_chunk=SPC)
    assert verify(path).ok
    damage(fmt, path, "image", 1, "flip", ndim=4)
    damage(fmt, path, "image", 5, "truncate" if fmt == "zarr" else "flip", ndim=4)
    damage(fmt, path, "label", 3, "flip", ndim=1)
    report = verify(path)
    assert not report.ok
    found = {(p.array, p.chunk) for p in report.problems}
    assert found == {("image", 1), ("image", 5), ("label", 3)}, report


def test_checksums_on_by_default(tmp_path: Path) -> None:
    data = sample_arrays(40)
    write_arrays(tmp_path / "d.zarr", data, output=Output(chunks=SPC))
    write_arrays(tmp_path / "d.h5", data, output=Output(chunks=SPC))
    for field in data:
        meta = json.loads((tmp_path / "d.zarr" / field / "zarr.json").read_text())
        assert meta["codecs"][-1]["name"] == "crc32c", meta["codecs"]
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert all(f[field].fletcher32 for field in data)
    # Switching them off is possible, and then visible in the metadata.
    write_arrays(tmp_path / "n.zarr", data, output=Output(chunks=SPC, checksum=False))
    meta = json.loads((tmp_path / "n.zarr" / "image" / "zarr.json").read_text())
    assert "crc32c" not in [c["name"] for c in meta["codecs"]]


def test_missing_chunk_is_an_error_not_zeros(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]],
) -> None:
    path, arrays = make_dataset("zarr", sample_arrays(100), samples_per_chunk=SPC)
    zarr_chunk_file(path, "image", 4, ndim=4).unlink()
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    with pytest.raises(MissingChunkError) as info:
        ds.read_batch([70, 3])
    assert isinstance(info.value, ChunkReadError)
    assert "'image'" in str(info.value) and "chunk 4" in str(info.value)
    np.testing.assert_array_equal(ds.read_batch([3, 80])["image"], arrays["image"][[3, 80]])
    assert {(p.array, p.chunk) for p in verify(path).problems} == {("image", 4)}


def drop_hdf5_chunk(path: str, field: str, chunk: int) -> None:
    """Rewrite the file with one chunk of ``field`` never stored (raw chunks copied as-is)."""
    tmp = path + ".tmp"
    with h5py.File(path, "r") as fin, h5py.File(tmp, "w") as fout:
        for key, value in fin.attrs.items():
            fout.attrs[key] = value
        for name, src in fin.items():
            space = h5py.h5s.create_simple(src.shape, src.maxshape)
            dcpl = src.id.get_create_plist()
            h5py.h5d.create(fout.id, name.encode(), src.id.get_type(), space, dcpl=dcpl)
            rest = (0,) * (src.ndim - 1)
            for c in range(-(-src.shape[0] // SPC)):
                if not (name == field and c == chunk):
                    mask, raw = src.id.read_direct_chunk((c * SPC, *rest))
                    fout[name].id.write_direct_chunk((c * SPC, *rest), raw, mask)
    os.replace(tmp, path)


def test_missing_hdf5_chunk_is_an_error_not_zeros(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]],
) -> None:
    path, arrays = make_dataset("hdf5", sample_arrays(100), samples_per_chunk=SPC)
    drop_hdf5_chunk(path, "image", 3)
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    with pytest.raises(MissingChunkError, match=r"'image': chunk 3 is missing"):
        ds.read_batch([50])
    np.testing.assert_array_equal(ds.read_batch([3, 80])["image"], arrays["image"][[3, 80]])
    assert {(p.array, p.chunk) for p in verify(path).problems} == {("image", 3)}


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_all_zero_samples_read_as_zeros(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]], fmt: str
) -> None:
    arrays = sample_arrays(48)
    arrays["image"][SPC : 2 * SPC] = 0  # one whole chunk of zeros
    arrays["image"][40] = 0  # and a single zero image inside a mixed chunk
    path, _ = make_dataset(fmt, arrays, samples_per_chunk=SPC)
    if fmt == "zarr":
        assert zarr_chunk_file(path, "image", 1, ndim=4).exists(), "zero chunks are stored"
    ds = ChunkDataset(path, fields="image", preload_bytes=0)
    got = ds.read_batch(list(range(48)))["image"]
    np.testing.assert_array_equal(got, arrays["image"])
    assert not got[SPC : 2 * SPC].any() and not got[40].any()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["ring", "dataloader"])
def test_loader_workers_surface_the_corrupt_chunk(
    make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]], transport: str
) -> None:

    path, _ = make_dataset("zarr", sample_arrays(64), samples_per_chunk=SPC)
    damage_zarr(path, "image", 2, 4, "flip")
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0)
    loader = make_loader(ds, 8, shuffle=False, num_workers=1, workers=Workers(transport=transport))  # type: ignore[arg-type]
    try:
        with pytest.raises(CorruptChunkError) as info:  # same type on both routes
            for _ in loader:
                pass
    finally:
        loader.close()
    err = info.value
    # the ring reports the worker and chains the worker's own error
    corrupt = err if isinstance(err, CorruptChunkError) else err.__cause__
    assert isinstance(corrupt, CorruptChunkError), repr(err)
    assert "'image'" in str(corrupt) and "chunk 2" in str(corrupt), str(corrupt)
