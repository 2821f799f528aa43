"""Label mixing: how many classes make_loader's batches hold, against a uniform shuffle.

The data: a class-sorted image folder as users have it, ``CLASSES`` classes of ``PER_CLASS``
64x64 natural-image JPEGs (:func:`benchmarks.data.make_jpeg_folder`), converted by
``chunkio.convert_images`` with defaults and, when it has the keyword, with ``shuffle=False``
(the stored order stays class-sorted, the previous default). For each conversion, worker count
(0 and ``workers``) and batch size (64 and 256), epoch 0 of
``make_loader(path, batch, fields=["image", "label"], num_workers=w, seed=0)``: mean distinct
classes per batch and the largest label share, each against its exact expectation under a
uniform shuffle, and their ratios (:mod:`chunkio.sampling.label_metrics`: 1.0 is as mixed
as a uniform shuffle, lower is worse). Whether make_loader warned (``LabelMixingWarning``)
is recorded too.

make_loader's default mixing pool (64 MiB) holds most of this 75 MB dataset, which a real one
(ImageNet: ~190 GB decoded) never is: rows with ``pool_bytes`` set to ``SMALL_POOLS`` of the
dataset (at least one chunk; 0 workers, the order does not depend on them) show what a dataset
that many times the pool's size sees. The stored order of each conversion is scored the same
way, chunk by chunk.

    python -m benchmarks.bench_mixing [--quick] [--workers 2] [--root DIR]
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["run"]

CLASSES = 20
PER_CLASS = 300
QUICK_PER_CLASS = 40
SIZE = 64
BATCH_SIZES = (64, 256)
#: pools as fractions of the dataset's bytes, as for datasets 4 and 16 times the pool's size
SMALL_POOLS = (1 / 4, 1 / 16)
SEED = 0
DEFAULT = "default"
SORTED = "class-sorted (shuffle=False)"


def _convert(src: Path, dst: Path, **kw: Any) -> float:
    import chunkio

    start = time.perf_counter()
    chunkio.convert_images(
        src, dst, **kw, execution=chunkio.Execution(progress=False, overwrite=True)
    )
    return time.perf_counter() - start


def _labels(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Stored labels and chunk sizes."""
    import chunkio

    ds = chunkio.ChunkDataset(path, fields="label")
    return ds.read_batch(np.arange(len(ds)))["label"], ds.chunk_sizes()


def _conversions(images: Path, root: Path) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """Paths of the datasets made, and each conversion's time and stored-order mixing."""
    import chunkio
    from chunkio.sampling.label_metrics import stored_label_order

    paths = {DEFAULT: root / "mixing-default.zarr"}
    conversions: dict[str, dict[str, Any]] = {
        DEFAULT: {"convert_s": _convert(images, paths[DEFAULT])}
    }
    if "shuffle" in inspect.signature(chunkio.convert_images).parameters:
        paths[SORTED] = root / "mixing-class-sorted.zarr"
        conversions[SORTED] = {"convert_s": _convert(images, paths[SORTED], shuffle=False)}
    else:
        conversions[SORTED] = {"skipped": "convert_images has no shuffle keyword yet"}
    for name, path in paths.items():
        stored = stored_label_order(*_labels(path))
        conversions[name] |= {f"stored_{k}": v for k, v in stored.items()}
    return paths, conversions


def _epoch_labels(
    path: Path, *, batch_size: int, workers: int, **kw: Any
) -> tuple[list[np.ndarray], bool]:
    """Labels of each batch of epoch 0 (copied: batches view reused memory); warned or not."""
    import chunkio

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = chunkio.make_loader(
            path, batch_size, fields=["image", "label"], num_workers=workers, seed=SEED, **kw
        )
    warned = False
    for w in caught:  # make_loader's own label check; anything else is passed on
        if w.category.__name__ == "LabelMixingWarning":
            warned = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    with loader:
        return [y.numpy().copy() for _, y in loader], warned


def _dataset_bytes(path: Path) -> int:
    """Decoded bytes of every field (what ``pool_bytes`` is measured against)."""
    import chunkio

    ds = chunkio.ChunkDataset(path)
    return ds.chunk_nbytes() // ds.samples_per_chunk * len(ds)


def _row(
    path: Path, counts: np.ndarray, *, batch_size: int, workers: int, pool: float | None
) -> dict[str, Any]:
    import chunkio
    from chunkio.sampling.label_metrics import label_mixing_of_batches

    total, kw = _dataset_bytes(path), {}
    if pool is not None:
        pool_bytes = max(int(total * pool), chunkio.ChunkDataset(path).chunk_nbytes())
        kw["ordering"] = chunkio.Ordering(pool_bytes=pool_bytes)
    pool_bytes = kw["ordering"].pool_bytes if "ordering" in kw else _default_pool_bytes()
    start = time.perf_counter()
    labels, warned = _epoch_labels(path, batch_size=batch_size, workers=workers, **kw)
    return {
        "pool": "default" if pool is None else "pool_bytes",
        "pool_fraction": min(1.0, pool_bytes / total),
        "label_warning": warned,
        "epoch_s": time.perf_counter() - start,
        **label_mixing_of_batches(labels, counts),
    }


def _default_pool_bytes() -> int:
    import chunkio

    return chunkio.Ordering().pool_bytes


def _settings(workers: int) -> list[tuple[int, int, float | None]]:
    """(workers, batch size, pool as a fraction of the data or None) of one conversion's rows."""
    import chunkio

    rows: list[tuple[int, int, float | None]] = [
        (w, b, None) for w in sorted({0, workers}) for b in BATCH_SIZES
    ]
    if hasattr(chunkio, "Ordering"):  # the mixing pool is chosen through it
        rows += [(0, b, pool) for pool in SMALL_POOLS for b in BATCH_SIZES]
    return rows


def run(quick: bool = False, workers: int = 2, root: str | Path | None = None) -> dict[str, Any]:
    """Label mixing per conversion, worker count and batch size, as one JSON-able dict.

    ``root``: working folder (JPEGs are reused when already there; default: a temporary one).
    """
    if root is None:
        with tempfile.TemporaryDirectory(prefix="chunkio-bench-mixing-") as tmp:
            return run(quick=quick, workers=workers, root=tmp)
    from benchmarks.data import make_jpeg_folder

    start = time.perf_counter()
    per_class = QUICK_PER_CLASS if quick else PER_CLASS
    root = Path(root)
    images = make_jpeg_folder(
        root / f"mixing-jpegs-{per_class}",
        n_images=CLASSES * per_class,
        size=SIZE,
        n_classes=CLASSES,
    )
    paths, conversions = _conversions(images, root)
    counts = np.bincount(_labels(paths[DEFAULT])[0], minlength=CLASSES)
    rows = []
    for name in (DEFAULT, SORTED):
        for w, b, pool in _settings(workers):
            head = {"conversion": name, "workers": w, "batch_size": b}
            if name in paths:
                row = _row(paths[name], counts, batch_size=b, workers=w, pool=pool)
                rows.append(head | row)
            else:
                rows.append(head | {"skipped": conversions[name]["skipped"]})
    return {
        "settings": {
            "quick": quick,
            "classes": CLASSES,
            "per_class": per_class,
            "image_shape": [3, SIZE, SIZE],
            "batch_sizes": list(BATCH_SIZES),
            "workers": sorted({0, workers}),
            "seed": SEED,
            "dataset_mib": _dataset_bytes(paths[DEFAULT]) / 2**20,
            "default_pool_mib": _default_pool_bytes() / 2**20,
        },
        "conversions": conversions,
        "rows": rows,
        "elapsed_s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    from benchmarks.report import mixing_markdown

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_PER_CLASS} images per class")
    p.add_argument("--workers", type=int, default=2, help="the worker count besides 0")
    p.add_argument("--root", help="working folder (default: a temporary one)")
    args = p.parse_args(argv)
    results = run(quick=args.quick, workers=args.workers, root=args.root)
    print("\n".join(mixing_markdown(results)))


if __name__ == "__main__":
    main()
