"""Metadata and foreign chunks that zarr-python or a mistyped document would turn into untyped
exceptions (RELIABILITY rows 28 and 34; the fuzzer's findings on metadata and backends).

Each store is made through the public API, then damaged the way the fuzzer damages it: a
field of an array's ``zarr.json`` replaced by a value of the wrong type or size, or a chunk
cut short behind zarr-python's back. It is read with 0 workers and through
``make_loader(num_workers=2)``: the same typed error class both ways, naming the store and
the array (and the document's key, or the chunk).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anndata_files
import numpy as np
import pytest
from corrupt_stores import read_every_row
from PIL import Image

import chunkio
from chunkio.errors import ChunkioError, CorruptChunkError, FormatError

Edit = Callable[[dict[str, Any]], None]


def _put(path: tuple[Any, ...], value: Any) -> Edit:
    """The document's value at ``path`` (keys and list positions) replaced by ``value``."""

    def edit(doc: dict[str, Any]) -> None:
        node: Any = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A dense store (``x`` 50 x 4 float32, ``y``) and a JPEG store (encoded ``image``)."""
    root = tmp_path_factory.mktemp("meta")
    quiet = chunkio.Execution(workers=1, progress=False)
    x = np.arange(200, dtype="f4").reshape(50, 4)
    chunkio.write_arrays(
        root / "dense.zarr", {"x": x, "y": np.arange(50)}, output=chunkio.Output(chunks=8),
        execution=quiet,
    )  # fmt: skip
    src = root / "src" / "c0"
    src.mkdir(parents=True)
    for i in range(6):
        pixels = np.random.default_rng(i).integers(0, 255, (24, 16, 3), np.uint8)
        Image.fromarray(pixels).save(src / f"{i}.png")
    chunkio.convert_images(
        root / "src", root / "jpeg.zarr", images=chunkio.ImageOptions(encoding="jpeg"),
        output=chunkio.Output(chunks=4), execution=quiet,
    )  # fmt: skip
    return {"dense": root / "dense.zarr", "jpeg": root / "jpeg.zarr"}


def _edited(src: Path, tmp_path: Path, array: str, edit: Edit) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    document = dst / array / "zarr.json"
    doc = json.loads(document.read_text())
    edit(doc)
    document.write_text(json.dumps(doc))
    return dst


def _both_ways(path: Path, kind: type[ChunkioError], fields: Any = None) -> list[ChunkioError]:
    """The error reading every row gives, with 0 workers and with 2 (the same ``kind``)."""
    caught = []
    with pytest.raises(kind) as zero:
        read_every_row(chunkio.ChunkDataset(str(path), fields=fields), batch=64)
    caught.append(zero.value)
    with warnings.catch_warnings(), pytest.raises(kind) as two:
        warnings.simplefilter("ignore")  # torch's notes on forking workers
        list(chunkio.make_loader(str(path), 64, fields=fields, shuffle=False, num_workers=2))
    caught.append(two.value)
    return caught


GRID = ("chunk_grid", "configuration", "chunk_shape")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("store", "array", "edit", "says"),
    [
        # the fuzzer's 0:128: a dict of image__shapes' zarr.json replaced by an int
        ("jpeg", "image__shapes", _put(("codecs", 0), 7), "'codecs'[0] must be an object"),
        ("jpeg", "image__shapes", _put(("chunk_grid",), 7), "'chunk_grid' must be an object"),
        ("jpeg", "image__spans", _put(("chunk_key_encoding",), 3), "'chunk_key_encoding' must"),
        ("jpeg", "image__bytes", _put(("codecs",), 7), "'codecs' must be a list; got 7"),
        ("dense", "x", _put(("codecs", 1), "zstd"), "'codecs'[1] must be an object"),
        ("dense", "x", _put(("shape",), "50"), "'shape' must be a list of integers >= 0"),
        # a chunk of 0 (a ZeroDivisionError in the read plan) and of 2**40 (32 TiB allocated)
        ("dense", "x", _put((*GRID, 1), 0), "'chunk_shape' must be a list of integers >= 1"),
        ("dense", "x", _put((*GRID, 1), 2**40), "at most 2147483648 expected"),
        ("dense", "y", _put((*GRID,), [8, 1]), "one size per axis of the shape [50]"),
    ],
)
def test_a_mistyped_zarr_json_is_a_format_error_naming_array_and_key(
    stores: dict[str, Path], tmp_path: Path, store: str, array: str, edit: Edit, says: str
) -> None:
    path = _edited(stores[store], tmp_path, array, edit)
    for error in _both_ways(path, FormatError):
        assert f"{path}: array {array!r} (zarr.json): " in str(error)
        assert says in str(error)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


@pytest.mark.timeout(240)
def test_a_truncated_categories_chunk_is_a_corrupt_chunk_error(tmp_path: Path) -> None:
    """The fuzzer's 0:47: an AnnData categorical's ``categories`` (read by zarr-python)
    cut short: zarr-python's ``RuntimeError: Zstd decompression error`` becomes a
    CorruptChunkError naming the store and the array."""
    cell = anndata_files.zarr_store(tmp_path, 3)
    column = anndata_files.CATEGORICAL[0]
    chunk = cell.path / "obs" / column / "categories" / "c" / "0"
    _truncate(chunk)
    for error in _both_ways(cell.path, CorruptChunkError, cell.fields(column)):
        assert f"array 'obs/{column}/categories'" in str(error)
        assert str(cell.path) in str(error)


def _flip_until(path: Path, fails: Callable[[Path], bool]) -> Path:
    """A copy of the h5ad ``path`` with one byte flipped: the first (of every 97th) that
    makes ``fails`` true, so the test needs no offsets of this h5py's file layout."""
    data = path.read_bytes()
    dst = path.with_name("flipped.h5ad")
    for pos in range(0, len(data), 97):
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        dst.write_bytes(bytes(flipped))
        if fails(dst):
            return dst
    raise AssertionError("no flipped byte of the file makes h5py's walk fail")


def _walk_fails(path: Path) -> bool:
    """h5py's own walk of the file raises RuntimeError (as on a damaged object header)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: None)
    except RuntimeError:
        return True
    except Exception:  # other damage: not the case this test is about
        return False
    return False


@pytest.mark.timeout(240)
def test_an_h5ad_h5py_cannot_walk_is_a_format_error_naming_the_file(tmp_path: Path) -> None:
    """The fuzzer's flipped h5ad byte: h5py's ``RuntimeError: Object visitation failed``
    while the layout is read becomes a FormatError naming the file, both ways."""
    cell = anndata_files.h5ad(tmp_path)
    path = _flip_until(cell.path, _walk_fails)
    for error in _both_ways(path, FormatError):
        assert str(path) in str(error) and "RuntimeError" in str(error)


@pytest.mark.timeout(240)
def test_listing_the_arrays_of_an_hdf5_file_h5py_cannot_walk_is_a_format_error(
    tmp_path: Path,
) -> None:
    """The same flipped byte through the backend's own listing (``chunkio info``, foreign
    fields), not only through the layout's: a FormatError naming the file."""
    from chunkio.backends import open_reader

    cell = anndata_files.h5ad(tmp_path)
    path = _flip_until(cell.path, _walk_fails)
    reader = open_reader(str(path))
    try:
        with pytest.raises(FormatError, match="its arrays cannot be listed") as info:
            reader.array_names()
    finally:
        reader.close()
    assert str(path) in str(info.value) and isinstance(info.value.__cause__, RuntimeError)
