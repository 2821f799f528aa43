"""Training parity: does a small CNN learn as well from chunkio's batches as from a uniform shuffle?

The data is what a user has: scikit-learn's bundled handwritten digits (1797 8x8 images,
offline) upscaled to 32x32, split 80/20 (stratified, seeded), the training part written as a
class-folder tree of PNGs (``root/<digit>/<i>.png``) and converted with
``chunkio.convert_images`` defaults; when ``convert_images`` has a ``shuffle`` keyword, a second
conversion with ``shuffle=False`` keeps the class-sorted storage order (the previous default).

One CNN (2 conv layers + linear), the same initial weights for every run (``torch.manual_seed``),
Adam, batch 64, ``EPOCHS`` epochs, ``torch.set_num_threads`` pinned, trained from:

``chunkio make_loader, default conversion``
    ``make_loader(path, 64, fields=["image", "label"], num_workers=workers, seed=s)``.
``chunkio make_loader, class-sorted conversion``
    The same on the ``shuffle=False`` conversion.
``uniform shuffle (DataLoader, in memory)``
    Every training sample read once from the default conversion into a ``TensorDataset``,
    through ``DataLoader(shuffle=True, batch_size=64, generator=seeded by s)``: the reference.

Each loader trains once per loader seed ``s`` in ``0 .. SEEDS - 1`` (one in quick mode): with
360 test images one order's accuracy moves by a point or two on its own, so the mean over
seeds is what is compared. Per loader: test accuracy after the last epoch (the mean, each
seed's, and the mean after each epoch), the loader's start (make_loader: worker start; the
reference: reading every sample into memory), samples/s of the loader alone over one warm
epoch without the model (and its first epoch's seconds), the training time, and the
label mixing of epoch 0's batches against a uniform shuffle
(:func:`chunkio.sampling.label_metrics.label_mixing_of_batches`). The check: chunkio's
default accuracy within ``PARITY_POINTS`` (1) point of the uniform shuffle's.

    python -m benchmarks.bench_training [--quick] [--workers 2] [--epochs 6] [--seeds 3]
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Digits", "checks", "make_digits", "run"]

BATCH_SIZE = 64
EPOCHS = 6
QUICK_EPOCHS = 2
SIZE = 32
SEED = 0
#: torch threads for the model, the same for every loader so the runs are comparable
THREADS = 2
LEARNING_RATE = 2e-3
#: the project's target: chunkio's default within this many accuracy points of uniform
PARITY_POINTS = 1.0

#: loader seeds per loader in a full run (the accuracy is their mean: one order is noisy)
SEEDS = 3

#: the conversions: ``convert_images`` defaults, and the class-sorted storage order
DEFAULT_CONVERSION = "default"
SORTED_CONVERSION = "class-sorted (shuffle=False)"
NO_SHUFFLE = "convert_images has no shuffle keyword yet"

DEFAULT = "chunkio make_loader, default conversion"
SORTED = "chunkio make_loader, class-sorted conversion"
WHOLE_CHUNKS = "class-sorted, batches of whole chunks (pool of 1 chunk, 1 lane: the old order)"
UNIFORM = "uniform shuffle (DataLoader, in memory)"
#: the chunkio loaders, the conversion each reads and make_loader options beyond the defaults;
#: the last is what training saw before the mixing pool and lanes: each batch a few chunks
LOADERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (DEFAULT, DEFAULT_CONVERSION, {}),
    (SORTED, SORTED_CONVERSION, {}),
    (WHOLE_CHUNKS, SORTED_CONVERSION, {"pool_bytes": "one chunk", "lanes": 1}),
)

Batches = Callable[[int], Iterable[Any]]


@dataclass(frozen=True)
class Digits:
    """The digits split: a PNG class-folder tree of the training part, test arrays in memory."""

    tree: Path
    train_labels: np.ndarray
    test_images: np.ndarray  # (n, 32, 32) uint8, one channel
    test_labels: np.ndarray


def make_digits(root: Path, *, seed: int = SEED, test_size: float = 0.2) -> Digits:
    """Upscale the digits to 32x32 and write the training split as ``root/<digit>/<i>.png``."""
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.round(digits.images * (255 / 16)).astype(np.uint8)  # values are 0..16
    images = np.stack(
        [
            np.asarray(Image.fromarray(p).resize((SIZE, SIZE), Image.Resampling.BILINEAR))
            for p in pixels
        ]
    )
    labels = digits.target.astype(np.int64)
    train, test = train_test_split(
        np.arange(labels.size), test_size=test_size, stratify=labels, random_state=seed
    )
    for i in train:
        folder = root / str(labels[i])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i]).save(folder / f"{i:04d}.png")
    return Digits(root, labels[train], images[test], labels[test])


def _has_shuffle_keyword() -> bool:
    """Whether ``convert_images`` can keep the class-sorted order (``shuffle=False``)."""
    import chunkio

    return "shuffle" in inspect.signature(chunkio.convert_images).parameters


def _convert(tree: Path, dst: Path, **kw: Any) -> float:
    import chunkio

    start = time.perf_counter()
    chunkio.convert_images(
        tree, dst, **kw, execution=chunkio.Execution(progress=False, overwrite=True)
    )
    return time.perf_counter() - start


def _stored_order(path: Path) -> dict[str, float]:
    import chunkio
    from chunkio.sampling.label_metrics import stored_label_order

    ds = chunkio.ChunkDataset(path, fields="label")
    labels = ds.read_batch(np.arange(len(ds)))["label"]
    return stored_label_order(labels, ds.chunk_sizes())


def _model(channels: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(SEED)  # the same initial weights for every loader
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (SIZE // 4) ** 2, 10),
    )


def _accuracy(model: Any, images: Any, labels: Any) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        predicted = model(images.float() / 255).argmax(dim=1)
    model.train()
    return float((predicted == labels).float().mean())


def _warm_up(channels: int) -> None:
    """Throwaway steps, so the first loader measured does not pay torch's lazy start-up."""
    import torch
    import torch.nn.functional as F

    model = _model(channels)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    images, labels = torch.rand(BATCH_SIZE, channels, SIZE, SIZE), torch.zeros(BATCH_SIZE).long()
    for _ in range(3):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    _accuracy(model, images, labels)


def _loader_alone(batches: Batches) -> dict[str, float]:
    """A cold epoch (workers start) then a warm one, iterating only: the loader's own rate."""
    times, samples = [], 0
    for epoch in (0, 1):
        start, samples = time.perf_counter(), 0
        for _, y in batches(epoch):
            samples += len(y)
        times.append(time.perf_counter() - start)
    return {"first_epoch_s": times[0], "loader_samples_per_s": samples / times[1]}


@dataclass(frozen=True)
class _Run:
    accuracy: list[float]  # after each epoch
    train_s: float
    first_epoch_labels: list[np.ndarray]


def _train(batches: Batches, *, epochs: int, test: tuple[Any, Any]) -> _Run:
    import torch
    import torch.nn.functional as F

    model = _model(test[0].shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    seen: list[np.ndarray] = []
    accuracy, train_s = [], 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        for x, y in batches(epoch):
            # loader batches may view reused memory: float() copies the images at once
            images, labels = x.float() / 255, y.long()
            if epoch == 0:
                seen.append(labels.numpy().copy())
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        train_s += time.perf_counter() - start
        accuracy.append(_accuracy(model, *test))
    return _Run(accuracy, train_s, seen)


def _summarise(runs: list[_Run], counts: Any) -> dict[str, Any]:
    """Accuracy over the loader seeds, and label mixing of every seed's epoch-0 batches."""
    from chunkio.sampling.label_metrics import label_mixing_of_batches

    final = [r.accuracy[-1] for r in runs]
    return {
        "accuracy": float(np.mean(final)),
        "accuracy_by_seed": final,
        "accuracy_by_epoch": np.mean([r.accuracy for r in runs], axis=0).tolist(),
        "train_s": float(np.mean([r.train_s for r in runs])),
        **label_mixing_of_batches([y for r in runs for y in r.first_epoch_labels], counts),
    }


def _chunkio_batches(loader: Any) -> Batches:
    def epoch_batches(epoch: int) -> Iterator[Any]:
        loader.set_epoch(epoch)  # the order is a function of (seed, epoch): timing passes are free
        yield from loader

    return epoch_batches


def _uniform_batches(images: Any, labels: Any, seed: int) -> Batches:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(images, labels)

    def epoch_batches(epoch: int) -> Iterable[Any]:
        generator = torch.Generator().manual_seed(1000 * seed + epoch)
        return DataLoader(data, batch_size=BATCH_SIZE, shuffle=True, generator=generator)

    return epoch_batches


@dataclass(frozen=True)
class _Setup:
    """What every loader's runs share."""

    epochs: int
    seeds: tuple[int, ...]
    test: tuple[Any, Any]
    counts: np.ndarray


def _chunkio_row(
    name: str, path: Path, *, workers: int, setup: _Setup, options: dict[str, Any]
) -> dict[str, Any]:
    import chunkio

    options = dict(options)
    if options.get("pool_bytes") == "one chunk":
        layout = chunkio.ChunkDataset(path).layout
        options["pool_bytes"] = sum(f.sample_nbytes for f in layout.fields) * (
            layout.samples_per_chunk
        )
    if hasattr(chunkio, "Ordering"):  # the keywords it replaced warn (older trees: keywords)
        moved = {k: options.pop(k) for k in ("pool_bytes", "lanes") if k in options}
        if moved:
            options["ordering"] = chunkio.Ordering(**moved)
    runs, alone, transport, warned = [], {}, "", False
    for seed in setup.seeds:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = chunkio.make_loader(
                path,
                BATCH_SIZE,
                fields=["image", "label"],
                num_workers=workers,
                seed=seed,
                **options,
            )
        warned |= _label_warning(caught)
        with loader:
            batches = _chunkio_batches(loader)
            if not alone:
                alone = {"start_s": time.perf_counter() - start, **_loader_alone(batches)}
            runs.append(_train(batches, epochs=setup.epochs, test=setup.test))
            transport = loader.transport
    row = {"loader": name, "transport": transport, "label_warning": warned}
    return row | alone | _summarise(runs, setup.counts)


def _label_warning(caught: list[warnings.WarningMessage]) -> bool:
    """Whether make_loader warned about label mixing; other warnings are passed on."""
    warned = False
    for w in caught:
        if w.category.__name__ == "LabelMixingWarning":
            warned = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return warned


def _uniform_row(path: Path, *, setup: _Setup) -> dict[str, Any]:
    import torch

    import chunkio

    start = time.perf_counter()
    ds = chunkio.ChunkDataset(path, fields=["image", "label"])
    every = ds.read_batch(np.arange(len(ds)))  # decoded once, then shuffled in memory
    images, labels = torch.from_numpy(every["image"]), torch.from_numpy(every["label"])
    alone = {"start_s": time.perf_counter() - start}
    alone |= _loader_alone(_uniform_batches(images, labels, setup.seeds[0]))
    runs = [
        _train(_uniform_batches(images, labels, seed), epochs=setup.epochs, test=setup.test)
        for seed in setup.seeds
    ]
    return {"loader": UNIFORM, "transport": "DataLoader", **alone, **_summarise(runs, setup.counts)}


def checks(rows: list[dict[str, Any]], *, seeds: int = SEEDS) -> list[dict[str, Any]]:
    """Chunkio's default accuracy at most ``PARITY_POINTS`` below the uniform shuffle's.

    With one seed (quick mode) one order's luck moves accuracy by more than the target: the
    target's name says the figure is indicative only.
    """
    acc = {r["loader"]: r["accuracy"] for r in rows if "accuracy" in r}
    if DEFAULT not in acc or UNIFORM not in acc:
        return []
    behind = 100 * (acc[UNIFORM] - acc[DEFAULT])
    target = "training: default make_loader accuracy points behind uniform shuffle"
    target += f" (mean of {seeds} seeds)" if seeds > 1 else " (1 seed: indicative only)"
    passed = behind <= PARITY_POINTS
    return [{"target": target, "measured": behind, "required": PARITY_POINTS, "passed": passed}]


def _default_workers() -> int:
    from benchmarks.bench_loaders import cores

    return min(2, cores())


def _conversions(tree: Path, root: Path) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """Convert with defaults, and class-sorted when ``convert_images`` can; time and inspect.

    Returns the dataset path and the figures of each conversion.
    """
    paths = {DEFAULT_CONVERSION: root / "train.zarr"}
    conversions = {DEFAULT_CONVERSION: {"convert_s": _convert(tree, paths[DEFAULT_CONVERSION])}}
    if _has_shuffle_keyword():
        paths[SORTED_CONVERSION] = root / "train-class-sorted.zarr"
        convert_s = _convert(tree, paths[SORTED_CONVERSION], shuffle=False)
        conversions[SORTED_CONVERSION] = {"convert_s": convert_s}
    else:
        conversions[SORTED_CONVERSION] = {"skipped": NO_SHUFFLE}
    for name, path in paths.items():
        stored = _stored_order(path)
        conversions[name] |= {f"stored_{k}": v for k, v in stored.items()}
    return paths, conversions


def _rows(paths: dict[str, Path], *, workers: int, setup: _Setup) -> list[dict[str, Any]]:
    rows = [
        _chunkio_row(name, paths[conversion], workers=workers, setup=setup, options=options)
        if conversion in paths
        else {"loader": name, "skipped": NO_SHUFFLE}
        for name, conversion, options in LOADERS
    ]
    return [*rows, _uniform_row(paths[DEFAULT_CONVERSION], setup=setup)]


def _channels(path: Path) -> int:
    """Channels of the converted ``image`` field (``convert_images`` defaults to RGB).

    Also checks that labels are the digits: class folders ``0`` .. ``9`` in sorted order.
    """
    import chunkio

    ds = chunkio.ChunkDataset(path, fields="image")
    if ds.class_names != tuple(str(d) for d in range(10)):
        raise RuntimeError(f"{path}: expected class names '0' .. '9'; got {ds.class_names!r}")
    return int(ds.read_batch([0])["image"].shape[1])


def run(
    quick: bool = False,
    workers: int | None = None,
    epochs: int | None = None,
    seeds: int | None = None,
    root: str | Path | None = None,
) -> dict[str, Any]:
    """Train each loader ``seeds`` times; return settings, conversions, rows and checks.

    ``workers``: make_loader's ``num_workers`` (default ``min(2, cores)``). ``epochs``:
    default ``EPOCHS`` (quick ``QUICK_EPOCHS``). ``seeds``: loader seeds ``0 .. seeds - 1``
    per loader, the model's initial weights always the same (default ``SEEDS``, quick 1); the
    accuracy reported is their mean. ``root``: working folder (default: a temporary one).
    """
    if root is None:
        with tempfile.TemporaryDirectory(prefix="chunkio-bench-training-") as tmp:
            return run(quick=quick, workers=workers, epochs=epochs, seeds=seeds, root=tmp)
    import torch

    start = time.perf_counter()
    workers = _default_workers() if workers is None else workers
    digits = make_digits(Path(root) / "digits")
    paths, conversions = _conversions(digits.tree, Path(root))
    channels = _channels(paths[DEFAULT_CONVERSION])
    test_images = np.repeat(digits.test_images[:, None], channels, axis=1)
    setup = _Setup(
        epochs=epochs or (QUICK_EPOCHS if quick else EPOCHS),
        seeds=tuple(range(seeds or (1 if quick else SEEDS))),
        test=(torch.from_numpy(test_images), torch.from_numpy(digits.test_labels)),
        counts=np.bincount(digits.train_labels, minlength=10),
    )
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        _warm_up(channels)
        rows = _rows(paths, workers=workers, setup=setup)
    finally:
        torch.set_num_threads(saved_threads)
    return {
        "settings": {
            "quick": quick,
            "epochs": setup.epochs,
            "seeds": len(setup.seeds),
            "batch_size": BATCH_SIZE,
            "workers": workers,
            "torch_threads": THREADS,
            "optimizer": f"Adam(lr={LEARNING_RATE:g})",
            "train_samples": int(digits.train_labels.size),
            "test_samples": int(digits.test_labels.size),
            "image_shape": [channels, SIZE, SIZE],
        },
        "conversions": conversions,
        "rows": rows,
        "checks": checks(rows, seeds=len(setup.seeds)),
        "elapsed_s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    from benchmarks.report import training_markdown

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"{QUICK_EPOCHS} epochs, 1 seed")
    p.add_argument("--workers", type=int, help="make_loader num_workers (default min(2, cores))")
    p.add_argument("--epochs", type=int, help=f"default {EPOCHS}")
    p.add_argument("--seeds", type=int, help=f"loader seeds per loader (default {SEEDS}; quick 1)")
    p.add_argument("--root", help="working folder (default: a temporary one)")
    args = p.parse_args(argv)
    results = run(
        quick=args.quick, workers=args.workers, epochs=args.epochs, seeds=args.seeds, root=args.root
    )
    print("\n".join(training_markdown(results)))


if __name__ == "__main__":
    main()
