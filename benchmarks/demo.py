"""`make demo`: convert a small real image dataset, read a shuffled epoch, print samples/s.

Converts ~2,000 natural-image JPEGs (class folders) into Zarr v3 and HDF5 with one call each,
then reads one shuffled epoch with 2 workers through ``chunkio.make_loader`` and through the
per-sample h5py / zarr Datasets users write today, and prints samples/s and read
amplification side by side.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

import chunkio
from benchmarks.baselines import NaiveH5Dataset, NaiveZarrDataset
from benchmarks.data import make_jpeg_folder
from chunkio.label_check import labels_of


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
        chunkio.convert_images(jpegs, dst, workers=args.workers, progress=False, overwrite=True)
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
    quality = chunkio.shuffle_quality(batches, sizes, labels_of(ds))
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


if __name__ == "__main__":
    main()
