"""The read path's own parts: checksums, raw HDF5 chunks, the chunk pool, stage clocks, direct
decodes, the transport's protocol and the patch core."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio import ChunkDataset, Execution, Output, Workers, make_loader, write_arrays
from chunkio.backends import Compression, open_reader, open_writer
from chunkio.backends._checksum import Fletcher32, fletcher32, fletcher32_reference
from chunkio.backends.base import CODECS
from chunkio.backends.hdf5.raw import RawChunks
from chunkio.errors import CorruptChunkError
from chunkio.read import DecodedChunkCache
from chunkio.transport import BatchSource, LocalTransport

# -- fletcher32 ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fletcher32_equals_hdf5s_loop(data: bytes) -> None:
    assert fletcher32(data) == fletcher32_reference(data)


@pytest.mark.parametrize("size", [1, 2, 7, 8, 9, 16383, 16384, 16391, 100_003, 400_000])
@pytest.mark.parametrize("fill", ["random", "zeros", "ones", "single"])
def test_fletcher32_equals_the_checksum_hdf5_stores(tmp_path: Path, size: int, fill: str) -> None:
    rng = np.random.default_rng(size)
    data = {
        "random": rng.integers(0, 256, size, dtype=np.uint8),
        "zeros": np.zeros(size, np.uint8),
        "ones": np.full(size, 255, np.uint8),
        "single": np.eye(1, max(size, 1), max(size, 1) // 2, dtype=np.uint8)[0][:size],
    }[fill]
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:  # fletcher32 alone: the stored bytes are the data
        f.create_dataset("x", data=data.reshape(-1), chunks=(max(size, 1),), fletcher32=True)
    with h5py.File(path, "r") as f:
        stored = f["x"].id.read_direct_chunk((0,))[1]
    assert Fletcher32()(np.frombuffer(stored[:-4], np.uint8)) == int.from_bytes(
        stored[-4:], "little"
    )


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("size", [0, 1, 31, 32, 33, 8191, 8192, 8193, 8224, 24_577])
def test_fletcher32_compiled_and_numpy_sums_equal_hdf5s_loop(monkeypatch, compiled, size):
    # the compiled sums fold 16 lanes every 256 rows (8192 bytes): sizes at and around those
    # edges, with and without it (the NumPy and numcodecs fallbacks), equal HDF5's loop
    import chunkio.backends._checksum as checksum

    if not compiled:
        monkeypatch.setattr(checksum, "_compiled_sums", None)
    elif checksum._compiled_sums is None:  # pragma: no cover - a build without a C compiler
        pytest.skip("chunkio.backends._fletcher is not built")
    rng = np.random.default_rng(size)
    for data in (rng.integers(0, 256, size, dtype=np.uint8), np.full(size, 255, np.uint8)):
        want = fletcher32_reference(data.tobytes())
        assert Fletcher32()(data) == want
        assert Fletcher32()(np.concatenate([np.uint8([7]), data])[1:]) == want  # an unaligned view
        if size % 2 == 0:  # an array of other items is summed over its bytes
            assert Fletcher32()(data.view(np.int16)) == want


# -- raw HDF5 chunks ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("checksum", [True, False])
def test_hdf5_chunks_chunkio_writes_are_read_raw(
    tmp_path: Path, codec: str, checksum: bool
) -> None:
    path = str(tmp_path / "x.h5")
    data = np.random.default_rng(0).integers(0, 40, (23, 5, 7)).astype(np.uint16)
    writer = open_writer(path)
    writer.create_array(
        "x", shape=data.shape, dtype=data.dtype, chunks=(4, 5, 7),
        compression=Compression(codec, 3, checksum),
    )  # fmt: skip
    for start in range(0, 23, 4):
        writer.write_block("x", start, data[start : start + 4])
    writer.close()
    with h5py.File(path, "r") as f:
        raw = RawChunks.build(f["x"], path, "x")
        assert raw is not None and raw.checksum == checksum
    reader = open_reader(path)
    try:
        out = np.empty_like(data)
        reader.read_into("x", [(0, 23)], out)
        np.testing.assert_array_equal(out, data)
        assert reader.read_path("x") == "raw"
        assert reader.clock.total() > 0
    finally:
        reader.close()


def test_hdf5_with_a_filter_chunkio_does_not_decode_reads_through_h5py(tmp_path: Path) -> None:
    path = str(tmp_path / "x.h5")
    data = np.arange(60, dtype=np.int32).reshape(12, 5)
    with h5py.File(path, "w") as f:  # scale-offset: decoded by HDF5 itself
        f.create_dataset("x", data=data, chunks=(4, 5), scaleoffset=0, compression="gzip")
    reader = open_reader(path)
    try:
        out = np.empty_like(data)
        reader.read_into("x", [(0, 12)], out)
        np.testing.assert_array_equal(out, data)
        assert reader.read_path("x") == "h5py"
    finally:
        reader.close()


@pytest.mark.parametrize("codec", ["lz4", "zstd", "none"])
def test_corrupt_hdf5_chunk_read_raw_names_array_and_chunk(
    tmp_path: Path, make_dataset: Any, codec: str
) -> None:
    path, arrays = make_dataset("hdf5", compression=Compression(codec))
    with h5py.File(path, "r") as f:
        info = f["image"].id.get_chunk_info_by_coord((2 * 16, 0, 0, 0))
    with open(path, "r+b") as fh:  # flip one byte in the middle of chunk 2's stored bytes
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    with pytest.raises(CorruptChunkError, match=r"'image': chunk 2 .*fletcher32"):
        ds.read_batch([40])
    np.testing.assert_array_equal(ds.read_batch([0, 100])["image"], arrays["image"][[0, 100]])


def test_hdf5_fletcher32_is_checked_once_per_chunk_until_the_file_changes(
    tmp_path: Path, make_dataset: Any
) -> None:
    path, arrays = make_dataset("hdf5")
    reader = open_reader(path)
    out = np.empty_like(arrays["image"])
    n = len(out)
    try:
        reader.read_into("image", [(0, n)], out)
        raw = reader._raw["image"]  # type: ignore[attr-defined]
        assert raw is not None and raw.checksum
        calls = []
        check = raw._fletcher
        raw._fletcher = lambda body: calls.append(1) or check(body)
        reader.read_into("image", [(0, n)], out)  # an unchanged file: nothing checked again
        np.testing.assert_array_equal(out, arrays["image"])
        assert calls == []
        with h5py.File(path, "r") as f:
            info = f["image"].id.get_chunk_info_by_coord((2 * 16, 0, 0, 0))
        time.sleep(0.05)  # past the file system's timestamp granularity
        with open(path, "r+b") as fh:  # the file changes: every chunk is checked again
            fh.seek(info.byte_offset + info.size // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(CorruptChunkError, match=r"'image': chunk 2 .*fletcher32"):
            reader.read_into("image", [(0, n)], out)
        assert len(calls) == 3  # chunks 0 and 1 checked again, chunk 2 failed
    finally:
        reader.close()


def test_hdf5_raw_reads_accept_what_hdf5_accepts(tmp_path: Path) -> None:
    """The byte-swapped Fletcher-32 of HDF5 < 1.6.3, and an edge chunk stored unfiltered."""
    import ctypes
    import glob

    data = np.arange(10 * 6, dtype="<i4").reshape(10, 6)
    path = str(tmp_path / "old.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data, chunks=(4, 6), fletcher32=True, compression="gzip")
        mask, stored = d.id.read_direct_chunk((4, 0))
        c = stored[-4:]
        d.id.write_direct_chunk((4, 0), stored[:-4] + bytes([c[1], c[0], c[3], c[2]]), mask)
        libs = glob.glob(
            os.path.join(os.path.dirname(h5py.__file__), "..", "h5py.libs", "libhdf5-*")
        )
        if libs:  # an edge chunk kept unfiltered, as other writers may ask HDF5 to store it
            lib = ctypes.CDLL(libs[0])
            lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((4, 6))
            dcpl.set_deflate(4)
            dcpl.set_fletcher32()
            assert lib.H5Pset_chunk_opts(dcpl.id, 0x0002) >= 0  # DONT_FILTER_PARTIAL_CHUNKS
            space = h5py.h5s.create_simple((10, 6))
            h5py.Dataset(h5py.h5d.create(f.id, b"y", h5py.h5t.STD_I32LE, space, dcpl=dcpl))[...] = (
                data
            )
    reader = open_reader(path)
    try:
        for name in ("x", "y") if libs else ("x",):
            out = np.empty_like(data)
            reader.read_into(name, [(0, 10)], out)
            assert reader.read_path(name) == "raw"
            np.testing.assert_array_equal(out, data)
    finally:
        reader.close()


def test_a_raw_hdf5_read_error_names_the_file_once(tmp_path: Path, make_dataset: Any) -> None:
    path, arrays = make_dataset("hdf5", compression=Compression("lz4"))
    n = len(arrays["image"])
    last = (n - 1) // 16 * 16  # a partial edge chunk: read by h5py, the others raw
    assert n % 16
    with h5py.File(path, "r") as f:
        info = f["image"].id.get_chunk_info_by_coord((last, 0, 0, 0))
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    reader = open_reader(path)
    try:
        with pytest.raises(CorruptChunkError) as caught:
            out = np.empty_like(arrays["image"][last - 16 :])
            reader.read_into("image", [(last - 16, n)], out)
    finally:
        reader.close()
    assert str(caught.value).count(str(path)) == 1, caught.value


# -- chunk pool ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.sets(st.integers(0, 30), min_size=1, max_size=8), min_size=1, max_size=20),
)
def test_chunk_pool_evicts_least_recently_used(capacity: int, batches: list[set[int]]) -> None:
    pool = DecodedChunkCache(rows_per_chunk=2, sample_shape=(3,), dtype=np.int64, capacity=capacity)
    last_use: dict[int, int] = {}
    held: set[int] = set()
    for t, batch in enumerate(batches):
        needed = np.array(sorted(batch), np.int64)
        slots, runs = pool.admit(needed)
        for run, first in runs:  # write each chunk's id into its slot, as a read would
            for k, c in enumerate(run):
                pool.buffer[(first + k) * 2 : (first + k + 1) * 2] = c
        assert len(set(slots.tolist())) == len(slots)  # one slot per chunk
        for c, s in zip(needed.tolist(), slots.tolist(), strict=True):
            assert (pool.buffer[s * 2 : s * 2 + 2] == c).all()  # each slot holds its chunk
        fresh = {c for run, _ in runs for c in run}
        assert fresh == {c for c in needed.tolist() if c not in held}
        last_use.update((c, t) for c in needed.tolist())
        held = {c for c in range(31) if c in pool}
        assert set(needed.tolist()) <= held and len(held) <= pool.capacity
        gone = set(last_use) - held
        if gone and held - set(needed.tolist()):  # evicted ones were used no later
            assert max(last_use[c] for c in gone) <= min(
                last_use[c] for c in held - set(needed.tolist())
            )
        if len(held) < pool.capacity:
            assert not gone  # nothing is evicted while a slot is free


# -- stage clocks and direct decodes ---------------------------------------------------------


def test_read_stats_split_time_by_stage(make_dataset: Any, fmt: str) -> None:
    path, _ = make_dataset(fmt)
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    ds.read_batch(np.arange(0, 200, 3))
    stages = ds.read_stats().stages()
    assert set(stages) == {"read", "checksum", "decode", "gather"}
    assert stages["read"] > 0 and stages["checksum"] > 0 and stages["decode"] > 0
    assert stages["gather"] > 0


def test_sequential_loader_decodes_whole_chunks_into_the_batch(make_dataset: Any, fmt: str) -> None:
    path, arrays = make_dataset(fmt)
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0)
    loader = make_loader(ds, 40, shuffle=False, num_workers=0, workers=Workers(copy=True))
    got = torch.cat([b[0] for b in loader]).numpy()
    np.testing.assert_array_equal(got, arrays["image"])
    stats = loader.dataset.read_stats()  # the copy the loader reads
    assert stats.direct_chunks > 0  # chunks inside one batch skipped the pool
    assert stats.rows_decoded == 2 * len(arrays["image"])  # each field's rows once


def test_direct_decodes_only_when_asked(make_dataset: Any) -> None:
    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(path, fields=["image"], preload_bytes=0)
    ds.read_batch(np.arange(16))  # chunk 0 whole and in order, but no promise: pooled
    assert ds.read_stats().direct_chunks == 0
    got = ds.read_batch(np.arange(16, 40), once=True)["image"]
    np.testing.assert_array_equal(got, arrays["image"][16:40])
    assert ds.read_stats().direct_chunks == 1  # chunk 1; chunk 2 is only partly used


# -- the transport's protocol ---------------------------------------------------------------


class _Counting(BatchSource):
    """A BatchSource that is not a ChunkDataset: sample i is [i, i]."""

    def batch_fields(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        return {"x": (np.dtype(np.int64), (2,))}

    def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
        out["x"][...] = np.asarray(indices)[:, None]
        return dict(out)

    def arrange(self, columns: dict[str, torch.Tensor]) -> Any:
        return columns["x"]

    def close(self) -> None:
        pass


def test_transports_need_only_the_batch_source_protocol(make_dataset: Any) -> None:
    """A source that is not a ChunkDataset, and a ChunkDataset, through the same transport:
    each batch holds the asked samples in the asked order (repeats included)."""
    leases = list(LocalTransport(_Counting(), batch_size=4).run([[3, 1], [7, 7, 0]]))
    assert [lease.batch.tolist() for lease in leases] == [
        [[3, 3], [1, 1]],
        [[7, 7], [7, 7], [0, 0]],
    ]
    path, arrays = make_dataset("zarr")
    ds = ChunkDataset(path, fields=["image", "label"])
    batches = [[150, 3, 3], [0, 199]]
    for lease, ids in zip(LocalTransport(ds, batch_size=4).run(batches), batches, strict=True):
        image, label = lease.batch
        np.testing.assert_array_equal(image.numpy(), arrays["image"][ids])
        np.testing.assert_array_equal(label.numpy(), arrays["label"][ids])


# -- patches through the shared core ------------------------------------------------------------


def test_patch_transform_keeps_tuples(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from chunkio.convert.volumes import convert_volumes
    from chunkio.patches import PatchDataset
    from chunkio.read.batch import collate

    images = [np.arange(6**3, dtype=np.int16).reshape(6, 6, 6)]
    np.save(tmp_path / "img0.npy", images[0])
    dst = str(tmp_path / "v.zarr")
    convert_volumes(
        [str(tmp_path / "img0.npy")],
        dst,
        output=Output(chunks=(3, 3, 3)),
        execution=Execution(workers=1, progress=False),
    )
    ds = PatchDataset(dst, (2, 2, 2), transform=lambda item: (item["image"], item["volume"]))
    for collate_fn in (collate, None):
        kwargs = {"collate_fn": collate_fn} if collate_fn else {}
        image, volume = next(iter(DataLoader(ds, sampler=ds.sampler, batch_size=4, **kwargs)))
        assert image.shape == (4, 2, 2, 2) and volume.tolist() == [0, 0, 0, 0]
    batch = ds.__getitems__(list(ds.sampler)[:3])
    assert isinstance(collate(batch), tuple)  # not a list, as default_collate alone makes it
    np.testing.assert_array_equal(collate(batch)[0][0].numpy(), images[0][:2, :2, :2])


def test_samples_and_patches_share_one_reader_class(tmp_path: Path, make_dataset: Any) -> None:
    from chunkio.patches import PatchDataset
    from chunkio.read import ReadCore

    path, _ = make_dataset("zarr")
    images = np.arange(4**3, dtype=np.int16).reshape(1, 4, 4, 4)
    np.save(tmp_path / "img0.npy", images[0])
    from chunkio.convert.volumes import convert_volumes

    dst = str(tmp_path / "v.zarr")
    convert_volumes(
        [str(tmp_path / "img0.npy")],
        dst,
        output=Output(chunks=(2, 2, 2)),
        execution=Execution(workers=1, progress=False),
    )
    patches = PatchDataset(dst, (2, 2, 2))
    patches.read_patches([(0, 1, 1, 1)])
    samples = ChunkDataset(path)
    samples.read_batch([0])
    assert type(patches._handle()) is type(samples._handle()) is ReadCore


def test_write_arrays_fixture_round_trip_guard(tmp_path: Path) -> None:
    # the raw HDF5 path reads a dataset whose last chunk is partial
    path = str(tmp_path / "p.h5")
    data = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    write_arrays(
        path,
        {"x": data},
        shuffle=False,
        output=Output(chunks=4),
        execution=Execution(progress=False),
    )
    np.testing.assert_array_equal(ChunkDataset(path, fields="x").read_batch([9, 0, 5])["x"],
                                  data[[9, 0, 5]])  # fmt: skip


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 1])
def test_editing_a_batch_never_edits_a_later_one(make_dataset: Any, workers: int) -> None:
    path, arrays = make_dataset("zarr")
    loader = make_loader(path, 16, shuffle=False, num_workers=workers, workers=Workers(prefetch=1))
    try:
        seen: list[int] = []
        for batch in loader:
            assert isinstance(batch["label"], torch.Tensor)  # not the string put there below
            seen += batch["label"].tolist()
            batch["label"] = "edited by the consumer"
        assert seen == arrays["label"].tolist()
    finally:
        loader.close()
