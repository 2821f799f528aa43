"""Stores as users' own tools write them (h5py, zarr-python v2 and v3 sharded, xarray's
``to_zarr``), for the tests of reading data chunkio did not write; and a snapshot proving the
source is left untouched.

The data: ``N`` images ``(3, 8, 8)`` uint8 and their labels, sorted by label as users' files
often are (:func:`labelled` makes more samples and classes, with sample ids); volumes for patch
reads (:func:`volume_data`); for xarray, an ERA5-like ``t2m (time, lat, lon)`` and a label per
time step.
"""

from __future__ import annotations

import hashlib
import os
import stat
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numcodecs
import numpy as np
import pandas as pd
import xarray as xr
import zarr

N = 300


def data() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (N, 3, 8, 8), dtype=np.uint8)
    labels = np.repeat(np.arange(10), N // 10)  # sorted by label, as users' files often are
    return images, labels


def h5py_file(tmp_path: Path) -> Path:
    """As a user writes it with plain h5py: gzip chunks of 32 images, contiguous labels."""
    images, labels = data()
    path = tmp_path / "user.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("train")
        g.create_dataset("images", data=images, chunks=(32, 3, 8, 8), compression="gzip")
        g.create_dataset("labels", data=labels)
    return path


def zarr_v2(tmp_path: Path, *, written: int = N, name: str = "v2.zarr") -> Path:
    """zarr-python v2 layout: nested group, Blosc, chunks splitting samples, labels apart;
    only the first ``written`` images written (the chunks past them never are)."""
    images, labels = data()
    path = tmp_path / name
    g = zarr.open_group(path, mode="w", zarr_format=2).require_group("train")
    a = g.create_array("images", shape=images.shape, chunks=(16, 3, 4, 8), dtype="u1",
                       compressors=numcodecs.Blosc(cname="zstd"))  # fmt: skip
    a[:written] = images[:written]
    b = g.create_array("labels", shape=labels.shape, chunks=(100,), dtype=labels.dtype)
    b[...] = labels
    return path


def zarr_v3_sharded(tmp_path: Path, *, written: int = N, name: str = "v3.zarr") -> Path:
    """A zarr-python v3 group, images sharded; only the first ``written`` images written."""
    images, labels = data()
    path = tmp_path / name
    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array("images", shape=images.shape, chunks=(8, 3, 8, 8), shards=(64, 3, 8, 8),
                       dtype="u1")  # fmt: skip
    a[:written] = images[:written]
    g.create_array("labels", shape=labels.shape, chunks=(N,), dtype=labels.dtype)[...] = labels
    return path


STORES = {"h5py": h5py_file, "zarr v2": zarr_v2, "zarr v3 sharded": zarr_v3_sharded}
FIELDS = {"image": "train/images", "label": "train/labels"}


def fields_of(store: str) -> dict[str, str]:
    return FIELDS if store != "zarr v3 sharded" else {"image": "images", "label": "labels"}


def snapshot(path: Path) -> dict[str, tuple[str, int]]:
    """Every file's bytes (digest) and modification time, and the listing; directories by
    their modification time, which a file made and removed again (a lock) changes too."""
    found = [path] if path.is_file() else [path, *sorted(path.rglob("*"))]
    return {
        str(p): (
            "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest(),
            os.stat(p).st_mtime_ns,
        )
        for p in found
    }


def make_read_only(path: Path) -> None:
    """Take write permission from ``path`` and everything under it, as on a read-only share."""
    for p in [*sorted(path.rglob("*"), reverse=True), path] if path.is_dir() else [path]:
        mode = p.stat().st_mode
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(path: Path) -> None:
    """Give write permission back (so that pytest can remove the folder)."""
    for p in [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def labelled(
    tmp_path: Path, store: str, n: int, classes: int, *, chunk: int = 32, sort: bool = True
) -> tuple[Path, dict[str, str], dict[str, np.ndarray[Any, Any]]]:
    """``store`` (a key of :data:`STORES`) holding ``n`` images sorted by label over ``classes``
    classes, with int64 sample ids; the images ``(3, 8, 8)`` chunked ``chunk`` samples, gzip
    (h5py) or the writer's default (zarr). Returns the path, the fields (``image``, ``label``,
    ``id``) and the arrays. ``sort=False``: labels in random order."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8)
    labels = rng.integers(0, classes, n).astype(np.int64)
    labels = np.sort(labels) if sort else labels
    arrays = {"image": images, "label": labels, "id": np.arange(n, dtype=np.int64)}
    fields = {name: f"train/{name}s" for name in arrays}
    if store == "h5py":
        path = tmp_path / "labelled.h5"
        with h5py.File(path, "w") as f:
            for name, a in arrays.items():
                if a.ndim == 1:  # contiguous, as h5py writes it by default
                    f.create_dataset(fields[name], data=a)
                else:
                    chunks = (chunk, *a.shape[1:])
                    f.create_dataset(fields[name], data=a, chunks=chunks, compression="gzip")
        return path, fields, arrays
    fmt = 2 if store == "zarr v2" else 3
    path = tmp_path / f"labelled-v{fmt}.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=fmt)
    for name, a in arrays.items():
        chunks = (chunk, *a.shape[1:]) if a.ndim > 1 else (n,)
        shards = (4 * chunk, *a.shape[1:]) if fmt == 3 and a.ndim > 1 else None
        z = g.create_array(fields[name], shape=a.shape, chunks=chunks, shards=shards, dtype=a.dtype)
        z[...] = a
    return path, fields, arrays


def volume_data() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Three 2-channel int16 volumes ``(3, 2, 10, 12, 9)`` and their uint8 labels."""
    rng = np.random.default_rng(2)
    images = rng.integers(-3000, 30000, (3, 2, 10, 12, 9)).astype(np.int16)
    return images, (images[:, 0] % 5).astype(np.uint8)


def volumes_h5py(tmp_path: Path) -> Path:
    """``vol/image`` ``(N, D, H, W)`` (channel 0) gzip-chunked across volumes, ``vol/label``
    chunked otherwise, and ``vol/one``, a single ``(D, H, W)`` volume."""
    images, labels = volume_data()
    path = tmp_path / "volumes.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("vol/image", data=images[:, 0], chunks=(2, 4, 5, 3), compression="gzip")
        f.create_dataset("vol/label", data=labels, chunks=(1, 5, 6, 9))
        f.create_dataset("vol/one", data=images[0, 0], chunks=(3, 12, 4))
    return path


def volumes_zarr_v3(tmp_path: Path) -> Path:
    """``image`` ``(N, C, D, H, W)`` sharded, ``label`` ``(N, D, H, W)``."""
    images, labels = volume_data()
    path = tmp_path / "volumes.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    chunks, shards = (1, 2, 4, 4, 4), (1, 2, 8, 8, 8)
    z = g.create_array("image", shape=images.shape, chunks=chunks, shards=shards, dtype="i2")
    z[...] = images
    g.create_array("label", shape=labels.shape, chunks=(1, 5, 5, 5), dtype="u1")[...] = labels
    return path


# -- chunkings that make training slow (and one that does not), and stores with holes ------


def images(n: int, side: int) -> np.ndarray[Any, Any]:
    """``n`` random images ``(3, side, side)`` uint8 (incompressible: no codec flatters)."""
    return np.random.default_rng(1).integers(0, 255, (n, 3, side, side), dtype=np.uint8)


def h5py_chunked(tmp_path: Path, rows: int, *, n: int = N, side: int = 8) -> Path:
    """An h5py file whose gzip images come in chunks of ``rows`` samples (``rows=n``: one chunk
    of every sample), with contiguous labels."""
    path = tmp_path / f"chunks{rows}.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "images", data=images(n, side), chunks=(rows, 3, side, side), compression="gzip"
        )
        f.create_dataset("labels", data=np.arange(n) % 10)
    return path


def zarr_v3_chunked(tmp_path: Path, rows: int, *, n: int = N, side: int = 8) -> Path:
    """A zarr-python v3 group whose images come in chunks of ``rows`` samples, sharded by
    64 chunks."""
    path = tmp_path / f"chunks{rows}.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    chunks = (rows, 3, side, side)
    g.create_array("images", shape=(n, *chunks[1:]), chunks=chunks,
                   shards=(64 * rows, *chunks[1:]), dtype="u1")[...] = images(n, side)  # fmt: skip
    g.create_array("labels", shape=(n,), chunks=(n,), dtype="i8")[...] = np.arange(n) % 10
    return path


#: samples written to the stores with holes (the rest of each array was never written)
WRITTEN = 100


def zarr_v2_with_holes(tmp_path: Path) -> Path:
    """:func:`zarr_v2` with only the first :data:`WRITTEN` images written: the chunks past
    them were never written (they read as the fill value, 0)."""
    return zarr_v2(tmp_path, written=WRITTEN, name="holes.zarr")


def zarr_v3_sharded_with_holes(tmp_path: Path) -> Path:
    """:func:`zarr_v3_sharded` with only the first :data:`WRITTEN` images written."""
    return zarr_v3_sharded(tmp_path, written=WRITTEN, name="holes3.zarr")


def h5py_with_holes(tmp_path: Path) -> Path:
    """An h5py file whose chunked images were written only up to :data:`WRITTEN`: the chunks
    past them are unallocated (HDF5 reads them as the fill value)."""
    images, labels = data()
    path = tmp_path / "holes.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", shape=images.shape, dtype="u1", chunks=(32, 3, 8, 8))
        d[:WRITTEN] = images[:WRITTEN]
        f.create_dataset("labels", data=labels)
    return path


def zarr_v3(tmp_path: Path) -> Path:
    """zarr-python v3 defaults (zstd), unsharded, in a nested group."""
    images, labels = data()
    path = tmp_path / "v3plain.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3).require_group("train")
    g.create_array("images", shape=images.shape, chunks=(32, 3, 8, 8), dtype="u1")[...] = images
    g.create_array("labels", shape=labels.shape, chunks=(64,), dtype=labels.dtype)[...] = labels
    return path


def consolidate(path: Path) -> Path:
    """``zarr.consolidate_metadata`` on a store (v3: into the root zarr.json, a zarr-python
    extension it warns about; v2: ``.zmetadata``)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        zarr.consolidate_metadata(str(path))
    return path


def zarr_v2_consolidated(tmp_path: Path) -> Path:
    return consolidate(zarr_v2(tmp_path))


def zarr_v3_consolidated(tmp_path: Path) -> Path:
    return consolidate(zarr_v3(tmp_path))


STORES |= {
    "zarr v3": zarr_v3,
    "zarr v2 consolidated": zarr_v2_consolidated,
    "zarr v3 consolidated": zarr_v3_consolidated,
}


# -- chunks that split samples -----------------------------------------------------------------


def photos_64(n: int = 40) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``n`` images ``(3, 64, 64)`` uint8 and their sorted labels."""
    rng = np.random.default_rng(2)
    return rng.integers(0, 255, (n, 3, 64, 64), dtype=np.uint8), np.repeat(np.arange(4), n // 4)


def compact_dataset(group: h5py.Group, name: str, values: np.ndarray[Any, Any]) -> None:
    """``values`` as an HDF5 compact dataset (stored in the object header; at most 64 KiB)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(values.shape)
    dtype = h5py.h5t.py_create(values.dtype)
    dsid = h5py.h5d.create(group.id, name.encode(), dtype, space, dcpl=dcpl)
    h5py.Dataset(dsid)[...] = values


def h5py_split(tmp_path: Path, chunks: tuple[int, ...]) -> Path:
    """Images in gzip ``chunks`` (which may split a sample), labels compact, ids contiguous."""
    images, labels = photos_64()
    path = tmp_path / "split.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=chunks, compression="gzip")
        compact_dataset(f, "labels", labels)
        f["ids"] = np.arange(len(labels), dtype=np.int32)  # contiguous
    return path


def zarr_split(tmp_path: Path, chunks: tuple[int, ...], zarr_format: int) -> Path:
    """Images in Zstd ``chunks`` (which may split a sample), labels and ids in one chunk."""
    images, labels = photos_64()
    path = tmp_path / f"split.v{zarr_format}.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    compressor = numcodecs.Zstd(level=3) if zarr_format == 2 else zarr.codecs.ZstdCodec(level=3)
    a = g.create_array("images", shape=images.shape, chunks=chunks, dtype="u1",
                       compressors=compressor)  # fmt: skip
    a[...] = images
    g.create_array("labels", shape=labels.shape, chunks=labels.shape, dtype=labels.dtype)[...] = (
        labels
    )
    ids = np.arange(len(labels), dtype=np.int32)
    g.create_array("ids", shape=ids.shape, chunks=ids.shape, dtype=ids.dtype)[...] = ids
    return path


# -- xarray ------------------------------------------------------------------------------------

#: ERA5-like grid: time steps (the sample axis), latitudes, longitudes
TIMES, LATS, LONS = 96, 12, 16
#: the CF encoding xarray stores t2m with: int16 counts of 0.01 K above 280 K
T2M_ENCODING = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768}


def era5_like(times: int = TIMES) -> xr.Dataset:
    """Surface temperature ``t2m (time, lat, lon)`` float32 (some NaN: missing values) and a
    per-time ``label`` sorted as the weather regime of a season would be, with coordinates."""
    rng = np.random.default_rng(1)
    t2m = rng.normal(285.0, 8.0, (times, LATS, LONS)).astype("float32")
    t2m[3, 2, 5] = np.nan  # stored as _FillValue
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K"}),
            "label": (("time",), np.repeat(np.arange(8), -(-times // 8))[:times]),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=times, freq="6h"),
            "lat": np.linspace(90.0, -90.0, LATS),
            "lon": np.linspace(0.0, 360.0, LONS, endpoint=False),
        },
    )


def to_zarr(ds: xr.Dataset, path: Path, zarr_format: int, **kwargs: Any) -> Path:
    """``ds.to_zarr`` as a user calls it (consolidated metadata, xarray's default), t2m
    CF-encoded; zarr's warning that v3 consolidated metadata is not in the spec is the
    writer's, not chunkio's concern."""
    ds = ds.copy()
    ds["t2m"].encoding.update(T2M_ENCODING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        ds.to_zarr(path, zarr_format=zarr_format, **kwargs)
    return path


def xarray_store(tmp_path: Path, zarr_format: int, chunks: dict[str, int] | None = None) -> Path:
    """An ERA5-like Dataset written by ``to_zarr`` (dask-chunked first when ``chunks``)."""
    ds = era5_like()
    return to_zarr(ds.chunk(chunks) if chunks else ds, tmp_path / f"era5.v{zarr_format}.zarr",
                   zarr_format, mode="w")  # fmt: skip


def xarray_appended(tmp_path: Path, zarr_format: int, first: int = 40) -> Path:
    """The same Dataset written in two goes: the first ``first`` time steps (``mode="w"``),
    then the rest appended along time (``append_dim="time"``), chunks of 16 time steps, so
    the append rewrites the chunk the first write left partial."""
    ds, step = era5_like(), 16
    path = tmp_path / f"appended.v{zarr_format}.zarr"
    to_zarr(ds.isel(time=slice(0, first)).chunk({"time": step}), path, zarr_format, mode="w")
    rest = ds.isel(time=slice(first, None))
    head = -first % step  # the appended dask chunks start where the zarr chunks do
    pieces = [head] * bool(head) + [step] * ((rest.sizes["time"] - head) // step)
    pieces += [rest.sizes["time"] - sum(pieces)] * bool(rest.sizes["time"] - sum(pieces))
    return to_zarr(rest.chunk({"time": tuple(pieces)}), path, zarr_format, append_dim="time")


def stored(path: Path, name: str) -> np.ndarray[Any, Any]:
    """Array ``name`` as stored (zarr-python, no CF decoding)."""
    return np.asarray(zarr.open_array(path / name, mode="r")[...])


def noise_windows_store(
    path: Path, variables: Sequence[str], steps: int, grid: tuple[int, int], per_chunk: int,
    seed: int,
) -> Path:  # fmt: skip
    """An xarray-written Zarr v3 store of float32 noise ``(time, *grid)`` per variable, every
    variable chunked alike along time (``per_chunk`` steps), an int64 ``time`` coordinate."""
    rng = np.random.default_rng(seed)
    data = {v: (("time", "lat", "lon"), rng.standard_normal((steps, *grid)).astype("f4"))
            for v in variables}  # fmt: skip
    ds = xr.Dataset(data, coords={"time": np.arange(steps, dtype=np.int64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata notes under Zarr v3
        encoding = {v: {"chunks": (per_chunk, *grid)} for v in variables}
        ds.to_zarr(path, zarr_format=3, encoding=encoding)
    return path
