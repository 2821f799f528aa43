"""The per-process read core (``chunkio.read.core.ReadCore``) on real stores: which field a
transform reaches and with which epoch, the decode threads, the counters, the undecoded bytes
of an encoded field, and prefetch hints, each against the source arrays or Pillow."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chunkio import ChunkDataset, Execution, ImageOptions, convert_images
from chunkio.errors import MissingFieldError
from chunkio.read.core import ReadCore


class Recorder:
    """A field transform that negates a dense image and records each key and thread."""

    def __init__(self, field: str, seed: int = 5) -> None:
        self.field = field
        self.seed = seed
        self.keys: list[tuple[int, int, int]] = []
        self.threads: set[str] = set()

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        return input_shape

    def apply(self, image: np.ndarray, out: np.ndarray, key: tuple[int, int, int]) -> None:
        self.keys.append(key)
        self.threads.add(threading.current_thread().name)
        out[...] = 255 - image


def _core(path: str | Path, **kw: Any) -> ReadCore:
    return ReadCore(str(path), ChunkDataset(path).layout, **kw)


@pytest.fixture
def dense(make_dataset: Any) -> tuple[str, dict[str, np.ndarray]]:
    return make_dataset("zarr", samples_per_chunk=8)  # type: ignore[no-any-return]


def test_a_transform_reaches_its_field_only_keyed_by_seed_epoch_and_index(dense: Any) -> None:
    path, arrays = dense
    core = _core(path)
    t = Recorder("image")
    idx = [40, 5, 17, 5]
    got = core.read(["image", "label"], idx, transform=t, epoch=3)
    np.testing.assert_array_equal(got["image"], 255 - arrays["image"][idx])
    np.testing.assert_array_equal(got["label"], arrays["label"][idx])  # untouched
    assert sorted(t.keys) == sorted((5, 3, i) for i in idx)
    t.keys.clear()
    core.read(["image"], [1], transform=t)
    assert t.keys == [(5, 0, 1)]  # the epoch defaults to 0
    other = Recorder("label")
    plain = core.read(["image"], [1, 2], transform=other)["image"]
    np.testing.assert_array_equal(plain, arrays["image"][[1, 2]])
    assert other.keys == []
    core.close()


def test_decode_threads_run_the_per_sample_work(dense: Any) -> None:
    path, _ = dense
    one = _core(path)
    t = Recorder("image")
    one.read(["image"], list(range(0, 40, 3)), transform=t)
    assert t.threads == {threading.current_thread().name}  # one thread: the caller's
    one.close()
    two = _core(path, decode_threads=2)
    t = Recorder("image")
    two.read(["image"], list(range(0, 40, 3)), transform=t)
    assert t.threads and all(n.startswith("chunkio-decode") for n in t.threads)
    two.close()


def test_defaults_read_nothing_ahead_and_keep_no_extra_chunks(dense: Any) -> None:
    path, _ = dense
    core = _core(path)
    assert (core.ctx.cache_chunks, core.ctx.preload_bytes, core.cache_bytes) == (0, 0, 0)
    assert core.threads.count == 1
    core.read(["image"], [0])
    assert core.stats.chunks_read == 1  # not preloaded whole
    core.close()


def test_counters_add_up_over_reads(dense: Any) -> None:
    path, _ = dense
    core = _core(path)
    core.read(["image", "label"], [3, 9, 1])
    core.read(["image"], [4, 4])
    core.read(["label"], [])
    assert (core.stats.samples, core.stats.batches) == (5, 3)
    core.close()


def test_without_once_the_chunks_stay_for_the_next_read(dense: Any) -> None:
    path, _ = dense
    core = _core(path)
    core.read(["image"], list(range(8)))  # one whole chunk, in order
    core.read(["image"], [3])
    assert core.stats.chunks_read == 1 and core.stats.cache_hits == 1
    core.close()


def test_an_unknown_field_names_the_dataset(dense: Any) -> None:
    path, _ = dense
    core = _core(path)
    with pytest.raises(MissingFieldError, match=rf"^{path}: no field 'nope'"):
        core.read(["nope"], [0])
    with pytest.raises(IndexError, match=rf"^{path}: "):
        core.read(["image"], [10_000])
    core.close()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_prefetch_is_a_hint_a_local_dataset_ignores(make_dataset: Any, fmt: str) -> None:
    path, _ = make_dataset(fmt, samples_per_chunk=8)
    core = _core(path)
    core.prefetch(["image"], [10_000, -10_000])  # not even looked at
    assert core.stats.chunks_read == 0
    core.close()


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    src = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(0)
    pixels = []
    for i in range(12):
        (src / f"c{i % 2}").mkdir(exist_ok=True)
        px = rng.integers(0, 255, (10 + i, 12, 3), dtype=np.uint8)
        Image.fromarray(px).save(src / f"c{i % 2}" / f"{i:02d}.jpg", quality=90)
        pixels.append(px)
    dst = tmp_path_factory.mktemp("store") / "j.zarr"
    convert_images(
        src,
        dst,
        shuffle=False,
        images=ImageOptions(encoding="jpeg"),
        execution=Execution(progress=False, workers=1),
    )
    return dst, pixels


def test_encoded_bytes_come_back_undecoded_in_the_asked_order(jpegs: Any) -> None:
    dst, _ = jpegs
    core = _core(str(dst))
    idx = [7, 2, -1, 2]
    data, shapes = core.encoded("image", idx)
    decoded = core.read(["image"], idx)["image"]
    assert len(data) == 4 and shapes.dtype == np.int64
    for blob, shape, pixels in zip(data, shapes.tolist(), decoded, strict=True):
        assert blob.dtype == np.uint8 and bytes(blob[:2]) == b"\xff\xd8"  # a JPEG
        with Image.open(io.BytesIO(bytes(blob))) as im:
            assert (im.height, im.width, len(im.getbands())) == (*shape[1:], shape[0])
        assert tuple(pixels.shape) == tuple(shape)
    assert bytes(data[1]) == bytes(data[3])
    with pytest.raises(IndexError):
        core.encoded("image", [12])
    with pytest.raises(TypeError, match=rf"^{dst}: field 'label' is dense, not an encoded image"):
        core.encoded("label", [0])
    core.close()
    ds = ChunkDataset(dst, fields=("image", "label"))
    again, _ = ds.read_encoded([7], "image")
    assert bytes(again[0]) == bytes(data[0])
