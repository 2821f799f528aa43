"""Every read mode against NumPy indexing of the source arrays.

The reference is never chunkio itself: ``arrays[name][indices]`` for dense fields, the pixels
written to the image files for ragged and encoded fields, a NumPy slice of the padded volume for
patches. Index lists are drawn to hit what a loader sends: unsorted, duplicated, negative, and
whole chunks in storage order placed anywhere in the batch beside stray samples (the ``once``
path decodes those chunks straight into the batch and gathers the rest).
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkio import ChunkDataset, Execution, ImageOptions, Output, convert_images, write_arrays

#: conversions here run quietly
QUIET = Execution(progress=False)

_ids = itertools.count()
DTYPES = st.sampled_from(["uint8", "int16", "int64", "float32", "bool"])
#: cache_bytes: none (every batch decodes its chunks again) or enough for every chunk
CACHES = st.sampled_from([0, 1 << 20])


@st.composite
def batch_indices(draw: st.DrawFn, n: int, spc: int) -> list[int]:
    """An index list made of pieces in random order: whole chunks in storage order (the
    ``once`` fast path), single samples (also negative), and repeats of earlier pieces."""
    chunks = -(-n // spc)
    pieces: list[list[int]] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["chunk", "sample", "sample", "repeat"]))
        if kind == "chunk":
            c = draw(st.integers(0, chunks - 1))
            pieces.append(list(range(c * spc, min(n, (c + 1) * spc))))
        elif kind == "sample":
            pieces.append([draw(st.integers(-n, n - 1))])
        elif pieces:
            pieces.append(list(draw(st.sampled_from(pieces))))
    order = draw(st.permutations(range(len(pieces))))
    return [i for k in order for i in pieces[k]]


@st.composite
def dense_cases(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], int, list[list[int]]]:
    n = draw(st.integers(1, 50))
    spc = draw(st.integers(1, 12))
    fields = {
        "a": draw(hnp.arrays(draw(DTYPES), (n, *draw(hnp.array_shapes(min_dims=0, max_dims=2))))),
        "b": draw(hnp.arrays(np.int32, (n,), elements=st.integers(-1000, 1000))),
    }
    batches = draw(st.lists(batch_indices(n, spc), min_size=1, max_size=3))
    return fields, spc, batches


def _assert_dense(ds: ChunkDataset, fields: dict[str, np.ndarray], batches, once: bool) -> None:
    """Each batch (read one after the other on one handle, so cached chunks are reused)
    equals NumPy indexing, bit for bit; with ``once`` a batch whose samples repeat is still
    exact (a reader may not assume more than it was promised)."""
    for indices in batches:
        got = ds.read_batch(indices, once=once)
        for name, arr in fields.items():
            want = arr[np.asarray(indices, dtype=np.int64)]
            assert got[name].dtype == want.dtype, name
            assert got[name].shape == want.shape, name
            assert got[name].tobytes() == want.tobytes(), (name, indices)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_cases(), st.booleans(), CACHES, st.sampled_from([0, 1 << 20]))
def test_dense_reads_equal_numpy_indexing(case, once, cache_bytes, preload_bytes) -> None:
    """Every dense read mode: once on/off x decoded-chunk cache on/off x read from chunks or
    preloaded whole."""
    fields, spc, batches = case
    path = f"memory://reference-{next(_ids)}"
    write_arrays(path, fields, shuffle=False, output=Output(chunks=spc), execution=QUIET)
    ds = ChunkDataset(path, cache_bytes=cache_bytes, preload_bytes=preload_bytes)
    _assert_dense(ds, fields, batches, once)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_cases(), st.booleans(), CACHES, st.sampled_from([".zarr", ".h5"]))
def test_dense_reads_on_disk_equal_numpy_indexing(case, once, cache_bytes, suffix) -> None:
    fields, spc, batches = case
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / f"d{suffix}")
        write_arrays(path, fields, shuffle=False, output=Output(chunks=spc), execution=QUIET)
        ds = ChunkDataset(path, cache_bytes=cache_bytes, preload_bytes=0)
        _assert_dense(ds, fields, batches, once)


@pytest.mark.parametrize("cache_bytes", [0, 1 << 20])
@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_once_gathers_the_samples_around_whole_chunks_in_batch_order(
    tmp_path: Path, suffix: str, cache_bytes: int
) -> None:
    """The batch a shuffled epoch sends: samples out of order around one whole chunk (16..31,
    decoded straight into the batch); the others are gathered in batch order, not sorted."""
    arrays = {"x": np.arange(64 * 3, dtype=np.int64).reshape(64, 3) * 7 - 5}
    path = str(tmp_path / f"d{suffix}")
    write_arrays(path, arrays, shuffle=False, output=Output(chunks=16), execution=QUIET)
    ds = ChunkDataset(path, cache_bytes=cache_bytes, preload_bytes=0)
    for indices in ([40, 5, *range(16, 32), 3], [63, *range(0, 16), 2, 2, -1, 33]):
        for once in (True, False):
            got = ds.read_batch(indices, once=once)["x"]
            np.testing.assert_array_equal(got, arrays["x"][indices], err_msg=f"{indices} {once}")


# -- ragged and encoded image fields -----------------------------------------------------------


def _image_folder(root: Path, sizes: list[tuple[int, int]], seed: int) -> list[np.ndarray]:
    """PNG files (lossless) in two class folders; the pixels, CHW, in the order the
    converter stores them unshuffled (by class folder, then file name)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    stored = []
    for i, (h, w) in enumerate(sizes):
        pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        folder = root / f"c{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(folder / f"{i:03d}.png")
        stored.append((f"c{i % 2}", f"{i:03d}", pixels.transpose(2, 0, 1)))
    return [p for *_, p in sorted(stored, key=lambda s: s[:2])]


@pytest.fixture(scope="module")
def image_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A ragged field (images of mixed sizes, raw pixels) and an encoded one (PNG), in chunks
    of 4 samples, each with the pixels of its stored rows."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    mixed = [(int(h), int(w)) for h, w in rng.integers(3, 12, size=(22, 2))]
    stores: dict[str, Any] = {}
    for kind, sizes, encoding in (("ragged", mixed, "raw"), ("encoded", [(9, 7)] * 22, "png")):
        src = root / f"src-{kind}"
        pixels = _image_folder(src, sizes, seed=len(kind))
        dst = root / f"{kind}.zarr"
        convert_images(
            src, dst, shuffle=False, size=None, images=ImageOptions(encoding=encoding),
            output=Output(chunks=4), execution=Execution(workers=1, progress=False),
        )  # fmt: skip
        stores[kind] = (dst, pixels)
    return stores


@pytest.mark.parametrize("kind", ["ragged", "encoded"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), once=st.booleans(), cache_bytes=CACHES)
def test_image_fields_equal_the_source_pixels(image_stores, kind, data, once, cache_bytes) -> None:
    dst, pixels = image_stores[kind]
    ds = ChunkDataset(dst, fields=("image", "label"), cache_bytes=cache_bytes)
    assert ds.layout.field("image").kind == kind
    n = len(pixels)
    for indices in data.draw(st.lists(batch_indices(n, 4), min_size=1, max_size=3)):
        got = ds.read_batch(indices, once=once)
        assert len(got["image"]) == len(indices)
        for row, i in zip(got["image"], indices, strict=True):
            np.testing.assert_array_equal(np.asarray(row), pixels[i])
        # labels: class folders c0, c1 in sorted order, the first 11 stored rows are c0
        np.testing.assert_array_equal(got["label"], [int(i % n >= 11) for i in indices])


# -- patches ------------------------------------------------------------------------------------


def _padded_patch(volume: np.ndarray, origin: tuple[int, ...], size: tuple[int, ...]) -> Any:
    pad = [(p, p) for p in size]
    padded = np.pad(volume, pad, mode="constant", constant_values=0)
    return padded[tuple(slice(o + p, o + 2 * p) for o, p in zip(origin, size, strict=True))]


@pytest.fixture(scope="module")
def volume_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[np.ndarray]]:
    from chunkio.convert.volumes import convert_volumes

    root = tmp_path_factory.mktemp("volumes")
    rng = np.random.default_rng(2)
    volumes = [rng.integers(-30000, 30000, s).astype(np.int16) for s in [(9, 7, 6), (5, 8, 7)]]
    files = []
    for i, v in enumerate(volumes):
        files.append(str(root / f"v{i}.npy"))
        np.save(files[-1], v)
    dst = str(root / "v.zarr")
    convert_volumes(
        files, dst, output=Output(chunks=(4, 3, 4)), execution=Execution(workers=1, progress=False)
    )
    return dst, volumes


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    keys=st.lists(
        # origins that overlap both volumes (a patch wholly outside one is refused)
        st.tuples(st.integers(0, 1), st.integers(-2, 4), st.integers(-3, 6), st.integers(-1, 5)),
        min_size=1,
        max_size=12,
    ).flatmap(lambda ks: st.permutations(ks + ks[: len(ks) // 2])),  # with repeats, any order
    cache_bytes=st.sampled_from([0, 1 << 20]),
)
def test_patches_equal_numpy_slices_in_any_order(volume_store, keys, cache_bytes) -> None:
    from chunkio.patches import PatchDataset

    dst, volumes = volume_store
    size = (3, 4, 2)
    ds = PatchDataset(dst, size, fields=["image"], cache_bytes=cache_bytes)
    for batch in (keys, keys[::-1]):  # the second read may reuse cached chunks
        got = ds.read_patches(batch)
        assert got["image"].shape[0] == len(batch)
        for row, (v, *origin) in zip(got["image"], batch, strict=True):
            want = _padded_patch(volumes[v], tuple(origin), size)
            np.testing.assert_array_equal(row.reshape(want.shape), want)
