"""Transport benchmark: how fast batches reach the consumer, by route, back to back.

One shuffled chunk-aware batch order, several ways of delivering it:

``ring_zstd``
    ``make_loader()`` (``Workers(transport="ring")``): workers decode chunks straight into
    shared-memory slots.
``dataloader_zstd``
    ``make_loader(workers=Workers(transport="dataloader"))``: the same reads through a torch
    DataLoader, which moves every batch through a freshly allocated shared-memory segment.
``ring_preloaded``, ``dataloader_preloaded``
    The same two routes over a ``ChunkDataset`` whose workers hold the decoded arrays in RAM
    (``preload_bytes``): no decode, so these compare the transports themselves.
``numpy_in_process``
    The data already decoded in RAM, gathered with ``np.take`` in this process: no decode, no
    transport (the ceiling for one core).
``in_memory_dataloader``
    That same in-memory gather served by a standard DataLoader with the same workers: the cost
    of the DataLoader transport alone.

Run ``python -m benchmarks.bench_transport``; :func:`run` returns the figures for the suite.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

import chunkio
from benchmarks.baselines import InMemoryBatchDataset

__all__ = ["make_images", "run"]


def make_images(n: int, *, size: int = 96, seed: int = 0) -> np.ndarray:
    """``n`` RGB ``size``x``size`` uint8 crops of natural photos, (N, 3, size, size)."""
    from benchmarks.data import sample_photos

    rng = np.random.default_rng(seed)
    photos = sample_photos()
    out = np.empty((n, 3, size, size), dtype=np.uint8)
    for i in range(n):
        photo = photos[i % len(photos)]
        y = int(rng.integers(0, photo.shape[0] - size))
        x = int(rng.integers(0, photo.shape[1] - size))
        out[i] = photo[y : y + size, x : x + size].transpose(2, 0, 1)
    return out


def _epoch_rate(batches: Iterable[Any]) -> float:
    n = 0
    start = time.perf_counter()
    for batch in batches:
        n += len(batch[0])
    return n / (time.perf_counter() - start)


def _interleaved(sources: dict[str, Iterable[Any]], epochs: int) -> dict[str, float]:
    """Median samples/s of each source over ``epochs`` rounds, one epoch each, interleaved.

    One untimed warm-up epoch each first (workers start, caches fill). Interleaving spreads
    changes in the machine's load (it is shared) over every source instead of one.
    """
    for batches in sources.values():
        _epoch_rate(batches)
    rounds: dict[str, list[float]] = {name: [] for name in sources}
    for _ in range(epochs):
        for name, batches in sources.items():
            rounds[name].append(_epoch_rate(batches))
    return {name: float(np.median(r)) for name, r in rounds.items()}


def _numpy_in_process(images: np.ndarray, labels: np.ndarray, order: list[list[int]]) -> Any:
    buf = np.empty((max(map(len, order)), *images.shape[1:]), images.dtype)
    for idx in order:
        index = np.asarray(idx)
        x = np.take(images, index, axis=0, out=buf[: len(index)], mode="clip")
        yield x, labels[index]


def run(
    *,
    root: str | Path | None = None,
    num_samples: int = 8192,
    batch_size: int = 256,
    num_workers: int = 2,
    epochs: int = 3,
    fmt: str = "zarr",
    context: str | None = None,
) -> dict[str, Any]:
    """Samples/s of each route (see the module docstring) for one dataset, back to back.

    Every route reads the same shuffled order; ``epochs`` timed rounds, one epoch per route
    each, interleaved; the median per route is reported.

    Returns ``{"settings": {...}, "samples_per_s": {route: float}}``.
    """
    workdir = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="bench-transport-"))
    workdir.mkdir(parents=True, exist_ok=True)
    images = make_images(num_samples)
    labels = (np.arange(num_samples) % 10).astype(np.int64)
    path = workdir / f"transport-{num_samples}{'.zarr' if fmt == 'zarr' else '.h5'}"
    result = chunkio.write_arrays(
        path,
        {"image": images, "label": labels},
        output=chunkio.Output(compression="zstd"),
        execution=chunkio.Execution(overwrite=True),
    )
    loaders = {}
    for transport in ("ring", "dataloader"):
        # zstd: make_loader's own dataset (decode in the workers); preloaded: each worker
        # holds the decoded arrays and only gathers, so the rate is the transport's limit
        preloaded = chunkio.ChunkDataset(path, ["image", "label"], preload_bytes=2**62)
        for name, source in (("zstd", str(path)), ("preloaded", preloaded)):
            loaders[f"{transport}_{name}"] = chunkio.make_loader(
                source,
                batch_size,
                fields=["image", "label"],
                num_workers=num_workers,
                seed=0,
                workers=chunkio.Workers(transport=transport, context=context),
            )
    order = [list(b) for b in loaders["ring_zstd"].sampler]
    sources: dict[str, Iterable[Any]] = dict(loaders)
    sources["numpy_in_process"] = _Replay(lambda: _numpy_in_process(images, labels, order))
    sources["in_memory_dataloader"] = DataLoader(
        InMemoryBatchDataset(images, labels),
        batch_sampler=order,
        num_workers=num_workers,
        collate_fn=chunkio.collate,
        persistent_workers=True,
        multiprocessing_context=context,
    )
    try:
        rates = _interleaved(sources, epochs)
    finally:
        for loader in loaders.values():
            loader.close()
    settings = {
        "num_samples": num_samples,
        "sample_shape": list(images.shape[1:]),
        "batch_size": batch_size,
        "num_workers": num_workers,
        "samples_per_chunk": result.samples_per_chunk,
        "format": fmt,
        "rounds": epochs,
    }
    return {"settings": settings, "samples_per_s": rates}


class _Replay:
    """A re-iterable over a generator factory (each pass is a new generator)."""

    def __init__(self, make: Any) -> None:
        self._make = make

    def __iter__(self) -> Any:
        return iter(self._make())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--format", default="zarr", choices=["zarr", "hdf5"])
    args = p.parse_args(argv)
    out = run(
        num_samples=args.samples,
        batch_size=args.batch_size,
        num_workers=args.workers,
        epochs=args.epochs,
        fmt=args.format,
    )
    print(out["settings"])
    for name, r in out["samples_per_s"].items():
        print(f"  {name:22s} {r:12,.0f} samples/s")


if __name__ == "__main__":
    main()
