"""Patch reads: PatchDataset's batched reads vs a naive reader slicing the volume per patch.

On a small synthetic volume set (smooth int16 "tissue" plus noise, with a label volume),
converted once to Zarr and to HDF5 with the same spatial chunks, every reader serves the
same patch keys in the same batches:

* ``chunkio``: :class:`chunkio.patches.PatchDataset` ``read_patches`` - each chunk a batch
  touches decoded once, patches cut out of the decoded chunks (``cache_bytes=0`` still keeps
  the last batch's chunks, so a chunk shared with the next batch is not decoded again);
  ``chunkio+cache`` keeps up to 4 MiB of chunks per process (a quarter of the data, cold at
  the start of each pass);
* ``naive-zarr`` / ``naive-h5py``: ``array[v, z:z+p, y:y+p, x:x+p]`` per patch on the same
  files through zarr-python / h5py.

Reported per reader and patch order (``random``: RandomPatchSampler; ``grid``: a GridSampler
with 50% overlap, storage order): patches/s (one process, warm, best of 3 passes) and read
amplification =
bytes decoded / bytes delivered. chunkio counts what it decoded; for the naive readers it is
the chunks each slice touches (zarr decodes them all; h5py's 1 MiB chunk cache may spare a few
repeats - HDF5's own per-dataset 1 MiB chunk cache - so its figure is an upper bound).

    python -m benchmarks.bench_patches [--volumes 4] [--size 128] [--chunk 32] [--patch 48]
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from chunkio import Execution, Output
from chunkio.convert.volumes import convert_volumes
from chunkio.patches import GridSampler, PatchDataset, RandomPatchSampler

__all__ = ["make_volumes", "run"]

#: timed passes per reader; the best is reported
REPEATS = 3
#: PatchDataset's per-process chunk cache in the "chunkio+cache" rows (a quarter of the data)
CACHE_BYTES = 4 << 20


def make_volumes(
    root: Path, *, count: int, size: int, seed: int = 0
) -> tuple[list[str], list[str]]:
    """``count`` volumes of ``size``^3 int16 with smooth structure, and label volumes."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.linspace(0, 1, size)] * 3, indexing="ij"))
    images, labels = [], []
    for i in range(count):
        centres = rng.random((6, 3))
        field = sum(np.exp(-((grid - c[:, None, None, None]) ** 2).sum(0) / 0.02) for c in centres)
        image = (field * 1000 + rng.normal(0, 20, field.shape)).astype(np.int16)
        label = (field > 0.8).astype(np.uint8) + (field > 1.2).astype(np.uint8)
        images.append(str(root / f"img{i}.npy"))
        labels.append(str(root / f"lab{i}.npy"))
        np.save(images[-1], image)
        np.save(labels[-1], label)
    return images, labels


def _naive_rate(
    arrays: list[Any], keys: np.ndarray, patch: int, batch: int, chunk_nbytes: int, chunk: int
) -> tuple[float, float]:
    """Patches/s slicing ``arrays[v][z:z+p, ...]`` per patch; analytic amplification."""

    def read(k: np.ndarray) -> np.ndarray:
        v, z, y, x = k.tolist()
        return np.asarray(arrays[v][z : z + patch, y : y + patch, x : x + patch])

    read(keys[0])  # open and warm

    def epoch() -> None:
        for start in range(0, len(keys), batch):
            np.stack([read(k) for k in keys[start : start + batch]])

    rate = len(keys) / _best_time(epoch)
    touched = ((keys[:, 1:] + patch - 1) // chunk - keys[:, 1:] // chunk + 1).prod(axis=1)
    delivered = patch**3 * 2 * len(keys)
    return rate, float(touched.sum() * chunk_nbytes / delivered)


def _chunkio_rate(make: Any, keys: np.ndarray, batch: int) -> tuple[float, float]:
    """Patches/s of a fresh (cold cache, opened) dataset per pass; amplification of one pass."""
    best, amp = float("inf"), 0.0
    for _ in range(REPEATS):
        ds = make()
        before = ds.read_stats()  # opens this process's handle, reads nothing
        decoded, delivered = before.bytes_decoded, before.bytes_delivered
        t = time.perf_counter()
        for start in range(0, len(keys), batch):
            ds.read_patches(keys[start : start + batch])
        best = min(best, time.perf_counter() - t)
        stats = ds.read_stats()
        amp = (stats.bytes_decoded - decoded) / (stats.bytes_delivered - delivered)
    return len(keys) / best, amp


def _best_time(fn: Any, repeats: int = REPEATS) -> float:
    """Fastest of ``repeats`` runs: the machine's other load only ever slows a run down."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run(
    volumes: int = 4,
    size: int = 128,
    chunk: int = 32,
    patch: int = 48,
    batch: int = 8,
    patches: int = 256,
    root: str | None = None,
) -> dict[str, Any]:
    """Measure every reader on the same keys; returns the configuration and one row each."""
    import h5py
    import zarr

    base = Path(root or tempfile.mkdtemp(prefix="chunkio-patches-"))
    images, labels = make_volumes(base, count=volumes, size=size)
    paths = {}
    for fmt, suffix in (("zarr", ".zarr"), ("hdf5", ".h5")):
        paths[fmt] = str(base / f"volumes{suffix}")
        convert_volumes(
            images,
            paths[fmt],
            labels=labels,
            output=Output(chunks=chunk),
            execution=Execution(progress=False, overwrite=True, workers=1),
        )
    samplers = {
        "random": RandomPatchSampler(patches, seed=0),
        "grid": GridSampler(stride=patch // 2),
    }
    chunk_nbytes = chunk**3 * 2
    rows = []
    for order, sampler in samplers.items():
        keys = PatchDataset(paths["zarr"], (patch,) * 3, sampler=sampler).sampler.keys()[:patches]
        for (fmt, path), cache in itertools.product(paths.items(), (0, CACHE_BYTES)):
            rate, amp = _chunkio_rate(
                lambda p=path, c=cache: PatchDataset(
                    p, (patch,) * 3, fields=["image"], cache_bytes=c
                ),
                keys,
                batch,
            )
            rows.append(
                {
                    "reader": "chunkio+cache" if cache else "chunkio",
                    "format": fmt,
                    "order": order,
                    "patches_per_s": rate,
                    "read_amplification": amp,
                }
            )
        zimage = zarr.open_group(paths["zarr"], mode="r")["image"]
        zarr_arrays = [_Volume(zimage, v) for v in range(volumes)]
        rate, amp = _naive_rate(zarr_arrays, keys, patch, batch, chunk_nbytes, chunk)
        rows.append(
            {
                "reader": "naive-zarr",
                "format": "zarr",
                "order": order,
                "patches_per_s": rate,
                "read_amplification": amp,
            }
        )
        with h5py.File(paths["hdf5"], "r") as f:
            h5_arrays = [_Volume(f["image"], v) for v in range(volumes)]
            rate, amp = _naive_rate(h5_arrays, keys, patch, batch, chunk_nbytes, chunk)
        rows.append(
            {
                "reader": "naive-h5py",
                "format": "hdf5",
                "order": order,
                "patches_per_s": rate,
                "read_amplification": amp,
            }
        )
    config = {
        "volumes": volumes,
        "size": size,
        "chunk": chunk,
        "patch": patch,
        "batch": batch,
        "patches": patches,
        "dtype": "int16",
    }
    return {"config": config, "results": rows}


class _Volume:
    """``array[v]`` without reading it: slicing goes straight to the stacked array."""

    def __init__(self, array: Any, volume: int) -> None:
        self.array, self.volume = array, volume

    def __getitem__(self, box: tuple[slice, ...]) -> Any:
        return self.array[(self.volume, *box)]


def _table(result: dict[str, Any]) -> str:
    lines = [f"{'reader':<14} {'format':<6} {'order':<7} {'patches/s':>10} {'amplification':>14}"]
    for r in result["results"]:
        lines.append(
            f"{r['reader']:<14} {r['format']:<6} {r['order']:<7} "
            f"{r['patches_per_s']:>10.1f} {r['read_amplification']:>14.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (
        ("volumes", 4),
        ("size", 128),
        ("chunk", 32),
        ("patch", 48),
        ("batch", 8),
        ("patches", 256),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()
    result = run(args.volumes, args.size, args.chunk, args.patch, args.batch, args.patches)
    print(json.dumps(result["config"]))
    print(_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
