"""`make demo`: convert a small real image dataset, read a shuffled epoch, print samples/s.

Converts ~2,000 natural-image JPEGs (class folders) into Zarr v3 and HDF5 with one call each,
then reads one shuffled epoch with 2 workers through ``chunkio.make_loader`` and through the
per-sample h5py / zarr Datasets users write today, and prints samples/s and read
amplification side by side. Then the same images as a user writes them with plain h5py
(sorted by label, gzip chunks of 32 samples, labels contiguous), read in place by chunkio
next to the per-sample h5py Dataset on that file.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from torch.utils.data import DataLoader

import chunkio
from benchmarks.baselines import NaiveH5Dataset, NaiveZarrDataset
from benchmarks.data import make_jpeg_folder
from chunkio.sampling.label_check import labels_of


def rate(loader: Iterable[Any], budget_s: float, epochs: int = 1) -> float:
    """Samples/s over ``epochs`` epochs, or over the first ``budget_s`` seconds if slower."""
    n = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            first = batch[0] if isinstance(batch, (tuple, list)) else next(iter(batch.values()))
            n += len(first)
            if time.perf_counter() - start > budget_s:
                return n / (time.perf_counter() - start)
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default="demo-data")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args(argv)
    root = Path(args.root)
    jpegs = make_jpeg_folder(root / "jpeg", n_images=args.images)
    outputs = {}
    for fmt, suffix in (("zarr", ".zarr"), ("hdf5", ".h5")):
        dst = root / f"images{suffix}"
        t = time.perf_counter()
        chunkio.convert_images(
            jpegs,
            dst,
            execution=chunkio.Execution(workers=args.workers, progress=False, overwrite=True),
        )
        print(f"converted {args.images} JPEGs -> {dst} in {time.perf_counter() - t:.1f} s")
        outputs[fmt] = str(dst)

    rows = []
    for fmt, path in outputs.items():
        loader = chunkio.make_loader(
            path, args.batch_size, fields=["image", "label"], num_workers=args.workers
        )
        rate(loader, 60)  # warm-up epoch: workers start, page cache filled
        rows.append((f"chunkio make_loader ({fmt})", rate(loader, 60, epochs=5)))
    for name, ds in (
        ("naive per-sample h5py Dataset", NaiveH5Dataset(outputs["hdf5"])),
        ("naive per-sample zarr Dataset", NaiveZarrDataset(outputs["zarr"])),
    ):
        dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
        rows.append((name, rate(dl, 10)))
    naive = rows[2][1]
    print(f"\nshuffled epoch, {args.workers} workers, batch {args.batch_size}:")
    for name, r in rows:
        print(f"  {name:32s} {r:12,.0f} samples/s   {r / naive:7.1f}x naive h5py")

    your_own_file(root / "user.h5", outputs["hdf5"], args.batch_size, args.workers)

    with chunkio.make_loader(outputs["zarr"], args.batch_size, num_workers=0) as probe:
        sampler, ds = probe.sampler, probe.dataset
    batches = sampler.batches(0)
    sizes = ds.chunk_sizes()
    amp = chunkio.read_amplification(
        batches,
        sizes,
        cache_chunks=sampler.capacity_chunks(ds.samples_per_chunk, args.workers),
        readers=args.workers,
        rows=sampler.reader_rows,
    )
    quality = chunkio.shuffle_quality(batches, sizes, labels_of(ds.label_source()))
    print(
        f"\nread amplification (chunk decodes per chunk needed), default loader: {amp:.3f}"
        f"  (mixing pool of {sampler.pool} samples, {sampler.lanes} lanes, "
        f"{ds.samples_per_chunk} samples per chunk)"
    )
    print(
        "what training sees (1.0 = uniform shuffle): "
        f"chunk diversity {quality['chunk_diversity']:.2f}, "
        f"distinct labels per batch {quality['distinct_labels']:.1f} vs "
        f"{quality['uniform_distinct_labels']:.1f} ({quality['distinct_labels_ratio']:.0%})"
    )


def your_own_file(path: Path, converted: str, batch_size: int, workers: int) -> None:
    """The images as a user writes them with plain h5py, read in place: no conversion."""
    ds = chunkio.ChunkDataset(converted)
    batch = ds.read_batch(list(range(len(ds))))
    order = np.argsort(batch["label"], kind="stable")  # users' files are often sorted by label
    with h5py.File(path, "w") as f:
        images = batch["image"][order]
        f.create_dataset("images", data=images, chunks=(32, *images.shape[1:]), compression="gzip")
        f.create_dataset("labels", data=batch["label"][order])
    fields = {"image": "images", "label": "labels"}
    loader = chunkio.make_loader(path, batch_size, fields=fields, num_workers=workers)
    rate(loader, 60)  # warm-up epoch
    chunkio_rate = rate(loader, 60, epochs=5)
    naive = DataLoader(NaiveH5Dataset(str(path), "images", "labels"), batch_size=batch_size,
                       shuffle=True, num_workers=workers)  # fmt: skip
    naive_rate = rate(naive, 10)
    print(f"\nyour own h5py file ({path}: gzip chunks of 32, sorted by label), read in place:")
    print(f"  {'chunkio make_loader(fields=...)':32s} {chunkio_rate:12,.0f} samples/s   "
          f"{chunkio_rate / naive_rate:7.1f}x naive h5py")  # fmt: skip
    print(f"  {'naive per-sample h5py Dataset':32s} {naive_rate:12,.0f} samples/s")
    sampler, read = loader.sampler, loader.dataset
    quality = chunkio.shuffle_quality(
        sampler.batches(0), read.chunk_sizes(), labels_of(read.label_source())
    )
    got, uniform = quality["distinct_labels"], quality["uniform_distinct_labels"]
    ratio = quality["distinct_labels_ratio"]
    print(f"  distinct labels per batch {got:.1f} vs uniform {uniform:.1f} ({ratio:.0%})")


if __name__ == "__main__":
    main()
