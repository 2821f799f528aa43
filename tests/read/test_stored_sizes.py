"""Stored sizes, offsets, spans and shapes are checked before they size a read or an
allocation (RELIABILITY rows 29, 31 and 34).

A store is written through the public API, then one of the arrays that say where each sample
lies is rewritten the way a hostile or damaged file would have it (through zarr-python and
h5py, so checksums stay valid): offsets past the values, decreasing, negative, 2**31 and
2**40; counts and shapes below 0, of 2**40 or that wrap around; spans of other samples.
Every row read then gives exact data or a :class:`~chunkio.errors.FormatError` naming the
file, the field and the sample: never other rows' values, an untyped exception or a
``MemoryError``, with 0 workers as with 2, dense batches as CSR ones.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from corrupt_stores import Change, add_to, corrupt, read_every_row, set_to, swap

import chunkio
from chunkio import ChunkDataset, Output, write_arrays
from chunkio.errors import ChunkioError, FormatError
from chunkio.format.cf import cf_coding
from chunkio.format.layout import DatasetLayout

N, COLS, SPC = 40, 30, 8


def _matrix() -> sp.csr_matrix:
    return sp.random(N, COLS, density=0.2, format="csr", dtype=np.float32, random_state=1)


case = pytest.param


@pytest.fixture(scope="module")
def sparse_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A native sparse field ``x`` (with a dense ``d``) in chunks of 8 rows, Zarr and HDF5."""
    root = tmp_path_factory.mktemp("sparse")
    dense = np.arange(N * 4, dtype=np.float32).reshape(N, 4)
    out = {}
    for fmt, suffix in (("zarr", "zarr"), ("hdf5", "h5")):
        out[fmt] = root / f"s.{suffix}"
        write_arrays(
            out[fmt],
            {"x": _matrix(), "d": dense},
            shuffle=False,
            output=Output(chunks=SPC, format=fmt),
        )
    return out


#: (array, change, what the message says after "sparse field 'x' (...): ")
SPARSE_CASES = [
    case("x__offsets", set_to(5, 10**4), "sample 5 lies at [10000, ", id="offset-past"),
    case("x__offsets", set_to(5, -3), "sample 5 lies at [-3, ", id="offset-negative"),
    case("x__offsets", set_to(5, 2**31), "sample 5 lies at [2147483648, ", id="offset-2^31"),
    case("x__offsets", set_to(5, 2**40), "sample 5 lies at [1099511627776, ", id="offset-2^40"),
    case("x__offsets", set_to(5, 1), "sample 5 starts at 1, not where", id="decreasing"),
    case("x__offsets", set_to(-1, 10**4), "the last offset is 10000", id="last-past"),
    case(
        "x__offsets", set_to(SPC, 3), f"sample {SPC} (the first of sample chunk 1)", id="chunk-head"
    ),
    case("x__offsets", swap(5, 6), "sample 5 starts at", id="rows-swapped"),
    case("x__shapes", set_to((5, 0), -3), "sample 5 has shape (-3,)", id="count-negative"),
    case("x__shapes", set_to((5, 0), 2**31), "2.15e+09 values", id="count-2^31"),
    case("x__shapes", set_to((5, 0), 2**40), "1.1e+12 values", id="count-2^40"),
    case("x__shapes", add_to((5, 0), 2), "sample 6 starts at", id="count-into-next"),
    case("x__shapes", add_to((5, 0), -1), "sample 6 starts at", id="count-short"),
]


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("batches", ["dense", "csr"])
@pytest.mark.parametrize(("array", "change", "says"), SPARSE_CASES)
def test_corrupt_native_sparse_placement_is_a_format_error_naming_file_field_and_sample(
    sparse_stores: dict[str, Path],
    tmp_path: Path,
    fmt: str,
    batches: str,
    array: str,
    change: Change,
    says: str,
) -> None:
    path = corrupt(sparse_stores[fmt], tmp_path, array, change)
    ds = ChunkDataset(path, fields=["x", "d"], sparse_batches=batches)
    with pytest.raises(FormatError) as caught:
        read_every_row(ds)
    message = str(caught.value)
    assert message.startswith(f"{path}: sparse field 'x' ('x__offsets', 'x__shapes'): ")
    assert says in message


def test_an_intact_native_store_reads_scipys_rows_dense_and_csr(
    sparse_stores: dict[str, Path],
) -> None:
    """The checks refuse nothing chunkio writes: every row is scipy's, both ways."""
    want = _matrix()
    for path in sparse_stores.values():
        dense = ChunkDataset(path, fields=["x"]).read_batch(list(range(N)))["x"]
        np.testing.assert_array_equal(dense, want.toarray())
        csr = ChunkDataset(path, fields=["x"], sparse_batches="csr").read_batch(list(range(N)))
        np.testing.assert_array_equal(csr["x"].toarray(), want.toarray())


def _loader_error(path: Path, batches: str) -> BaseException:
    ds = ChunkDataset(path, fields=["x", "d"], sparse_batches=batches)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on workers and sparse tensors
        loader = chunkio.make_loader(ds, 5, shuffle=False, num_workers=2)
        with pytest.raises(ChunkioError) as caught:
            list(loader)
    return caught.value


@pytest.mark.timeout(240)
@pytest.mark.parametrize("batches", ["dense", "csr"])
@pytest.mark.parametrize(
    ("array", "change", "says"),
    [p for p in SPARSE_CASES if p.id in ("offset-2^40", "count-into-next")],
)
def test_two_workers_give_the_verdict_of_none(
    sparse_stores: dict[str, Path],
    tmp_path: Path,
    batches: str,
    array: str,
    change: Change,
    says: str,
) -> None:
    path = corrupt(sparse_stores["zarr"], tmp_path, array, change)
    with pytest.raises(FormatError) as alone:
        read_every_row(ChunkDataset(path, fields=["x", "d"], sparse_batches=batches))
    err = _loader_error(path, batches)
    assert isinstance(err, FormatError)
    assert says in str(alone.value)
    assert str(alone.value) in str(err)  # the worker's own message, whole


def test_a_native_sparse_shape_too_large_to_densify_is_refused_at_construction(
    sparse_stores: dict[str, Path], tmp_path: Path
) -> None:
    """``sample_shape: [10**12]`` in the layout: dense batches would be sized by it; CSR
    batches are not (the stored columns are checked against it on read)."""
    path = tmp_path / "s.zarr"
    shutil.copytree(sparse_stores["zarr"], path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["chunkio"])
    meta["fields"] = {**meta["fields"], "x": {**meta["fields"]["x"], "sample_shape": [10**12]}}
    group.attrs["chunkio"] = meta
    with pytest.raises(FormatError, match=rf"^{path}: sparse field 'x' has 1000000000000 col"):
        ChunkDataset(path, fields=["x"])
    got = ChunkDataset(path, fields=["x"], sparse_batches="csr").read_batch([3, 7])["x"]
    want = _matrix()[[3, 7]]
    assert got.shape == (2, 10**12)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize(
    ("field", "spec", "says"),
    [
        ("d", {"sample_shape": [-4]}, "sample_shape must hold sizes >= 0"),
        ("x", {"sample_shape": [-1]}, "sample_shape must hold sizes >= 0"),
    ],
)
def test_a_negative_declared_shape_is_refused_when_the_dataset_is_made(
    sparse_stores: dict[str, Path], tmp_path: Path, field: str, spec: dict[str, Any], says: str
) -> None:
    path = tmp_path / "s.zarr"
    shutil.copytree(sparse_stores["zarr"], path)
    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs["chunkio"])
    meta["fields"] = {**meta["fields"], field: {**meta["fields"][field], **spec}}
    group.attrs["chunkio"] = meta
    with pytest.raises(FormatError, match=rf"^{path}: field '{field}': {says}"):
        ChunkDataset(path)


def _attrs(field: dict[str, Any]) -> dict[str, Any]:
    return {
        "chunkio": {
            "format": "chunkio",
            "version": 1,
            "num_samples": 4,
            "samples_per_chunk": 2,
            "fields": {"image": field},
        },
        "chunkio_complete": True,
    }


@pytest.mark.parametrize(
    "shape", [[3, 10**6, 10**6], [3, 70_000, 8], [9, 8, 8], [3, 0, 8], [3, 8], [3, 8, 8, 1]]
)
def test_a_declared_image_shape_that_no_image_has_is_refused_before_it_sizes_a_batch(
    shape: list[int],
) -> None:
    spec = {"dtype": "|u1", "sample_shape": shape, "kind": "encoded", "encoding": "jpeg"}
    with pytest.raises(FormatError, match=r"^x: field 'image': sample_shape \[.*no image shape"):
        DatasetLayout.from_attrs(_attrs(spec), where="x")
    spec["sample_shape"] = [3, 8, 8]
    layout = DatasetLayout.from_attrs(_attrs(spec), where="x")
    assert layout.field("image").sample_shape == (3, 8, 8)


def test_a_cf_missing_value_list_is_bounded() -> None:
    """Each missing value is a pass over every batch: a list of a million is refused (and
    its message shortened), a short one decodes."""
    many = list(range(10**6))
    with pytest.raises(FormatError, match=r"'missing_value' .*at most 64\).*got \[0, 1, 2, 3"):
        cf_coding({"missing_value": many}, np.dtype("i2"), "t2m", "x")
    assert cf_coding({"missing_value": [1, 2]}, np.dtype("i2"), "t2m", "x").fills == (1.0, 2.0)


def test_chunks_longer_than_the_array_size_no_cache_beyond_it(tmp_path: Path) -> None:
    """Array metadata may declare chunks of more rows than the array holds (Zarr allows it):
    a dense field's and a sparse field's caches hold the array, no more."""
    path = tmp_path / "long.zarr"
    group = zarr.open_group(path, mode="w")
    values = np.arange(30, dtype=np.float32).reshape(10, 3)
    group.create_array("a", shape=(10, 3), chunks=(1000, 3), dtype="f4")[...] = values
    ds = ChunkDataset(path, fields=["a"], preload_bytes=0)
    np.testing.assert_array_equal(ds.read_batch([9, 0, 4])["a"], values[[9, 0, 4]])
    assert ds._handle().field("a").cache.rows_per_chunk == 10  # type: ignore[attr-defined]
    m = _matrix()
    x = zarr.open_group(path / "x", mode="w")
    x.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": m.shape})
    for part, chunk in (("data", 10**6), ("indices", 10**6), ("indptr", 1000)):
        array = getattr(m, part)
        x.create_array(part, shape=array.shape, chunks=(chunk,), dtype=array.dtype)[...] = array
    sparse = ChunkDataset(path, fields={"x": "x"})
    np.testing.assert_array_equal(sparse.read_batch([3, 1])["x"], m.toarray()[[3, 1]])
    field = sparse._handle().field("x")
    assert field.data.cache.rows_per_chunk == m.nnz  # type: ignore[attr-defined]
    assert field.indices.cache.rows_per_chunk == m.nnz  # type: ignore[attr-defined]
