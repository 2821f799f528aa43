"""CF decoding on read (``Decoding(cf=True)``): packed variables come back as xarray decodes them.

Stores written by xarray's ``to_zarr`` with an int16 encoding (Zarr v2 and v3) are compared
with ``xr.open_zarr``'s decoded values, for plain fields and window fields (three variables,
each with its own scale and offset, stacked as channels), in this process, in DataLoader
workers and in ring workers; a netCDF4-style HDF5 file (attributes written by h5py) with the
NumPy decoding. Off by default; malformed attributes are a typed error at construction.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
import xarray as xr
import zarr
from foreign_stores import xarray_store

import chunkio
from chunkio import ChunkDataset, Decoding, Field
from chunkio.errors import FormatError

VARS = ("t2m", "u10", "v10")
#: each variable packed its own way (t2m masked where it was NaN)
ENCODINGS = {
    "t2m": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768},
    "u10": {"dtype": "int16", "scale_factor": 0.002, "add_offset": -1.5, "_FillValue": -32767},
    "v10": {"dtype": "int16", "scale_factor": 0.005, "_FillValue": 32767},
}
T = 40


def _quiet() -> Any:
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
    return ctx


def weather(tmp_path: Path, zarr_format: int) -> Path:
    """Three packed variables ``(T, 3, 4)``, time chunks of 3, some NaN (fill values)."""
    rng = np.random.default_rng(3)
    data = {
        "t2m": rng.normal(285, 8, (T, 3, 4)),
        "u10": rng.normal(0, 5, (T, 3, 4)),
        "v10": rng.normal(0, 5, (T, 3, 4)),
    }
    data["t2m"][[4, 17], 1, 2] = np.nan
    data["v10"][9, 0, 0] = np.nan
    ds = xr.Dataset(
        {k: (("time", "lat", "lon"), v.astype("float32")) for k, v in data.items()},
        coords={"time": np.arange(T)},
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"packed{zarr_format}.zarr"
    encoding = {k: {**e, "chunks": (3, 3, 4)} for k, e in ENCODINGS.items()}
    ctx = _quiet()
    try:
        ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding, mode="w")
    finally:
        ctx.__exit__(None, None, None)
    return path


def decoded(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """xarray's decoding of every variable (the reference)."""
    ctx = _quiet()
    try:
        opened = xr.open_zarr(path)
        return {k: np.asarray(opened[k].values) for k in (*VARS, "time") if k in opened}
    finally:
        ctx.__exit__(None, None, None)


def dataset(path: Path, fields: Any, **kw: Any) -> ChunkDataset:
    ctx = _quiet()
    try:
        return ChunkDataset(path, fields=fields, **kw)
    finally:
        ctx.__exit__(None, None, None)


def close(a: Any, b: Any) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_plain_field_decodes_as_xarray_does(tmp_path: Path, zarr_format: int) -> None:
    path = xarray_store(tmp_path, zarr_format)
    ctx = _quiet()
    try:
        want = np.asarray(xr.open_zarr(path).t2m.values)
    finally:
        ctx.__exit__(None, None, None)
    ds = dataset(path, {"t2m": "t2m", "label": "label"}, decoding=Decoding(cf=True))
    idx = [3, 0, 95, 3, 50]
    batch = ds.read_batch(idx)
    assert batch["t2m"].dtype == np.float32 and ds.batch_fields()["t2m"][0] == np.float32
    close(batch["t2m"], want[idx])
    assert np.isnan(batch["t2m"][0, 2, 5]) and np.isnan(want[3, 2, 5])  # the fill value
    assert batch["label"].dtype == np.int64  # no CF attributes: as stored
    off = dataset(path, {"t2m": "t2m"}).read_batch(idx)["t2m"]
    assert off.dtype == np.int16  # off by default


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_stacked_window_variables_each_decode_with_their_own_attributes(
    tmp_path: Path, zarr_format: int
) -> None:
    path = weather(tmp_path, zarr_format)
    want = decoded(path)
    ds = dataset(path, [Field(list(VARS), steps=range(-1, 1)), Field("u10", steps=[2])],
                 decoding=Decoding(cf=True))  # fmt: skip
    batch = ds.read_batch(np.arange(len(ds)))
    x, y = batch[ds.fields[0]], batch["u10"]
    anchors = ds.anchors
    assert anchors is not None and x.dtype == np.float32
    ref = np.stack([np.stack([want[v][anchors + s] for v in VARS], 1) for s in (-1, 0)], 1)
    close(x, ref)
    close(y, want["u10"][anchors + 2][:, None])  # the step axis
    assert np.isnan(x).sum() == np.isnan(ref).sum() > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("transport", ["ring", "dataloader"])
def test_workers_decode_as_this_process_does(tmp_path: Path, transport: str) -> None:
    path = weather(tmp_path, 3)
    want = decoded(path)
    ds = dataset(path, [Field(list(VARS), steps=[0, 1]), "time"], decoding=Decoding(cf=True))
    workers = chunkio.Workers(copy=True, transport=transport)
    loader = chunkio.make_loader(ds, 8, num_workers=2, workers=workers)
    seen = []
    try:
        assert loader.transport == transport
        for x, t in loader:
            anchors = np.asarray(t)
            ref = np.stack([np.stack([want[v][anchors + s] for v in VARS], 1) for s in (0, 1)], 1)
            assert x.dtype == torch.float32
            close(x, ref)
            seen += anchors.tolist()
    finally:
        loader.close()
    assert sorted(seen) == list(range(T - 1))


def netcdf_like(tmp_path: Path, **attrs: Any) -> Path:
    """An HDF5 file as netCDF4 writes a packed variable: attributes on the dataset."""
    path = tmp_path / "packed.h5"
    raw = np.arange(-5, 55, dtype=np.int16).reshape(20, 3)
    raw[4, 1] = -32767
    raw[7, 0] = -1
    with h5py.File(path, "w") as f:
        d = f.create_dataset("t2m", data=raw, chunks=(4, 3))
        for k, v in attrs.items():
            d.attrs[k] = v
    return path


def test_netcdf4_style_hdf5_attributes_decode(tmp_path: Path) -> None:
    path = netcdf_like(
        tmp_path,
        scale_factor=np.float32(0.5),
        add_offset=np.float32(10.0),
        _FillValue=np.array([-32767], np.int16),
        missing_value=np.array([-1, -2], np.int16),
        units="K",
    )
    raw = np.arange(-5, 55, dtype=np.int16).reshape(20, 3)
    raw[4, 1], raw[7, 0] = -32767, -1
    want = np.where(np.isin(raw, [-32767, -1, -2]), np.nan, raw * np.float32(0.5) + 10)
    ds = dataset(path, ["t2m"], decoding=Decoding(cf=True))
    got = ds.read_batch(np.arange(20))["t2m"]
    assert got.dtype == np.float32
    close(got, want)
    assert np.isnan(got).sum() == 4  # the fill value and both missing values


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({"scale_factor": "abc"}, "'scale_factor' must be a finite number"),
        ({"add_offset": [1.0, 2.0]}, "'add_offset'"),
        ({"scale_factor": float("inf")}, "finite"),
        ({"_FillValue": "not base64!"}, "'_FillValue' must be a number or NaN"),
        ({"scale_factor": 0.1, "_Unsigned": "true"}, "_Unsigned"),
    ],
)
def test_a_malformed_attribute_is_a_typed_error_at_construction(
    tmp_path: Path, attrs: dict[str, Any], words: str
) -> None:
    path = tmp_path / "bad.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array("t2m", shape=(6, 2), chunks=(2, 2), dtype="int16")
    a[...] = 1
    a.attrs.update(attrs)
    with pytest.raises(FormatError, match="t2m") as err:
        dataset(path, ["t2m"], decoding=Decoding(cf=True))
    assert words in str(err.value)
    assert dataset(path, ["t2m"]).read_batch([0])["t2m"].dtype == np.int16  # off: as stored


def test_an_unreadable_hdf5_attribute_type_is_a_typed_error(tmp_path: Path) -> None:
    path = netcdf_like(tmp_path, scale_factor=np.bytes_(b"0.5"))
    with pytest.raises(FormatError, match="scale_factor"):
        dataset(path, ["t2m"], decoding=Decoding(cf=True))


def test_stats_of_a_decoded_dataset_are_of_the_decoded_values(tmp_path: Path) -> None:
    """``compute_stats`` of a ``decode_cf`` dataset: per variable, NaN (fill values) left out,
    as ``np.nanmean`` / ``np.nanstd`` of xarray's decoding; ``Normalize`` then centres it."""
    path = weather(tmp_path, 3)
    want = decoded(path)
    ds = dataset(path, [Field(list(VARS), steps=[0, 1])], decoding=Decoding(cf=True))
    stats = chunkio.compute_stats(ds).fields[ds.fields[0]]
    ref = [want[v].astype(np.float64) for v in VARS]
    np.testing.assert_allclose(stats["mean"], [np.nanmean(r) for r in ref], rtol=1e-5)
    np.testing.assert_allclose(stats["std"], [np.nanstd(r) for r in ref], rtol=1e-5)


def test_float_arrays_with_only_a_nan_fill_value_come_back_as_stored(tmp_path: Path) -> None:
    """xarray gives every float array a NaN ``_FillValue`` (Zarr v3): nothing to decode."""
    path = tmp_path / "floats.zarr"
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    ctx = _quiet()
    try:
        xr.Dataset({"x": (("t", "c"), x)}).to_zarr(path, zarr_format=3, mode="w")
    finally:
        ctx.__exit__(None, None, None)
    assert "_FillValue" in dict(zarr.open_group(path)["x"].attrs)
    ds = dataset(path, ["x"], decoding=Decoding(cf=True))
    assert ds.layout.field("x").cf is None
    np.testing.assert_array_equal(ds.read_batch([4, 1])["x"], x[[4, 1]])


def test_decode_cf_reads_one_store_not_a_list_of_files(tmp_path: Path) -> None:
    """Files may pack a variable differently (a scale_factor per file): refused, not guessed."""
    paths = [weather(tmp_path / str(k), 3) for k in range(2)]
    with pytest.raises(FormatError, match=r"Decoding\(cf=True\) reads one store, not 2 files"):
        dataset(paths, ["t2m"], decoding=Decoding(cf=True))
