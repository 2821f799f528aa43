"""Stores written by xarray's ``to_zarr`` (Zarr v2 and v3), read in place.

xarray writes consolidated metadata, names dimensions (``_ARRAY_DIMENSIONS`` in v2,
``dimension_names`` in v3), stores coordinates as 1-D arrays, time as int64 counts and
CF-encoded variables as their stored integers with ``scale_factor`` / ``add_offset`` /
``_FillValue`` attributes. chunkio reads the stored values, as h5py and zarr-python do: it
applies no CF attribute (the test decodes them itself and compares with xarray's decoding).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from foreign_stores import (
    T2M_ENCODING,
    TIMES,
    era5_like,
    snapshot,
    stored,
    xarray_appended,
    xarray_store,
)

import chunkio
from chunkio.errors import FormatError

FIELDS = {"t2m": "t2m", "label": "label"}
FORMATS = [2, 3]


def cf_decode(raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What xarray's decoding does with t2m's attributes, done by the user on a batch."""
    out = raw * T2M_ENCODING["scale_factor"] + T2M_ENCODING["add_offset"]
    return np.where(raw == T2M_ENCODING["_FillValue"], np.nan, out)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_a_to_zarr_store_reads_its_stored_values_in_place(tmp_path: Path, zarr_format: int) -> None:
    path = xarray_store(tmp_path, zarr_format)
    before = snapshot(path)
    ds = chunkio.ChunkDataset(path, fields={**FIELDS, "time": "time"})
    idx = [3, 0, 95, 3, 50]
    batch = ds.read_batch(idx)
    for name in ("t2m", "label", "time"):  # as stored: int16 counts, int64 hours since ...
        np.testing.assert_array_equal(batch[name], stored(path, name)[idx])
    assert batch["t2m"].dtype == np.int16 and batch["time"].dtype == np.int64
    assert batch["t2m"][0, 2, 5] == T2M_ENCODING["_FillValue"]  # the NaN, as stored
    decoded = xr.open_zarr(path, zarr_format=zarr_format)
    np.testing.assert_array_equal(cf_decode(batch["t2m"]), decoded["t2m"].values[idx])
    np.testing.assert_allclose(cf_decode(batch["t2m"]), era5_like()["t2m"].values[idx], atol=0.006)
    np.testing.assert_array_equal(batch["time"], [18, 0, 570, 18, 300])  # hours since the first
    x, y, _ = ds[50]  # tuples in the mapping's order
    assert int(y) == era5_like()["label"].values[50] and tuple(x.shape) == (12, 16)
    assert len(ds) == TIMES and snapshot(path) == before


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_without_fields_the_error_lists_variables_and_coordinates(
    tmp_path: Path, zarr_format: int
) -> None:
    path = xarray_store(tmp_path, zarr_format)
    with pytest.raises(FormatError, match=r"lat \(12,\) float64.*t2m \(96, 12, 16\) int16"):
        chunkio.ChunkDataset(path)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("zarr_format", FORMATS)
def test_dask_chunks_that_split_lat_and_lon_read_with_workers(
    tmp_path: Path, zarr_format: int
) -> None:
    path = xarray_store(tmp_path, zarr_format, chunks={"time": 8, "lat": 5, "lon": 8})
    t2m, labels = stored(path, "t2m"), stored(path, "label")
    ds = chunkio.ChunkDataset(path, fields=FIELDS)
    assert ds.samples_per_chunk == 8  # t2m's chunks, not the labels' one of 96
    rows = {t2m[i].tobytes(): i for i in range(TIMES)}
    assert len(rows) == TIMES
    loader = chunkio.make_loader(
        path, 16, fields=FIELDS, num_workers=2, seed=0, workers=chunkio.Workers(copy=True)
    )
    seen, distinct = [], []
    for x, y in loader:
        got = [rows[np.asarray(row).tobytes()] for row in x]
        np.testing.assert_array_equal(np.asarray(y), labels[got])  # each map with its label
        seen += got
        distinct.append(len(np.unique(np.asarray(y))))
    assert sorted(seen) == list(range(TIMES))
    assert np.mean(distinct) > 4  # the store is sorted by label; batches still mix


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_a_store_appended_along_time_reads_as_one(tmp_path: Path, zarr_format: int) -> None:
    path = xarray_appended(tmp_path, zarr_format)
    whole = xarray_store(tmp_path, zarr_format)  # the same data written in one go
    ds = chunkio.ChunkDataset(path, fields={**FIELDS, "time": "time"})
    assert len(ds) == TIMES
    idx = list(range(TIMES))
    batch = ds.read_batch(idx)
    for name in ("t2m", "label", "time"):
        np.testing.assert_array_equal(batch[name], stored(whole, name))
    np.testing.assert_array_equal(ds.read_batch([39, 40, 47, 48])["label"], [3, 3, 3, 4])
