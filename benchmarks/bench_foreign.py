"""Your own HDF5 file and Zarr store, read in place, next to what users write today.

A file as a user makes it with plain h5py: ``images`` (N, 3, 64, 64) uint8 in gzip chunks of
32 samples (h5py's default compressor and level), ``labels`` (N,) contiguous, sorted by label.
The same arrays as a zarr-python v3 group (Zstd chunks of 32 samples). Side by side, shuffled
epochs, batch 256, 2 workers:

* a naive per-sample ``Dataset`` (h5py / zarr-python, one ``__getitem__`` per sample);
* chunkio reading the user's store in place (``make_loader(path, fields={...})``);
* chunkio reading the same data converted by ``write_arrays`` with the same codec.

And the same arrays as an xarray Dataset written by ``to_zarr`` (Zarr v3, dask chunks of 32
samples, zarr's default codec), read by a per-sample zarr-python ``Dataset``, by chunkio in
place, and by xbatcher as its documentation pairs it with PyTorch: a ``BatchGenerator`` per
variable (``input_dims`` one sample, ``batch_dims`` the batch) in ``MapDataset``, a
``DataLoader(batch_size=None, shuffle=True)`` shuffling whole batches (xbatcher has no sample
shuffle), 2 forkserver workers, kept between epochs (dask's thread pool does not survive a
fork, so fork workers of a parent that ran dask hang).

Also the distinct labels per batch against a uniform shuffle's (the stores are sorted by label).

``--remote``: the same two stores read in place from S3 (a moto server on loopback, every
request delayed 20 ms by :mod:`chunkio.testing.servers`' ``LatencyProxy``), batch 64, 2 workers:
chunkio (``make_loader(url, fields=..., storage_options=...)``), one whole cold shuffled epoch
timed from ``make_loader`` on (opening the store and starting the workers included; also the
rate after its first batch), next to a naive per-sample ``Dataset`` (h5py on an fsspec file
object with 2 MiB readahead blocks; zarr-python's ``open_group(url)``), its rate after 2
batches over about 8 s (an epoch would take minutes).

    python -m benchmarks.bench_foreign [--images 8192] [--remote]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr
import xbatcher
import zarr
from torch.utils.data import DataLoader
from xbatcher.loaders.torch import MapDataset

import chunkio
from benchmarks.baselines import NaiveH5Dataset, NaiveZarrDataset
from benchmarks.bench_loaders import timed_rate
from benchmarks.data import sample_photos
from benchmarks.report import check
from chunkio.sampling.label_metrics import uniform_distinct_labels

__all__ = ["run", "run_remote"]

BATCH, WORKERS = 256, 2
#: batch of the remote rows (a naive per-sample reader pays round trips per sample)
REMOTE_BATCH = 64
FIELDS = {"image": "images", "label": "labels"}


def _arrays(n: int, seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``n`` 3x64x64 crops of natural photographs, labels sorted (10 classes)."""
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    images = np.empty((n, 3, 64, 64), np.uint8)
    for i in range(n):
        p = photos[i % len(photos)]
        y, x = (int(rng.integers(0, s - 64)) for s in p.shape[:2])
        images[i] = p[y : y + 64, x : x + 64].transpose(2, 0, 1)
    return images, np.repeat(np.arange(10), -(-n // 10))[:n]


def _user_files(root: Path, n: int) -> tuple[Path, Path]:
    images, labels = _arrays(n)
    h5 = root / "user.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("images", data=images, chunks=(32, 3, 64, 64), compression="gzip")
        f.create_dataset("labels", data=labels)
    zs = root / "user.zarr"
    g = zarr.open_group(zs, mode="w", zarr_format=3)
    a = g.create_array("images", shape=images.shape, chunks=(32, 3, 64, 64), dtype="u1",
                       compressors=zarr.codecs.ZstdCodec(level=3))  # fmt: skip
    a[...] = images
    g.create_array("labels", shape=labels.shape, chunks=(n,), dtype=labels.dtype)[...] = labels
    return h5, zs


def _xarray_store(root: Path, images: np.ndarray[Any, Any], labels: np.ndarray[Any, Any]) -> Path:
    """The arrays as a user's xarray Dataset, written by ``to_zarr`` in chunks of 32 samples."""
    ds = xr.Dataset(
        {"image": (("index", "channel", "y", "x"), images), "label": (("index",), labels)}
    )
    path = root / "user.xarray.zarr"
    with warnings.catch_warnings():  # zarr: v3 consolidated metadata is not in the spec yet
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        ds.chunk({"index": 32}).to_zarr(path, mode="w", zarr_format=3)
    return path


def _xbatcher(path: Path) -> DataLoader[Any]:
    """xbatcher over the store, as its docs pair it with a PyTorch DataLoader."""
    ds = xr.open_zarr(path)
    sample = {"channel": 3, "y": 64, "x": 64}
    x = xbatcher.BatchGenerator(ds["image"], input_dims=sample, batch_dims={"index": BATCH})
    y = xbatcher.BatchGenerator(ds["label"], input_dims={"index": BATCH})
    return DataLoader(MapDataset(x, y), batch_size=None, shuffle=True, num_workers=WORKERS,
                      multiprocessing_context="forkserver", persistent_workers=True)  # fmt: skip


def _xarray_rows(root: Path, x: Any, y: Any, budget_s: float) -> tuple[dict[str, float], Any]:
    """Samples/s of the three readers of an xarray store, and the distinct labels per batch
    of chunkio's and xbatcher's (against a uniform shuffle's)."""
    path = _xarray_store(root, x, y)
    fields = {"image": "image", "label": "label"}
    naive = NaiveZarrDataset(str(path), "image", "label")
    dl = DataLoader(naive, batch_size=BATCH, shuffle=True, num_workers=WORKERS)
    rows = {"naive per-sample xarray": timed_rate(dl, budget_s=budget_s, warmup=2)}
    loader = chunkio.make_loader(path, BATCH, fields=fields, num_workers=WORKERS, seed=0)
    rows["chunkio in place xarray"] = timed_rate(loader, budget_s=budget_s, warmup=True)
    xb = _xbatcher(path)
    rows["xbatcher xarray"] = timed_rate(xb, budget_s=budget_s, warmup=2)
    once = chunkio.make_loader(
        path, BATCH, fields=fields, num_workers=0, seed=0, workers=chunkio.Workers(copy=True)
    )
    mixing = {"chunkio": _mixing(once, y), "xbatcher": _mixing(xb, y)}
    return rows, mixing


def _mixing(loader: Any, labels: np.ndarray[Any, Any]) -> float:
    got = [len(np.unique(np.asarray(y))) for _, y in loader]
    return float(np.mean(got) / uniform_distinct_labels(np.bincount(labels), BATCH))


def run(*, images: int = 8192, budget_s: float = 4.0, quick: bool = False) -> dict[str, Any]:
    if quick:
        images, budget_s = min(images, 2048), 1.0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        h5, zs = _user_files(root, images)
        x, y = _arrays(images)
        rows: dict[str, float] = {}
        naive = {"h5": NaiveH5Dataset(str(h5), "images", "labels"),
                 "zarr": NaiveZarrDataset(str(zs), "images", "labels")}  # fmt: skip
        mixing = {}
        for fmt, path, codec in (("h5", h5, "gzip"), ("zarr", zs, "zstd")):
            dl = DataLoader(naive[fmt], batch_size=BATCH, shuffle=True, num_workers=WORKERS)
            rows[f"naive per-sample {fmt}"] = timed_rate(dl, budget_s=budget_s, warmup=2)
            loader = chunkio.make_loader(path, BATCH, fields=FIELDS, num_workers=WORKERS, seed=0)
            rows[f"chunkio in place {fmt}"] = timed_rate(loader, budget_s=budget_s, warmup=True)
            mixing[fmt] = _mixing(
                chunkio.make_loader(
                    path,
                    BATCH,
                    fields=FIELDS,
                    num_workers=0,
                    seed=0,
                    workers=chunkio.Workers(copy=True),
                ),
                y,
            )
            copy = root / f"copy.{fmt}"
            chunkio.write_arrays(
                copy,
                {"image": x, "label": y},
                output=chunkio.Output(compression=codec, chunks=32),
                execution=chunkio.Execution(progress=False),
            )
            converted = chunkio.make_loader(copy, BATCH, fields=["image", "label"],
                                            num_workers=WORKERS, seed=0)  # fmt: skip
            rows[f"chunkio converted {fmt}"] = timed_rate(converted, budget_s=budget_s, warmup=True)
        xarray_rows, xarray_mixing = _xarray_rows(root, x, y, budget_s)
        rows.update(xarray_rows)
        mixing["xarray"] = xarray_mixing["chunkio"]
        return {
            "images": images,
            "samples_per_s": rows,
            "mixing_vs_uniform": mixing,
            "xbatcher_mixing_vs_uniform": xarray_mixing["xbatcher"],
            "checks": _checks(rows, mixing),
        }


def _remote_epoch(url: str, options: dict[str, Any]) -> tuple[float, float]:
    """Seconds of one whole shuffled epoch from ``make_loader`` on (opening the store and
    starting the workers included), and of its first batch."""
    start = time.perf_counter()
    first = 0.0
    loader = chunkio.make_loader(url, REMOTE_BATCH, fields=FIELDS, seed=0,
                                 num_workers=WORKERS, storage_options=options)  # fmt: skip
    for _ in loader:
        first = first or time.perf_counter() - start
    return time.perf_counter() - start, first


def run_remote(*, images: int = 2048, latency_s: float = 0.02) -> dict[str, Any]:
    """The user's h5py file and zarr-python v3 store read in place from loopback S3."""
    from chunkio.testing.servers import LatencyProxy, S3Server  # needs pytest, moto, s3fs

    rows: dict[str, float] = {}
    requests: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, S3Server() as s3:
        h5, zs = _user_files(Path(tmp), images)
        s3.put("bench", "user.h5", h5.read_bytes())
        urls = {"h5": "s3://bench/user.h5", "zarr": s3.upload_dir(zs, "bench", "user.zarr")}
        with LatencyProxy(s3.endpoint_url, latency_s) as proxy:
            opts = s3.storage_options(endpoint_url=proxy.url)
            naive = {"h5": NaiveH5Dataset(urls["h5"], "images", "labels", storage_options=opts),
                     "zarr": NaiveZarrDataset(urls["zarr"], "images", "labels",
                                              storage_options=opts)}  # fmt: skip
            for fmt in ("h5", "zarr"):
                dl = DataLoader(naive[fmt], batch_size=REMOTE_BATCH, shuffle=True,
                                num_workers=WORKERS)  # fmt: skip
                rows[f"naive per-sample {fmt}"] = timed_rate(dl, budget_s=8.0, warmup=2)
                proxy.reset_counts()
                epoch, first = _remote_epoch(urls[fmt], opts)
                rows[f"chunkio in place {fmt}"] = images / epoch
                rows[f"chunkio after its first batch {fmt}"] = (images - REMOTE_BATCH) / (
                    epoch - first
                )
                requests[fmt] = proxy.requests / images  # the whole epoch, opening included
    ratios = {fmt: rows[f"chunkio in place {fmt}"] / rows[f"naive per-sample {fmt}"]
              for fmt in ("h5", "zarr")}  # fmt: skip
    return {
        "images": images,
        "latency_s": latency_s,
        "batch": REMOTE_BATCH,
        "samples_per_s": rows,
        "x_naive": ratios,
        "chunkio_requests_per_sample": requests,
    }


#: the targets of reading data in place (the issue that asked for it): (target, row, the row
#: it is compared with, the ratio required)
_RATIOS = (
    ("your h5py file in place / naive per-sample h5py", "chunkio in place h5",
     "naive per-sample h5", 20.0),
    ("your h5py file in place / chunkio on a converted copy (gzip)", "chunkio in place h5",
     "chunkio converted h5", 0.8),
    ("your zarr store in place / naive per-sample zarr-python", "chunkio in place zarr",
     "naive per-sample zarr", 10.0),
    ("your xarray to_zarr store in place / naive per-sample zarr-python",
     "chunkio in place xarray", "naive per-sample xarray", 10.0),
    ("your xarray to_zarr store in place / xbatcher (BatchGenerator + MapDataset)",
     "chunkio in place xarray", "xbatcher xarray", 3.0),
)  # fmt: skip


def _checks(rows: dict[str, float], mixing: dict[str, float]) -> list[dict[str, Any]]:
    """Each of :data:`_RATIOS`, and the label mixing of every store sorted by label."""
    out = [check(target, rows[a] / rows[b], need) for target, a, b, need in _RATIOS]
    mixed = min(mixing.values())
    out.append(
        check("label-sorted store: distinct labels per batch / uniform shuffle's", mixed, 0.9)
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=8192)
    parser.add_argument("--remote", action="store_true", help="read from S3, 20 ms latency")
    args = parser.parse_args()
    if args.remote:
        remote = run_remote(images=min(args.images, 2048))
        rr = remote["samples_per_s"]
        print(f"{remote['images']} images 3x64x64 on S3 (moto, +20 ms per request), batch "
              f"{REMOTE_BATCH}, {WORKERS} workers, one cold shuffled epoch")  # fmt: skip
        print("| store | naive per-sample | chunkio in place (whole epoch) | x naive | "
              "chunkio after its first batch | chunkio requests/sample |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for fmt in ("h5", "zarr"):
            print(f"| {fmt} | {rr[f'naive per-sample {fmt}']:,.0f} | "
                  f"{rr[f'chunkio in place {fmt}']:,.0f} | {remote['x_naive'][fmt]:.0f}x | "
                  f"{rr[f'chunkio after its first batch {fmt}']:,.0f} | "
                  f"{remote['chunkio_requests_per_sample'][fmt]:.3f} |")  # fmt: skip
        print(json.dumps(remote))
        return
    result = run(images=args.images)
    r = result["samples_per_s"]
    print(f"{args.images} images 3x64x64, batch {BATCH}, {WORKERS} workers, shuffled epochs")
    print("| store | naive per-sample | chunkio in place | x naive | converted copy | "
          "in place / converted | labels per batch vs uniform |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for fmt in ("h5", "zarr"):
        n, p, c = (
            r[f"naive per-sample {fmt}"],
            r[f"chunkio in place {fmt}"],
            r[f"chunkio converted {fmt}"],
        )
        print(f"| {fmt} | {n:,.0f} | {p:,.0f} | {p / n:.1f}x | {c:,.0f} | {p / c:.2f} | "
              f"{result['mixing_vs_uniform'][fmt]:.0%} |")  # fmt: skip
    n, p, xb = (r[f"{k} xarray"] for k in ("naive per-sample", "chunkio in place", "xbatcher"))
    print(f"\nxarray to_zarr store: naive per-sample {n:,.0f}, chunkio in place {p:,.0f} "
          f"({p / n:.1f}x), xbatcher {xb:,.0f} ({p / xb:.1f}x); labels per batch vs uniform: "
          f"chunkio {result['mixing_vs_uniform']['xarray']:.0%}, xbatcher "
          f"{result['xbatcher_mixing_vs_uniform']:.0%}")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
