"""Stores as users' own tools write them (h5py, zarr-python v2 and v3 sharded), for the tests
of reading data chunkio did not write; and a snapshot proving the source is left untouched.

The data: ``N`` images ``(3, 8, 8)`` uint8 and their labels, sorted by label as users' files
often are.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import h5py
import numcodecs
import numpy as np
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


def zarr_v2(tmp_path: Path) -> Path:
    """zarr-python v2 layout: nested group, Blosc, chunks splitting samples, labels apart."""
    images, labels = data()
    path = tmp_path / "v2.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2).require_group("train")
    a = g.create_array("images", shape=images.shape, chunks=(16, 3, 4, 8), dtype="u1",
                       compressors=numcodecs.Blosc(cname="zstd"))  # fmt: skip
    a[...] = images
    b = g.create_array("labels", shape=labels.shape, chunks=(100,), dtype=labels.dtype)
    b[...] = labels
    return path


def zarr_v3_sharded(tmp_path: Path) -> Path:
    images, labels = data()
    path = tmp_path / "v3.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    a = g.create_array("images", shape=images.shape, chunks=(8, 3, 8, 8), shards=(64, 3, 8, 8),
                       dtype="u1")  # fmt: skip
    a[...] = images
    g.create_array("labels", shape=labels.shape, chunks=(N,), dtype=labels.dtype)[...] = labels
    return path


STORES = {"h5py": h5py_file, "zarr v2": zarr_v2, "zarr v3 sharded": zarr_v3_sharded}
FIELDS = {"image": "train/images", "label": "train/labels"}


def fields_of(store: str) -> dict[str, str]:
    return FIELDS if store != "zarr v3 sharded" else {"image": "images", "label": "labels"}


def snapshot(path: Path) -> dict[str, tuple[str, int]]:
    """Every file's bytes (digest) and modification time, and the listing."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {
        str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mtime_ns) for p in files
    }


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
