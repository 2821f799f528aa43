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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin  # noqa: F401 (the LZ4 filter chunkio's HDF5 files are written with)
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import chunkio
from chunkio import ChunkDataset, Output, write_arrays
from chunkio.errors import ChunkioError, FormatError

N, COLS, SPC = 40, 30, 8
Change = Callable[[np.ndarray[Any, Any]], None]


def _matrix() -> sp.csr_matrix:
    return sp.random(N, COLS, density=0.2, format="csr", dtype=np.float32, random_state=1)


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


def corrupt(src: Path, dst_dir: Path, array: str, change: Change) -> Path:
    """A copy of the store ``src`` whose ``array`` is rewritten after ``change`` (in place on
    its values), through zarr-python or h5py: its checksums recomputed."""
    dst = dst_dir / src.name
    if src.is_dir():
        shutil.copytree(src, dst)
        a = zarr.open_array(dst / array, mode="r+")
        values = a[...]
        change(values)
        a[...] = values
    else:
        shutil.copy(src, dst)
        with h5py.File(dst, "r+") as f:
            values = f[array][...]
            change(values)
            f[array][...] = values
    return dst


def read_every_row(ds: ChunkDataset, batch: int = 5) -> list[Any]:
    return [
        ds.__getitems__(list(range(a, min(a + batch, len(ds))))) for a in range(0, len(ds), batch)
    ]


def _set(index: Any, value: Any) -> Change:
    def change(v: np.ndarray[Any, Any]) -> None:
        v[index] = value

    return change


def _add(index: Any, delta: int) -> Change:
    def change(v: np.ndarray[Any, Any]) -> None:
        v[index] += delta

    return change


def _swap(i: int, j: int) -> Change:
    def change(v: np.ndarray[Any, Any]) -> None:
        v[[i, j]] = v[[j, i]]

    return change


#: (array, change, what the message says after "sparse field 'x' (...): ")
SPARSE_CASES = [
    pytest.param("x__offsets", _set(5, 10**4), "sample 5 lies at [10000, ", id="offset-past"),
    pytest.param("x__offsets", _set(5, -3), "sample 5 lies at [-3, ", id="offset-negative"),
    pytest.param("x__offsets", _set(5, 2**31), "sample 5 lies at [2147483648, ", id="offset-2^31"),
    pytest.param(
        "x__offsets", _set(5, 2**40), "sample 5 lies at [1099511627776, ", id="offset-2^40"
    ),
    pytest.param("x__offsets", _set(5, 1), "sample 5 starts at 1, not where", id="decreasing"),
    pytest.param("x__offsets", _set(-1, 10**4), "the last offset is 10000", id="last-past"),
    pytest.param(
        "x__offsets", _set(SPC, 3), f"sample {SPC} (the first of sample chunk 1)", id="chunk-head"
    ),
    pytest.param("x__offsets", _swap(5, 6), "sample 5 starts at", id="rows-swapped"),
    pytest.param("x__shapes", _set((5, 0), -3), "sample 5 has shape (-3,)", id="count-negative"),
    pytest.param("x__shapes", _set((5, 0), 2**31), "2.15e+09 values", id="count-2^31"),
    pytest.param("x__shapes", _set((5, 0), 2**40), "1.1e+12 values", id="count-2^40"),
    pytest.param("x__shapes", _add((5, 0), 2), "sample 6 starts at", id="count-into-next"),
    pytest.param("x__shapes", _add((5, 0), -1), "sample 6 starts at", id="count-short"),
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
