"""Your own HDF5 file and Zarr store, read in place, next to what users write today.

A file as a user makes it with plain h5py: ``images`` (N, 3, 64, 64) uint8 in gzip chunks of
32 samples (h5py's default compressor and level), ``labels`` (N,) contiguous, sorted by label.
The same arrays as a zarr-python v3 group (Zstd chunks of 32 samples). Side by side, shuffled
epochs, batch 256, 2 workers:

* a naive per-sample ``Dataset`` (h5py / zarr-python, one ``__getitem__`` per sample);
* chunkio reading the user's store in place (``make_loader(path, fields={...})``);
* chunkio reading the same data converted by ``write_arrays`` with the same codec.

Also the distinct labels per batch against a uniform shuffle's (the store is sorted by label).

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
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import zarr
from torch.utils.data import DataLoader

import chunkio
from benchmarks.baselines import NaiveH5Dataset, NaiveZarrDataset
from benchmarks.bench_loaders import timed_rate
from benchmarks.data import sample_photos
from benchmarks.report import check
from chunkio.mixing import uniform_distinct_labels

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
            mixing[fmt] = _mixing(chunkio.make_loader(path, BATCH, fields=FIELDS, num_workers=0,
                                                      seed=0, copy=True), y)  # fmt: skip
            copy = root / f"copy.{fmt}"
            chunkio.write_arrays(copy, {"image": x, "label": y}, compression=codec,
                                 samples_per_chunk=32, progress=False)  # fmt: skip
            converted = chunkio.make_loader(copy, BATCH, fields=["image", "label"],
                                            num_workers=WORKERS, seed=0)  # fmt: skip
            rows[f"chunkio converted {fmt}"] = timed_rate(converted, budget_s=budget_s, warmup=True)
        return {
            "images": images,
            "samples_per_s": rows,
            "mixing_vs_uniform": mixing,
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


def _checks(rows: dict[str, float], mixing: dict[str, float]) -> list[dict[str, Any]]:
    """The targets of reading data in place (the issue that asked for it)."""
    r = rows
    return [
        check(
            "your h5py file in place / naive per-sample h5py",
            r["chunkio in place h5"] / r["naive per-sample h5"],
            20.0,
        ),
        check(
            "your h5py file in place / chunkio on a converted copy (gzip)",
            r["chunkio in place h5"] / r["chunkio converted h5"],
            0.8,
        ),
        check(
            "your zarr store in place / naive per-sample zarr-python",
            r["chunkio in place zarr"] / r["naive per-sample zarr"],
            10.0,
        ),
        check(
            "label-sorted store: distinct labels per batch / uniform shuffle's",
            min(mixing.values()),
            0.9,
        ),
    ]


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
    print(json.dumps(result))


if __name__ == "__main__":
    main()
