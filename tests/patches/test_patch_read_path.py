"""The patch read path's shortcuts (:mod:`chunkio.read.patches`): chunks decoded straight into
the chunk pool, the fill written only where a patch sticks out, and the
remote stores' box reads; every patch stays equal to NumPy's slice."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chunkio.patches.dataset as patch_dataset
import chunkio.read.patches as patch_reads
from chunkio import Execution, Output
from chunkio.backends._memory import delete_memory_store
from chunkio.convert.volumes import convert_volumes
from chunkio.patches import PatchDataset
from chunkio.read.planning import plan_patch_reads

_names = itertools.count()
SHAPE, CHUNKS, SIZE = (9, 8, 7), (4, 4, 4), (4, 4, 4)
#: inside, across chunks, sticking out low, sticking out high, a duplicate
KEYS = [(0, 0, 0, 0), (0, 3, 2, 1), (0, -2, 1, 0), (0, 7, 6, 5), (0, 3, 2, 1)]


@pytest.fixture
def volume(tmp_path: Path) -> Any:
    """One int16 volume (an edge chunk on every axis) and its labels, in a memory store."""
    rng = np.random.default_rng(0)
    image = rng.integers(-3000, 30000, SHAPE).astype(np.int16)
    label = rng.integers(0, 3, SHAPE).astype(np.uint8)
    np.save(tmp_path / "img.npy", image), np.save(tmp_path / "lab.npy", label)
    path = f"memory://patch-read-path-{next(_names)}"
    convert_volumes(
        [str(tmp_path / "img.npy")],
        path,
        labels=[str(tmp_path / "lab.npy")],
        output=Output(chunks=CHUNKS),
        execution=Execution(workers=1, progress=False),
    )
    yield path, image, label
    delete_memory_store(path)


def reference(volume: np.ndarray, origin: Any, mode: str, value: int) -> np.ndarray:
    pad = [(p, p) for p in SIZE]
    kw: dict[str, Any] = {"constant_values": value} if mode == "constant" else {}
    padded = np.pad(volume, pad, mode=mode, **kw)
    return padded[tuple(slice(o + p, o + 2 * p) for o, p in zip(origin, SIZE, strict=True))]


@pytest.mark.parametrize("pad_mode", ["constant", "edge"])
def test_patches_into_a_dirty_ring_slot_equal_numpy(volume, pad_mode):
    # the fill is written only into patches that stick out: a slot holding an earlier
    # batch's bytes must still come back exactly the patches
    path, image, label = volume
    ds = PatchDataset(path, SIZE, pad_mode=pad_mode, pad_value=-7, label_pad_value=9)
    out = {
        "image": np.full((len(KEYS), *SIZE), 12345, np.int16),
        "label": np.full((len(KEYS), *SIZE), 77, np.uint8),
    }
    for _ in range(2):  # the second batch: every chunk from the pool
        got = ds.read_patches(KEYS, out=out)
        for j, (_, *origin) in enumerate(KEYS):
            np.testing.assert_array_equal(got["image"][j], reference(image, origin, pad_mode, -7))
            np.testing.assert_array_equal(got["label"][j], reference(label, origin, pad_mode, 9))
        assert got["image"] is out["image"]


def test_remote_box_reads_equal_chunk_by_chunk_reads(volume, monkeypatch):
    path, image, _ = volume
    local = PatchDataset(path, SIZE, pad_value=-7)
    want = local.read_patches(KEYS)
    monkeypatch.setattr(patch_reads, "is_remote", lambda location: True)
    remote = PatchDataset(path, SIZE, pad_value=-7)
    got = remote.read_patches(KEYS)
    for kind in ("image", "label"):
        np.testing.assert_array_equal(got[kind], want[kind])
    np.testing.assert_array_equal(got["image"][1], image[3:7, 2:6, 1:5])
    stats, base = remote.read_stats(), local.read_stats()
    assert (stats.chunks_read, stats.bytes_decoded) == (base.chunks_read, base.bytes_decoded)


def test_worker_batches_are_read_into_shared_memory(volume, monkeypatch):
    # in a DataLoader worker the patches land in shared memory (what the worker sends without
    # copying), as torch's default_collate stacks there; in the main process they do not
    path, image, label = volume
    ds = PatchDataset(path, SIZE, pad_value=-7)
    main = ds.__getitems__(KEYS).collated
    assert not main["image"].is_shared()
    monkeypatch.setattr(patch_dataset, "get_worker_info", lambda: object())
    got = ds.__getitems__(KEYS).collated
    for kind, volume_array, pad in (("image", image, -7), ("label", label, 0)):
        assert got[kind].is_shared()
        for j, (_, *origin) in enumerate(KEYS):
            np.testing.assert_array_equal(
                got[kind][j].numpy(), reference(volume_array, origin, "constant", pad)
            )


def test_a_flipped_byte_in_a_checksummed_hdf5_chunk_of_patch_size_is_refused(tmp_path: Path):
    # a 64^3 int16 chunk (512 KiB) is checked by the C Fletcher-32 the slot-direct read uses
    # for chunks up to 768 KiB: intact it reads as h5py does, one flipped byte is refused
    import h5py

    from chunkio.errors import CorruptChunkError

    data = np.random.default_rng(1).integers(-3000, 3000, (1, 64, 64, 64)).astype(np.int16)
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("vol", data=data, chunks=data.shape, fletcher32=True)
        offset = f["vol"].id.get_chunk_info(0).byte_offset
    key = (0, 10, 20, 30)
    (item,) = PatchDataset(str(path), (16, 16, 16), fields=["vol"]).__getitems__([key])
    np.testing.assert_array_equal(np.asarray(item["image"]), data[0, 10:26, 20:36, 30:46])
    with open(path, "r+b") as fh:
        fh.seek(offset + 1000)
        byte = fh.read(1)
        fh.seek(offset + 1000)
        fh.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(CorruptChunkError, match="fletcher32") as info:
        PatchDataset(str(path), (16, 16, 16), fields=["vol"]).__getitems__([key])
    assert "v.h5" in str(info.value)


def _cache(ds: PatchDataset, kind: str) -> Any:
    return ds._core(0).patches._caches[kind]


def test_the_cache_grows_to_its_bound_once_reads_come_back_to_chunks(volume):
    # with cache_bytes a process keeps decoded chunks past the batch that read them once it
    # has decoded one chunk twice: then batches coming back to chunks decode nothing; the
    # slots never outnumber the volume's chunks (3 x 2 x 2), whatever the bytes
    path, image, _ = volume
    ds = PatchDataset(path, SIZE, cache_bytes=1 << 20)
    first, other = [(0, 0, 0, 0)], [(0, 5, 4, 3)]  # chunk (0, 0, 0); chunks (1..2, 1, 0..1)
    for keys in (first, other):
        ds.read_patches(keys)
    assert _cache(ds, "image").capacity == 4  # the batch's chunks: nothing decoded twice yet
    ds.read_patches(first)
    assert _cache(ds, "image").capacity == _cache(ds, "label").capacity == 12
    ds.read_patches(other)
    before = ds.read_stats().chunks_read
    for keys in (first, other, first):
        got = ds.read_patches(keys)
    assert ds.read_stats().chunks_read == before
    np.testing.assert_array_equal(got["image"][0], image[:4, :4, :4])
    # without cache_bytes (the default) the last batch's chunks only
    plain = PatchDataset(path, SIZE)
    for keys in (first, other, first, other):
        plain.read_patches(keys)
    assert _cache(plain, "image").capacity == 4


def test_the_pool_grows_within_the_room_its_batch_can_touch(volume):
    # the pool reserves what a batch's patches can touch (2 patches of 4^3 in chunks of 4^3:
    # 8 chunks each, but the volume has 12), so a later batch needing more chunks takes more
    # slots of the same memory, not a new buffer written afresh
    path, image, label = volume
    ds = PatchDataset(path, SIZE)
    # off the chunk grid (a grid patch sharing no chunk is read past the pool): 2 chunks
    ds.read_patches([(0, 0, 0, 1), (0, 0, 0, 2)])
    cache = _cache(ds, "image")
    room = cache.buffer.base
    assert cache.capacity == 2 and room is not None and len(room) == 12
    keys = [(0, 3, 2, 1), (0, 5, 4, 3)]  # 8 chunks, and 4 of which 2 are new: 10
    got = ds.read_patches(keys)
    assert cache.capacity == len(cache.buffer) == 10 and cache.buffer.base is room
    for j, (_, *origin) in enumerate(keys):
        np.testing.assert_array_equal(got["image"][j], reference(image, origin, "constant", 0))
        np.testing.assert_array_equal(got["label"][j], reference(label, origin, "constant", 0))


def test_a_chunk_aligned_grid_keeps_the_cache_at_a_batchs_chunks(volume):
    # each chunk read once (patches of a chunk's size at chunk corners): a cache would only
    # cost the first writes of its memory, so it stays at the batch's two chunks
    path, image, _ = volume
    ds = PatchDataset(path, SIZE, cache_bytes=1 << 20)
    keys = [(0, z, y, x) for z in (0, 4, 8) for y in (0, 4) for x in (0, 4)]
    for start in range(0, len(keys), 2):
        got = ds.read_patches(keys[start : start + 2])
        assert _cache(ds, "image").capacity == 2
    np.testing.assert_array_equal(got["image"][1], reference(image, (8, 4, 4), "constant", 0))
    assert ds.read_stats().chunks_read == 2 * len(keys)


@pytest.mark.parametrize("slots", [1, 3, 5])
def test_the_cache_never_holds_more_than_its_bound(volume, slots):
    # cache_bytes buys the same slots for every kind (image int16 and label uint8 chunks of
    # 4^3: 192 bytes a chunk); a batch needing more chunks than that grows it to the batch's
    # need, never past it; every patch stays NumPy's slice
    path, image, label = volume
    ds = PatchDataset(path, SIZE, cache_bytes=slots * 192 + 100)
    keys = np.random.default_rng(slots).integers((0, -2, -2, -2), (1, 8, 7, 6), (40, 4))
    bound = slots
    for start in range(0, len(keys), 2):
        batch = keys[start : start + 2].tolist()
        got = ds.read_patches(batch)
        bound = max(bound, len(plan_patch_reads(np.asarray(batch), SIZE, ds.volumes).chunks))
        for kind, array, one in (("image", image, 128), ("label", label, 64)):
            cache = _cache(ds, kind)
            assert len(cache) <= cache.capacity <= bound
            assert cache.buffer.nbytes == cache.capacity * one
            for j, (_, *origin) in enumerate(batch):
                np.testing.assert_array_equal(got[kind][j], reference(array, origin, "constant", 0))
    assert ds.read_stats().cache_hits > 0


def test_several_stores_share_one_cache_budget(volume):
    path, image, _ = volume
    ds = PatchDataset([path, path], SIZE, cache_bytes=4 * 192)
    got = ds.read_patches([(0, 0, 0, 0), (1, 0, 0, 0)])
    np.testing.assert_array_equal(got["image"][1], image[:4, :4, :4])
    cores = ds._handle().cores  # type: ignore[union-attr]
    assert [c.cache_bytes for c in cores] == [2 * 192, 2 * 192]


def test_patches_on_the_chunk_grid_are_read_past_the_pool_into_their_rows(volume):
    # a patch of whole chunks no other patch of the batch touches is read straight into its
    # row (no pool); one sharing a chunk, or sticking out, keeps the pool; a chunk the pool
    # holds from the last batch is copied, not decoded again; every patch NumPy's slice
    path, image, label = volume
    ds = PatchDataset(path, SIZE, pad_value=-7)
    keys = [(0, 0, 0, 0), (0, 0, 4, 0), (0, 4, 0, 0), (0, 5, 1, 1), (0, 8, 4, 4)]
    out = {
        "image": np.full((len(keys), *SIZE), 12345, np.int16),
        "label": np.full((len(keys), *SIZE), 77, np.uint8),
    }
    got = ds.read_patches(keys, out=out)
    for j, (_, *origin) in enumerate(keys):
        np.testing.assert_array_equal(got["image"][j], reference(image, origin, "constant", -7))
        np.testing.assert_array_equal(got["label"][j], reference(label, origin, "constant", 0))
    stats = ds.read_stats()
    assert stats.direct_chunks == 2 * 2  # the first two patches, image and label
    chunks = len(plan_patch_reads(np.asarray(keys), SIZE, ds.volumes).chunks)
    assert stats.chunks_read == 2 * chunks and stats.cache_hits == 0
    assert len(_cache(ds, "image")) == len(_cache(ds, "label")) == chunks - 2
    ds.read_patches([(0, 4, 0, 0)])  # its chunk is in the pool: a hit, nothing decoded
    after = ds.read_stats()
    assert (after.chunks_read, after.cache_hits, after.direct_chunks) == (2 * chunks, 2, 4)


@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_patches_of_several_chunks_on_the_grid_equal_numpy_in_each_backend(tmp_path, suffix):
    # 8^3 patches of 4^3 chunks on the grid, local files: each read as one box into its row
    # of a dirty batch (the Zarr engine decodes each chunk aside and copies it into place)
    rng = np.random.default_rng(3)
    image = rng.integers(-3000, 30000, (12, 8, 16)).astype(np.int16)
    np.save(tmp_path / "img.npy", image)
    path = str(tmp_path / f"v{suffix}")
    convert_volumes(
        [str(tmp_path / "img.npy")],
        path,
        output=Output(chunks=CHUNKS),
        execution=Execution(workers=1, progress=False),
    )
    ds = PatchDataset(path, (8, 8, 8))
    keys = [(0, 4, 0, 8), (0, 0, 0, 0), (0, 4, 0, 0)]
    out = {"image": np.full((3, 8, 8, 8), 12345, np.int16)}
    got = ds.read_patches(keys, out=out)
    for j, (_, z, y, x) in enumerate(keys):
        np.testing.assert_array_equal(got["image"][j], image[z : z + 8, y : y + 8, x : x + 8])
    # the first patch alone, whole; the other two share chunks: the pool
    assert ds.read_stats().direct_chunks == 8
    # a volume's short last chunk (z 4..6 of 6, x 4..7 of 7: stored padded to 4^3) as a
    # patch of its valid part: straight into the row too
    small = image[:6, :8, :7].copy()
    np.save(tmp_path / "small.npy", small)
    convert_volumes(
        [str(tmp_path / "small.npy")],
        str(tmp_path / f"small{suffix}"),
        output=Output(chunks=CHUNKS),
        execution=Execution(workers=1, progress=False),
    )
    edge = PatchDataset(str(tmp_path / f"small{suffix}"), (2, 4, 3))
    got = edge.read_patches([(0, 4, 4, 4)], out={"image": np.full((1, 2, 4, 3), 9, np.int16)})
    np.testing.assert_array_equal(got["image"][0], small[4:6, 4:8, 4:7])
    assert edge.read_stats().direct_chunks == 1


@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_stores_of_two_dtypes_read_into_one_batch_of_the_wider(tmp_path, suffix):
    # int16 and uint16 volumes make an int32 batch: whole chunks are decoded aside and cast,
    # never decoded as raw bytes into the wider slot or row (once a false CorruptChunkError)
    rng = np.random.default_rng(4)
    images = [
        rng.integers(-3000, 3000, (8, 8, 8)).astype(np.int16),
        rng.integers(40000, 60000, (8, 8, 8)).astype(np.uint16),
    ]
    paths = []
    for i, image in enumerate(images):
        np.save(tmp_path / f"img{i}.npy", image)
        paths.append(str(tmp_path / f"v{i}{suffix}"))
        convert_volumes(
            [str(tmp_path / f"img{i}.npy")],
            paths[-1],
            output=Output(chunks=CHUNKS),
            execution=Execution(workers=1, progress=False),
        )
    ds = PatchDataset(paths, SIZE)
    assert ds.dtypes["image"] == np.int32
    # on the grid (straight into the rows), then across chunks (through the pool)
    for keys in ([(0, 0, 4, 0), (1, 4, 0, 4)], [(0, 1, 2, 3), (1, 3, 2, 1)]):
        got = ds.read_patches(keys)["image"]
        for j, (v, z, y, x) in enumerate(keys):
            np.testing.assert_array_equal(got[j], images[v][z : z + 4, y : y + 4, x : x + 4])


def test_a_grid_patch_read_again_soon_goes_through_the_pool_to_be_held(volume):
    # an epoch of few patches: the same grid patch batch after batch is read straight into its
    # row the first time, through the pool the second (a read came back to its chunk), then
    # copied from the pool: decoded twice in all, once more than without the straight path
    # (the price of a chunk read once per epoch never entering the pool)
    path, image, _ = volume
    ds = PatchDataset(path, SIZE, fields=["image"])
    for _ in range(4):
        got = ds.read_patches([(0, 0, 0, 0)])
        np.testing.assert_array_equal(got["image"][0], image[:4, :4, :4])
    stats = ds.read_stats()
    assert (stats.direct_chunks, stats.chunks_read, stats.cache_hits) == (1, 2, 2)
