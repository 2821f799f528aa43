"""An encoded field's stored spans and shapes are checked before they size anything
(RELIABILITY row 34): a span past the bytes or a non-positive shape is refused at open, a
shape that is not its image's header at the read, each with a typed error naming the field
and the row; never a MemoryError, an untyped ValueError or another sample's pixels."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image

import chunkio
from chunkio.errors import CorruptChunkError, FormatError
from chunkio.images import jpeg
from chunkio.transforms import Compose, RandomResizedCrop


@pytest.fixture(scope="module", params=["jpeg", "yuv420", "png"])
def pristine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four colour images of different heights (no declared sample shape), converted once per
    encoding; tests damage copies of it (:func:`store`)."""
    root = tmp_path_factory.mktemp(f"pristine-{request.param}")
    src = root / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(4):
        pixels = np.random.default_rng(i).integers(0, 255, (40 + 8 * i, 64, 3), np.uint8)
        Image.fromarray(pixels).save(src / f"{i}.png")
    chunkio.convert_images(
        root / "src",
        root / "d.zarr",
        images=chunkio.ImageOptions(encoding=request.param),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    return root / "d.zarr"


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    """A copy of :func:`pristine` of this test's own, to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "d.zarr"))


def _set(path: Path, name: str, row: int, value: list[int]) -> None:
    array = zarr.open_group(str(path), mode="r+")[name]
    array[row] = value  # written through zarr: its checksum is recomputed, the value is wrong


def _read(path: Path, transform: Compose | None, indices: list[int]) -> None:
    dataset = chunkio.ChunkDataset(str(path), fields="image", transform=transform)
    dataset.__getitems__(indices)


@pytest.mark.parametrize("transform", [None, Compose([RandomResizedCrop(16)])])
@pytest.mark.parametrize("shape", [[3, 8, 192], [1, 56, 64], [4, 56, 64], [3, 56, 65_535]])
def test_a_shape_that_is_not_the_header_is_a_typed_error(
    store: Path, monkeypatch: pytest.MonkeyPatch, transform: Compose | None, shape: list[int]
) -> None:
    """Sample 0 stored as 56x64 RGB; the shapes array claims another image the encoding could
    hold: CorruptChunkError naming the field and sample, on the region and the whole-image
    paths, before anything is allocated by the claim."""
    _set(store, "image__shapes", 0, shape)
    _read(store, transform, [1, 2])  # the others are still read
    for region in (True, False):
        monkeypatch.setattr(jpeg, "REGION_DECODE", region)
        with pytest.raises(CorruptChunkError, match=r"field 'image', sample 0 .*header says 56x64"):
            _read(store, transform, [1, 0])


#: the field's arrays, as every message names them
ARRAYS = r"field 'image' \('image__spans', 'image__shapes'\): "


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("image__spans", [0, 10**9], r"sample 2 has the bytes \[0, 1000000000\): expected 0 <="),
        ("image__spans", [-5, 3], r"sample 2 has the bytes \[-5, 3\)"),
        ("image__spans", [30, 20], r"sample 2 has the bytes \[30, 20\)"),
        ("image__shapes", [3, 0, 64], r"sample 2 has shape \(3, 0, 64\): expected \(channels 1-4"),
        ("image__shapes", [-3, 56, 64], r"sample 2 has shape \(-3, 56, 64\)"),
        ("image__shapes", [3, 2**31, 2**32], r"sample 2 has shape \(3, 2147483648, 4294967296\)"),
        ("image__shapes", [3, 10**12, 1], r"sample 2 has shape \(3, 1000000000000, 1\)"),
        ("image__shapes", [3, 2**14, 2**14], r"sample 2 .* at most 178956970 pixels"),
    ],
)
def test_spans_and_shapes_outside_their_bounds_are_refused_at_open(
    store: Path, name: str, value: list[int], match: str
) -> None:
    """Refused when the field is opened (a dataset's first read), whatever is read."""
    _set(store, name, 2, value)
    with pytest.raises(FormatError, match=ARRAYS + match):
        _read(store, None, [0])


def test_a_declared_sample_shape_bounds_every_row(tmp_path: Path) -> None:
    """Images of one size: the field declares (3, 32, 32); a row claiming another image
    shape is refused at open, before its bytes' header is read."""
    src = tmp_path / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((32, 32, 3), 40 * i, np.uint8)).save(src / f"{i}.png")
    path = tmp_path / "d.zarr"
    chunkio.convert_images(
        tmp_path / "src",
        path,
        images=chunkio.ImageOptions(encoding="jpeg"),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    _read(path, None, [0, 1, 2])
    _set(path, "image__shapes", 1, [3, 64, 64])  # an image JPEG can hold, not the field's
    with pytest.raises(
        FormatError, match=r"sample 1 has .*; the field declares every sample \(3, 32, 32\)"
    ):
        _read(path, None, [0])
