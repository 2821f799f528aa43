"""Weather-like stores for the window tests, as users' tools write them: xarray's ``to_zarr``
(Zarr v2 and v3), zarr-python v2 and v3 (sharded), h5py, and chunkio's own ``write_arrays``.

Three variables ``(T, 3, 4)`` float32 (``t2m``, ``u10``, ``v10``; each chunked differently
along time where the tool allows it), a ``time`` coordinate (int64 row numbers, so a sample's
anchor is its time), ``level`` data ``(T, 2, 3, 4)`` and a boolean ``ok`` valid-mask.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr
import zarr

T = 60
VARS = ("t2m", "u10", "v10")
CHUNKS = {"t2m": 5, "u10": 3, "v10": 7, "level": 4, "time": 16, "ok": 60}


def arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray[Any, Any]] = {
        v: rng.standard_normal((T, 3, 4)).astype(np.float32) for v in VARS
    }
    out["level"] = rng.standard_normal((T, 2, 3, 4)).astype(np.float32)
    out["time"] = np.arange(T, dtype=np.int64)
    ok = np.ones(T, dtype=bool)
    ok[[20, 41, 42]] = False
    out["ok"] = ok
    return out


def _xarray(tmp_path: Path, zarr_format: int) -> Path:
    a = arrays()
    path = tmp_path / f"xr{zarr_format}.zarr"
    coords = {"time": ("time", a["time"])}
    ds = xr.Dataset(
        {
            **{v: (("time", "lat", "lon"), a[v]) for v in VARS},
            "level": (("time", "plev", "lat", "lon"), a["level"]),
            "ok": (("time",), a["ok"]),
        },
        coords=coords,
    )
    encoding = {k: {"chunks": (CHUNKS[k], *a[k].shape[1:])} for k in (*VARS, "level")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata notes under Zarr v3
        ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding)
    return path


def xarray_v2(tmp_path: Path) -> Path:
    return _xarray(tmp_path, 2)


def xarray_v3(tmp_path: Path) -> Path:
    return _xarray(tmp_path, 3)


def zarr_v2(tmp_path: Path) -> Path:
    path = tmp_path / "zv2.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    for k, v in arrays().items():
        g.create_array(k, shape=v.shape, chunks=(CHUNKS[k], *v.shape[1:]), dtype=v.dtype)[...] = v
    return path


def zarr_v3(tmp_path: Path) -> Path:
    path = tmp_path / "zv3.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    for k, v in arrays().items():
        chunks = (CHUNKS[k], *v.shape[1:])
        shards = (CHUNKS[k] * 4, *v.shape[1:]) if k in VARS else None
        g.create_array(k, shape=v.shape, chunks=chunks, shards=shards, dtype=v.dtype)[...] = v
    return path


def h5py_file(tmp_path: Path) -> Path:
    path = tmp_path / "w.h5"
    with h5py.File(path, "w") as f:
        for k, v in arrays().items():
            f.create_dataset(k, data=v, chunks=(CHUNKS[k], *v.shape[1:]), compression="gzip")
    return path


def native(tmp_path: Path) -> Path:
    from chunkio import Output, write_arrays

    path = tmp_path / "native.zarr"
    write_arrays(path, arrays(), shuffle=False, output=Output(chunks=5))
    return path


STORES: dict[str, Callable[[Path], Path]] = {
    "xarray v2": xarray_v2,
    "xarray v3": xarray_v3,
    "zarr v2": zarr_v2,
    "zarr v3 sharded": zarr_v3,
    "h5py": h5py_file,
    "chunkio": native,
}


def window_fields() -> list[Any]:
    """The benchmark's window: ``t-1, t`` of the three variables, the ``t+1`` target, time."""
    from chunkio import Field

    return [Field(list(VARS), steps=range(-1, 1)), Field(list(VARS), steps=[1]), "time"]


def window_dataset(path: Path, **kw: Any) -> Any:
    """:func:`window_fields` of the store at ``path`` as a ``ChunkDataset``."""
    from chunkio import ChunkDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
        return ChunkDataset(path, fields=window_fields(), **kw)
