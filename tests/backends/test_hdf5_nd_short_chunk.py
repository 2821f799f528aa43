"""A chunk of an N-D chunked HDF5 volume rewritten to decode short (RELIABILITY row 33).

A ``(70, 64, 40)`` int16 volume in chunks of ``(32, 32, 32)`` (edge chunks along axes 0 and 2)
has one chunk replaced by the stored bytes h5py writes for a chunk of half as many rows, with
the same filters (its fletcher32 valid, as h5py computed it over the filtered bytes): only the
decoded size is wrong. libhdf5 would hand back the rest of that chunk as heap bytes; chunkio's
box reads (``read_region``: patches; rows of a volume chunked across other axes) raise
:class:`~chunkio.errors.CorruptChunkError` naming the array and the chunk, locally, through
HTTP and through ``PatchDataset`` with 0 and 2 workers, and read every other box exactly as
h5py reads the intact file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
from torch.utils.data import DataLoader

from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.hdf5.remote import RemoteHDF5Reader
from chunkio.errors import CorruptChunkError
from chunkio.patches import GridSampler, PatchDataset
from chunkio.read.batch import collate
from chunkio.testing.servers import http_server_factory_fixture  # noqa: F401 (fixture)

SHAPE, CHUNK = (70, 64, 40), (32, 32, 32)
INTERIOR, CORNER = (0, 1, 0), (2, 1, 1)  # a whole chunk; the partial chunk at the far corner


def _filters(codec: str) -> dict[str, Any]:
    return {
        "none": {},
        "gzip": {"compression": "gzip", "compression_opts": 4},
        "lz4": {"compression": hdf5plugin.LZ4()},
        "zstd": {"compression": hdf5plugin.Zstd(clevel=3)},
        "blosc": {"compression": hdf5plugin.Blosc(cname="lz4", clevel=5)},
    }[codec]


def _volume() -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(4)
    return rng.integers(-2000, 2000, SHAPE).astype(np.int16)


def _write(path: Path, codec: str, *, fletcher32: bool, shuffle: bool) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=_volume(), chunks=CHUNK, fletcher32=fletcher32,
                         shuffle=shuffle, **_filters(codec))  # fmt: skip


def _damage(
    path: Path, bad: tuple[int, ...], codec: str, *, fletcher32: bool, shuffle: bool
) -> None:
    """Chunk ``bad`` of ``path`` replaced by h5py's stored chunk of half its rows."""
    half = np.ones((CHUNK[0] // 2, *CHUNK[1:]), np.int16)
    with h5py.File(path.with_name("half.h5"), "w") as f:
        f.create_dataset("x", data=half, chunks=half.shape, fletcher32=fletcher32,
                         shuffle=shuffle, **_filters(codec))  # fmt: skip
        mask, stored = f["x"].id.read_direct_chunk((0, 0, 0))
    with h5py.File(path, "r+") as f:
        offset = tuple(x * c for x, c in zip(bad, CHUNK, strict=True))
        f["v"].id.write_direct_chunk(offset, stored, mask)


def _boxes(rng: np.random.Generator, n: int) -> list[tuple[slice, ...]]:
    boxes = [tuple(slice(0, s) for s in SHAPE), (slice(20, 45), slice(30, 34), slice(31, 40))]
    for _ in range(n):
        lo = [int(rng.integers(0, s)) for s in SHAPE]
        boxes.append(
            tuple(slice(a, int(rng.integers(a + 1, s + 1))) for a, s in zip(lo, SHAPE, strict=True))
        )
    return boxes


def _touches(box: tuple[slice, ...], chunk: tuple[int, ...]) -> bool:
    return all(
        s.start < (x + 1) * c and x * c < s.stop for s, x, c in zip(box, chunk, CHUNK, strict=True)
    )


def _read(reader: Any, box: tuple[slice, ...]) -> np.ndarray[Any, Any]:
    out = np.full([s.stop - s.start for s in box], 7, np.int16)
    reader.read_region("v", box, out)
    return out


def _expect_named(err: BaseException, bad: tuple[int, ...]) -> None:
    assert "'v'" in str(err) and f"chunk {bad}" in str(err), str(err)


CASES = [
    ("gzip", True, False, INTERIOR),
    ("gzip", False, True, CORNER),
    ("lz4", True, False, INTERIOR),
    ("lz4", True, True, CORNER),
    ("zstd", True, False, CORNER),
    ("zstd", False, False, INTERIOR),
    ("blosc", True, False, INTERIOR),
    ("none", True, False, CORNER),
    ("none", False, True, INTERIOR),
]


@pytest.mark.parametrize(
    ("codec", "fletcher32", "shuffle", "bad"),
    CASES,
    ids=[f"{c}-f{int(f)}-s{int(s)}-{b}" for c, f, s, b in CASES],
)
def test_boxes_touching_a_short_chunk_are_corrupt_chunks_the_rest_exact(
    tmp_path: Path, codec: str, fletcher32: bool, shuffle: bool, bad: tuple[int, ...]
) -> None:
    intact = tmp_path / "intact.h5"
    _write(intact, codec, fletcher32=fletcher32, shuffle=shuffle)
    damaged = tmp_path / "damaged.h5"
    shutil.copy(intact, damaged)
    _damage(damaged, bad, codec, fletcher32=fletcher32, shuffle=shuffle)
    reader, reference = HDF5Reader(str(damaged)), HDF5Reader(str(intact), raw_chunks=False)
    try:
        assert reader.read_path("v") == "raw"
        boxes = _boxes(np.random.default_rng(len(codec)), 40)
        bad_box = tuple(
            slice(x * c + 1, min((x + 1) * c, s)) for x, c, s in zip(bad, CHUNK, SHAPE, strict=True)
        )
        for box in [b for b in boxes if _touches(b, bad)] + [bad_box]:
            with pytest.raises(CorruptChunkError) as info:
                _read(reader, box)
            _expect_named(info.value, bad)
        good = [b for b in boxes if not _touches(b, bad)]
        assert len(good) >= 10
        for box in good:
            np.testing.assert_array_equal(_read(reader, box), _read(reference, box))
        rows = np.empty((CHUNK[0], *SHAPE[1:]), np.int16)  # whole samples: boxes of rows
        with pytest.raises(CorruptChunkError) as info:
            reader.read_into("v", [(bad[0] * CHUNK[0], min(SHAPE[0], (bad[0] + 1) * CHUNK[0]))],
                             rows[: min(CHUNK[0], SHAPE[0] - bad[0] * CHUNK[0])])  # fmt: skip
        _expect_named(info.value, bad)
    finally:
        reader.close()
        reference.close()


@pytest.mark.timeout(120)
def test_over_http_the_same_chunk_is_refused(tmp_path: Path, http_server_factory: Any) -> None:
    path = tmp_path / "d.h5"
    _write(path, "zstd", fletcher32=True, shuffle=False)
    _damage(path, INTERIOR, "zstd", fletcher32=True, shuffle=False)
    server = http_server_factory(tmp_path)
    reader = RemoteHDF5Reader(f"{server.url}/d.h5")
    try:
        assert reader.read_path("v") == "remote raw"
        with pytest.raises(CorruptChunkError) as info:
            _read(reader, (slice(10, 40), slice(20, 50), slice(0, 40)))
        _expect_named(info.value, INTERIOR)
        box = (slice(10, 70), slice(0, 30), slice(5, 40))
        np.testing.assert_array_equal(_read(reader, box), _volume()[box])
    finally:
        reader.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [0, 2])
def test_patch_loaders_raise_it_with_0_and_2_workers(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "d.h5"
    _write(path, "lz4", fletcher32=True, shuffle=False)
    _damage(path, CORNER, "lz4", fletcher32=True, shuffle=False)
    ds = PatchDataset(path, (16, 16, 16), fields=["v"], sampler=GridSampler(edge="pad"))
    keys = list(ds.sampler)
    outside = [k for k in keys if not (k[1] >= 64 and 32 <= k[2] < 64 and k[3] >= 32)]
    got = ds.read_patches(outside)
    for b, key in enumerate(outside):
        box = tuple(slice(o, min(o + 16, s)) for o, s in zip(key[1:], SHAPE, strict=True))
        part = tuple(slice(0, s.stop - s.start) for s in box)
        np.testing.assert_array_equal(np.asarray(got["image"][b])[part], _volume()[box])
    loader = DataLoader(ds, sampler=keys, batch_size=8, num_workers=workers, collate_fn=collate,
                        timeout=120 if workers else 0)  # fmt: skip
    with pytest.raises(CorruptChunkError) as info:
        for _ in loader:
            pass
    _expect_named(info.value, CORNER)
