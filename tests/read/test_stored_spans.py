"""Where each ragged and encoded sample lies, as stored, checked before it sizes a read
(RELIABILITY row 34): ``__offsets`` and ``__shapes`` of a ragged field, ``__spans`` and
``__shapes`` of an encoded one.

Images are converted through the public API (raw pixels of mixed sizes: a ragged field; PNG
of mixed sizes and JPEG of one size: encoded fields), then one of those arrays is rewritten
through zarr-python or h5py (checksums recomputed) the way a hostile file would have it. The
checks of :mod:`chunkio.format.grid` are run on the arrays as the field readers read them:
each corruption is a :class:`~chunkio.errors.FormatError` naming the file, the field and the
sample; every intact store passes. The readers call the same checks when they open a field
(``read/ragged.py``, ``read/encoded.py``): the end-to-end table below says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from corrupt_stores import Change, add_to, corrupt, read_every_row, set_to, swap
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from chunkio import ChunkDataset, Execution, ImageOptions, Output, convert_images
from chunkio.backends import open_reader
from chunkio.backends.base import read_all
from chunkio.convert.engine.ragged import RaggedPlan
from chunkio.errors import FormatError
from chunkio.format.grid import (
    MAX_IMAGE_PIXELS,
    SampleGrid,
    checked_encoded,
    checked_ragged,
)
from chunkio.format.layout import FieldInfo
from chunkio.format.store_layout import open_layout

SPC = 4


case = pytest.param


@pytest.fixture(scope="module")
def image_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """22 images in chunks of 4: ``raw`` (ragged, mixed sizes), ``png`` (encoded, mixed
    sizes) and ``jpeg`` (encoded, all 3 x 12 x 10), in Zarr and HDF5."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(5)
    src = root / "src"
    for i, (h, w) in enumerate(rng.integers(3, 12, size=(22, 2)).tolist()):
        (src / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(src / f"c{i % 2}" / f"{i:03d}.png")
    out = {}
    for encoding, size in (("raw", None), ("png", None), ("jpeg", (12, 10))):
        for fmt, suffix in (("zarr", "zarr"), ("hdf5", "h5")):
            out[f"{encoding}-{fmt}"] = dst = root / f"{encoding}.{suffix}"
            convert_images(
                src, dst, shuffle=False, size=size, images=ImageOptions(encoding=encoding),
                output=Output(chunks=SPC, format=fmt),
                execution=Execution(workers=1, progress=False),
            )  # fmt: skip
    return out


def check_as_the_reader_does(path: Path) -> None:
    """The checks a field reader makes when it opens the store's ``image`` field: its arrays
    read whole through chunkio's reader, the values (or bytes) array's length and chunks."""
    reader = open_reader(path)
    try:
        layout = open_layout(reader).layout
        info = layout.field("image")
        flat, where_is, shapes = info.array_names()
        flat_info = reader.array_info(flat)
        total, chunk = int(flat_info.shape[0]), int(flat_info.chunks[0])
        grid = SampleGrid(layout.num_samples, layout.samples_per_chunk)
        where = f"{path}: field 'image'"
        placed, shaped = read_all(reader, where_is), read_all(reader, shapes)
    finally:
        reader.close()
    if info.kind == "ragged":
        checked_ragged(placed, shaped, grid, chunk, total, where=where)
    else:
        checked_encoded(
            placed, shaped, grid, chunk, total,
            sample_shape=info.sample_shape, encoding=str(info.encoding), where=where,
        )  # fmt: skip


def test_every_intact_store_passes(image_stores: dict[str, Path]) -> None:
    for path in image_stores.values():
        check_as_the_reader_does(path)


#: (store, array, change, what the message says after "field 'image': ")
CASES = [
    case("raw", "image__offsets", set_to(5, 10**6), "sample 5 lies at [1000000,", id="r-past"),
    case("raw", "image__offsets", set_to(5, -3), "sample 5 lies at [-3,", id="r-negative"),
    case(
        "raw", "image__offsets", set_to(5, 2**40), "sample 5 lies at [1099511627776,", id="r-2^40"
    ),
    case("raw", "image__offsets", set_to(5, 1), "sample 5 starts at 1,", id="r-decreasing"),
    case("raw", "image__offsets", swap(5, 6), "sample 5 starts at", id="r-swapped"),
    case("raw", "image__offsets", set_to(-1, 10**9), "the last offset is", id="r-last"),
    case("raw", "image__shapes", set_to((5, 1), 0), "sample 6 starts at", id="r-zero-side"),
    case("raw", "image__shapes", set_to((5, 1), -2), "a side below 0", id="r-negative-side"),
    case("raw", "image__shapes", set_to((5, 2), 10**12), "values, more than", id="r-1e12"),
    case("raw", "image__shapes", set_to(5, [2**21, 2**21, 2**22]), "1.84e+19 values", id="r-wraps"),
    case("raw", "image__shapes", add_to((5, 1), 1), "sample 6 starts at", id="r-grown"),
    case("png", "image__spans", set_to((5, 1), 10**9), "sample 5 has the bytes", id="e-past"),
    case("png", "image__spans", set_to((5, 0), -3), "sample 5 has the bytes [-3,", id="e-neg"),
    case("png", "image__spans", set_to(5, [2**40, 2**40 + 9]), "[1099511627776,", id="e-2^40"),
    case("png", "image__spans", add_to((5, 1), -1), "sample 6 starts at", id="e-short"),
    case("png", "image__spans", swap(5, 6), "sample 5 starts at", id="e-swapped"),
    case("png", "image__spans", set_to(5, [0, 1]), "sample 5 starts at 0", id="e-other"),
    case("png", "image__shapes", set_to((5, 1), 0), "has shape (3, 0,", id="e-zero-side"),
    case("png", "image__shapes", set_to((5, 0), 7), "has shape (7,", id="e-channels"),
    case("png", "image__shapes", set_to((5, 2), 10**12), "sides 1..", id="e-1e12"),
    case(
        "png",
        "image__shapes",
        set_to(5, [3, 2**14, 2**14]),
        f"most {MAX_IMAGE_PIXELS}",
        id="e-bomb",
    ),
    case("jpeg", "image__shapes", set_to((5, 1), 11), "declares every sample", id="e-fixed"),
    case("jpeg", "image__shapes", set_to((5, 2), 70_000), "sides 1..65535", id="e-jpeg-side"),
]


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize(("store", "array", "change", "says"), CASES)
def test_corrupt_placement_is_a_format_error_naming_file_field_and_sample(
    image_stores: dict[str, Path],
    tmp_path: Path,
    fmt: str,
    store: str,
    array: str,
    change: Change,
    says: str,
) -> None:
    path = corrupt(image_stores[f"{store}-{fmt}"], tmp_path, array, change)
    with pytest.raises(FormatError) as caught:
        check_as_the_reader_does(path)
    assert str(caught.value).startswith(f"{path}: field 'image': sample ") or "last offset" in says
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("store", "array", "change", "says"),
    [p for p in CASES if p.id in ("r-past", "r-zero-side", "e-other", "e-1e12")],
)
def test_a_dataset_refuses_the_same_placements(
    image_stores: dict[str, Path], tmp_path: Path, store: str, array: str, change: Change, says: str
) -> None:
    path = corrupt(image_stores[f"{store}-zarr"], tmp_path, array, change)
    with pytest.raises(FormatError, match=r"field 'image'") as caught:
        read_every_row(ChunkDataset(path, fields=["image"]), batch=4)
    assert says in str(caught.value)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), max_size=40),
    spc=st.integers(1, 9),
    group=st.integers(1, 4),
    ndim=st.integers(1, 3),
    data=st.data(),
)
def test_every_placement_the_writer_makes_passes_and_a_moved_sample_does_not(
    sizes: list[int], spc: int, group: int, ndim: int, data: st.DataObject
) -> None:
    """The writer's placements (:class:`~chunkio.convert.engine.ragged.RaggedPlan`, sharded
    in groups or not) all pass; moving any sample but a chunk's first by one value does not."""
    grid = SampleGrid(len(sizes), spc)
    shapes = np.ones((len(sizes), ndim), np.int64)
    shapes[:, 0] = sizes
    plan = RaggedPlan.build(FieldInfo("x", np.dtype("f4"), None, "ragged"), shapes, grid, group)
    stops = checked_ragged(plan.offsets, shapes, grid, plan.chunk_len, plan.num_values, where="x")
    np.testing.assert_array_equal(stops, plan.offsets[:-1] + sizes)
    inner = [i for i in range(len(sizes)) if i % spc]
    if inner:
        i = data.draw(st.sampled_from(inner))
        moved = plan.offsets.copy()
        moved[i] += data.draw(st.sampled_from([-1, 1]))
        # a sample moved before the first value is outside the values; elsewhere, off its place
        with pytest.raises(FormatError, match=rf"^x: sample {i} (starts at|lies at)"):
            checked_ragged(moved, shapes, grid, plan.chunk_len, plan.num_values, where="x")
