"""The fuzz suite's stores, each made through a public API as users make them: chunkio's
``write_arrays`` and ``convert_images``, anndata's ``write_h5ad``, zarr-python (v2, v3,
sharded), h5py and xarray's ``to_zarr``.

A :class:`Kind` names a maker, the ``ChunkDataset`` arguments that read the store and how its
files are laid out (``"zarr"`` directory or one ``"h5"`` file). Stores are small (tens of rows,
a few chunks) so that a case costs a few forks, not seconds.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunkio.dataset.options import Decoding

ROWS = 40
SPC = 8  # samples per chunk of chunkio's own stores: 5 chunks


@dataclass(frozen=True)
class Kind:
    """One kind of store: ``make(folder) -> path``; ``fields`` and ``options`` are what
    ``ChunkDataset`` gets (``crop``: a seeded crop transform on ``image``); ``layout`` is
    ``"zarr"`` or ``"h5"``; ``images``: the compiled decoders can read it (run with and
    without them)."""

    name: str
    make: Callable[[Path], Path]
    layout: str
    fields: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    crop: bool = False
    images: bool = False


def _quiet() -> warnings.catch_warnings[Any]:
    caught = warnings.catch_warnings()
    caught.__enter__()
    warnings.simplefilter("ignore")  # zarr's consolidated-metadata notes, anndata's hints
    return caught


def _pictures(n: int, *, sizes: bool, seed: int = 0) -> list[np.ndarray[Any, Any]]:
    """``n`` smooth RGB pictures (JPEG-friendly), of one size or of several."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = (24 + 8 * (i % 3), 32 - 8 * (i % 2)) if sizes else (32, 32)
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 5 + i * 9, y * 7, (x + y) * 3], axis=-1)
        out.append(np.clip(base + rng.integers(-12, 12, (h, w, 3)), 0, 255).astype(np.uint8))
    return out


def _jpeg_coding(i: int) -> dict[str, Any]:
    """JPEG codings a region decode must match the whole decode on (RELIABILITY row 35):
    4:4:4, 4:2:2 and 4:2:0 sampling, baseline and progressive, restart markers or none."""
    coding: dict[str, Any] = {"subsampling": i % 3}
    if i % 4 == 3:
        coding["progressive"] = True
    elif i % 5 == 4:
        coding["restart_marker_blocks"] = 2
    return coding


def _image_folder(root: Path, *, sizes: bool, fmt: str = "PNG", **save: Any) -> Path:
    from PIL import Image

    src = root / "src"
    for i, pixels in enumerate(_pictures(16, sizes=sizes)):
        folder = src / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        suffix = ".jpg" if fmt == "JPEG" else ".png"
        Image.fromarray(pixels).save(folder / f"{i:02d}{suffix}", format=fmt, **save,
                                     **(_jpeg_coding(i) if fmt == "JPEG" else {}))  # fmt: skip
    return src


def _convert(root: Path, encoding: str, *, sizes: bool, **folder: Any) -> Path:
    import chunkio

    dst = root / f"{encoding}.zarr"
    chunkio.convert_images(
        _image_folder(root, sizes=sizes, **folder),
        dst,
        shuffle=False,
        size=None if sizes else 32,
        images=chunkio.ImageOptions(encoding=encoding),
        output=chunkio.Output(chunks=4),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    return dst


def _arrays() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(1)
    return {
        "image": rng.integers(0, 255, (ROWS, 3, 4, 4), dtype=np.uint8),
        "value": rng.standard_normal((ROWS, 5)).astype(np.float32),
        "label": (np.arange(ROWS) % 7).astype(np.int64),
    }


def _sparse(seed: int = 2) -> Any:
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    dense = rng.integers(1, 9, (ROWS, 30)).astype(np.float32)
    dense[rng.random((ROWS, 30)) < 0.8] = 0
    return sp.csr_matrix(dense)


def _native(suffix: str, *, compression: Any = None) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        import chunkio

        path = root / f"dense{suffix}"
        output = chunkio.Output(chunks=SPC)
        if compression is not None:
            output = chunkio.Output(chunks=SPC, compression=compression)
        chunkio.write_arrays(
            path,
            _arrays(),
            shuffle=False,
            output=output,
            execution=chunkio.Execution(progress=False),
        )
        return path

    return make


def _native_sparse(suffix: str) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        import chunkio

        path = root / f"sparse{suffix}"
        chunkio.write_arrays(
            path,
            {"x": _sparse(), "label": np.arange(ROWS) % 3},
            shuffle=False,
            output=chunkio.Output(chunks=SPC),
            execution=chunkio.Execution(progress=False),
        )
        return path

    return make


def _anndata(zarr_format: int | None) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        import anndata as ad
        import pandas as pd

        cells = pd.Categorical(np.array(["t", "b", "nk", "mono"])[np.arange(ROWS) % 4])
        obs = pd.DataFrame({"cell": cells}, index=[f"c{i}" for i in range(ROWS)])
        adata = ad.AnnData(X=_sparse(3), obs=obs)
        caught = _quiet()
        try:
            if zarr_format is None:
                path = root / "cells.h5ad"
                adata.write_h5ad(path)
            else:
                path = root / f"cells_v{zarr_format}.zarr"
                with ad.settings.override(zarr_write_format=zarr_format):
                    adata.write_zarr(path, chunks=(16,) if zarr_format else None)
        finally:
            caught.__exit__(None, None, None)
        return path

    return make


def _foreign_h5(root: Path) -> Path:
    import h5py

    a = _arrays()
    path = root / "user.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("train")
        g.create_dataset("images", data=a["image"], chunks=(8, 3, 4, 4), compression="gzip")
        g.create_dataset("labels", data=a["label"])
    return path


def _foreign_zarr(zarr_format: int, *, sharded: bool = False) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        import numcodecs
        import zarr

        a = _arrays()
        path = root / f"user_v{zarr_format}{'s' if sharded else ''}.zarr"
        g = zarr.open_group(path, mode="w", zarr_format=zarr_format).require_group("train")
        kw: dict[str, Any] = {"chunks": (8, 3, 2, 4)}
        if zarr_format == 2:
            kw["compressors"] = numcodecs.Blosc(cname="zstd")
        if sharded:
            kw["shards"] = (16, 3, 4, 4)
        g.create_array("images", shape=a["image"].shape, dtype="u1", **kw)[...] = a["image"]
        g.create_array("labels", shape=(ROWS,), chunks=(16,), dtype="i8")[...] = a["label"]
        return path

    return make


def _weather(root: Path) -> Path:
    from weather_stores import native

    return Path(native(root))


def _cf(zarr_format: int) -> Callable[[Path], Path]:
    def make(root: Path) -> Path:
        import xarray as xr

        rng = np.random.default_rng(4)
        t2m = rng.integers(-3000, 3000, (ROWS, 3, 4)).astype(np.int16)
        t2m[3, 0, 0] = -32767
        ds = xr.Dataset(
            {"t2m": (("time", "lat", "lon"), t2m)}, coords={"time": np.arange(ROWS, dtype=np.int64)}
        )
        ds["t2m"].attrs.update(
            scale_factor=np.float32(0.01),
            add_offset=np.float32(273.15),
            _FillValue=np.int16(-32767),
        )  # float32: xarray decodes in float32
        path = root / f"cf_v{zarr_format}.zarr"
        encoding = {"t2m": {"chunks": (8, 3, 4)}}
        caught = _quiet()
        try:
            xr.Dataset(ds).to_zarr(
                path, zarr_format=zarr_format, encoding=encoding, mask_and_scale=False
            )
        except TypeError:  # an xarray whose to_zarr takes no mask_and_scale
            ds.to_zarr(path, zarr_format=zarr_format, encoding=encoding)
        finally:
            caught.__exit__(None, None, None)
        return path

    return make


def _window_fields() -> Any:
    from weather_stores import window_fields

    return window_fields()


def _jpeg_bytes() -> bytes:  # kept for the reference's tests: one encoded picture
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(_pictures(1, sizes=False)[0]).save(buf, format="JPEG")
    return buf.getvalue()


FOREIGN_FIELDS = {"image": "train/images", "label": "train/labels"}
ANNDATA_FIELDS = {"x": "X", "label": "obs/cell"}

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("dense-zarr", _native(".zarr"), "zarr"),
        Kind("dense-zarr-blosc", _native(".zarr", compression="blosc-lz4"), "zarr"),
        Kind("dense-h5", _native(".h5"), "h5"),
        Kind("ragged", lambda r: _convert(r, "raw", sizes=True), "zarr"),
        Kind("sparse-zarr", _native_sparse(".zarr"), "zarr"),
        Kind("sparse-h5", _native_sparse(".h5"), "h5"),
        Kind("anndata-h5ad", _anndata(None), "h5", fields=ANNDATA_FIELDS),
        Kind("anndata-zarr", _anndata(3), "zarr", fields=ANNDATA_FIELDS),
        Kind(
            "jpeg",
            lambda r: _convert(r, "jpeg", sizes=True, fmt="JPEG", quality=90),
            "zarr",
            images=True,
        ),
        Kind(
            "jpeg-crop",
            lambda r: _convert(r, "jpeg", sizes=False, fmt="JPEG", quality=90),
            "zarr",
            crop=True,
            images=True,
        ),
        Kind("yuv420", lambda r: _convert(r, "yuv420", sizes=True), "zarr", images=True),
        Kind(
            "yuv420-crop",
            lambda r: _convert(r, "yuv420", sizes=False),
            "zarr",
            crop=True,
            images=True,
        ),
        Kind("png", lambda r: _convert(r, "png", sizes=True), "zarr", images=True),
        Kind("webp", lambda r: _convert(r, "webp", sizes=False), "zarr", images=True),
        Kind("h5py", _foreign_h5, "h5", fields=FOREIGN_FIELDS),
        Kind("zarr-v2", _foreign_zarr(2), "zarr", fields=FOREIGN_FIELDS),
        Kind("zarr-v3", _foreign_zarr(3), "zarr", fields=FOREIGN_FIELDS),
        Kind("zarr-sharded", _foreign_zarr(3, sharded=True), "zarr", fields=FOREIGN_FIELDS),
        Kind("windows", _weather, "zarr", fields="windows"),
        Kind(
            "cf",
            _cf(3),
            "zarr",
            fields={"t2m": "t2m", "time": "time"},
            options={"decoding": Decoding(cf=True)},
        ),
    )
}
