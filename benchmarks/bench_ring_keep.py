"""Kept-batch detection on the ring: what it costs when nothing is kept (A/B in one run).

Two loaders over the same data and order, in one process, epochs interleaved:

``before``
    The ring as it was before kept batches were detected (a private switch,
    ``_Session.keep_kept = False``): persistent per-slot tensors, a slot reused as soon as it
    is released, ``workers * prefetch + 1`` slots.
``after``
    The default: fresh arrays per batch watched through weak references, a released slot
    waiting one more release (one slot more, so as many batches are in flight), a kept
    batch's pages moved out of the ring.

Nothing is kept in either (``for batch in loader`` only counts samples), so the ratio is the
price of the check itself. Workers hold the decoded arrays in RAM (``preload_bytes``): no
decode, so the rate is the transport's own limit, where an overhead shows most. Batches of
256 3x96x96 images (7 MiB each, a ring of 42 MiB with 2 workers) are past the CPU caches.
A last epoch of ``after`` (not part of the ratio) keeps every batch: its rate, the regions
moved and the field arrays copied show what keeping costs.

Run ``python -m benchmarks.bench_ring_keep``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import chunkio
from benchmarks.bench_transport import make_images
from chunkio.transport.iterator import _Session

__all__ = ["run"]


def _epoch(loader: Any, *, keep: bool = False) -> tuple[float, list[Any]]:
    """Samples/s of one epoch, and the batches kept (none unless ``keep``)."""
    kept: list[Any] = []
    n = 0
    start = time.perf_counter()
    for batch in loader:
        n += len(batch[0])
        if keep:
            kept.append(batch)
    return n / (time.perf_counter() - start), kept


def _moved(loader: Any) -> int:
    return int(loader._route._session.detached)


def run(
    *,
    root: str | Path | None = None,
    num_samples: int = 4096,
    batch_size: int = 256,
    num_workers: int = 2,
    rounds: int = 5,
) -> dict[str, Any]:
    """Median samples/s of ``before`` and ``after`` over ``rounds`` interleaved epochs."""
    workdir = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="bench-keep-"))
    path = workdir / "keep.zarr"
    images = make_images(num_samples)
    labels = (np.arange(num_samples) % 10).astype(np.int64)
    chunkio.write_arrays(
        path,
        {"image": images, "label": labels},
        output=chunkio.Output(compression="zstd"),
        execution=chunkio.Execution(overwrite=True, progress=False),
    )
    loaders = {}
    for name, keep_kept in (("before", False), ("after", True)):
        _Session.keep_kept = keep_kept  # read once, when the loader's session starts
        try:
            ds = chunkio.ChunkDataset(path, ["image", "label"], preload_bytes=2**62)
            loaders[name] = chunkio.make_loader(
                ds, batch_size, num_workers=num_workers, seed=0, workers=chunkio.Workers()
            )
            _epoch(loaders[name])  # warm-up: workers start and load the arrays
        finally:
            _Session.keep_kept = True
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    try:
        for r in range(rounds):
            # alternate which goes first, so a trend in the machine's load favours neither
            for name in loaders if r % 2 == 0 else reversed(list(loaders)):
                rates[name].append(_epoch(loaders[name])[0])
        moved_unkept = {name: _moved(loader) for name, loader in loaders.items()}
        kept_rate, kept = _epoch(loaders["after"], keep=True)
        _epoch(loaders["after"])  # the slots still holding kept batches come round
        moved_kept = _moved(loaders["after"]) - moved_unkept["after"]
        copied_kept = int(loaders["after"]._route._session.kept.copied)
        del kept
    finally:
        for loader in loaders.values():
            loader.close()
    median = {name: float(np.median(r)) for name, r in rates.items()}
    return {
        "settings": {
            "num_samples": num_samples,
            "sample_shape": list(images.shape[1:]),
            "batch_size": batch_size,
            "num_workers": num_workers,
            "rounds": rounds,
        },
        "samples_per_s": median,
        "rounds_samples_per_s": rates,
        "after_over_before": median["after"] / median["before"],
        "regions_moved_when_nothing_kept": moved_unkept,
        "after_every_batch_kept_samples_per_s": kept_rate,
        "regions_moved_when_every_batch_kept": moved_kept,
        "fields_copied_when_every_batch_kept": copied_kept,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    out = run(
        num_samples=args.samples,
        batch_size=args.batch_size,
        num_workers=args.workers,
        rounds=args.rounds,
    )
    print(out["settings"])
    for name, r in out["samples_per_s"].items():
        each = ", ".join(f"{x:,.0f}" for x in out["rounds_samples_per_s"][name])
        print(f"  {name:8s} {r:12,.0f} samples/s (median; rounds: {each})")
    print(f"  after / before: {out['after_over_before']:.3f}")
    print(f"  regions moved, nothing kept: {out['regions_moved_when_nothing_kept']}")
    kept = out["after_every_batch_kept_samples_per_s"]
    print(f"  every batch kept: {kept:,.0f} samples/s, ", end="")
    print(f"{out['regions_moved_when_every_batch_kept']} regions moved, ", end="")
    print(f"{out['fields_copied_when_every_batch_kept']} field arrays copied")


if __name__ == "__main__":
    main()
