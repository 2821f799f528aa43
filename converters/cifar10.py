"""CIFAR-10, "python version" (``cifar-10-batches-py``) -> chunkio dataset.

The published layout: pickle files ``data_batch_1`` .. ``data_batch_5`` (train),
``test_batch`` (test) and ``batches.meta``. Each batch is a dict with ``data``, a uint8 array
(N, 3072) holding each image row-major as 1024 red, 1024 green then 1024 blue values, and
``labels``, N ints; ``batches.meta`` holds ``label_names``. Stored: ``image`` uint8
(N, 3, 32, 32) and ``label`` int64, with the label names as class names.

The batches are pickles, a format that can run arbitrary code when loaded. They are read
with a restricted unpickler that resolves only what NumPy arrays need (``ndarray``, ``dtype``,
``_reconstruct`` and ``_codecs.encode`` for byte strings); any other global in the file is
refused with :class:`~chunkio.errors.UnsafeInputError` before it could run.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from chunkio import Output
from chunkio.convert import ConversionResult, write_arrays
from chunkio.errors import SourceError, UnsafeInputError

__all__ = ["SPLITS", "convert", "load_batch"]

SPLITS = {
    "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
    "test": ("test_batch",),
}
_SIDE, _PIXELS = 32, 32 * 32 * 3


def _numpy_global(module: str, name: str) -> Any:
    import numpy

    if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "_reconstruct":
        # NumPy 2 renamed numpy.core to numpy._core (importing the old name now warns).
        new = "numpy._core.multiarray" if hasattr(numpy, "_core") else "numpy.core.multiarray"
        return importlib.import_module(new)._reconstruct
    if module == "numpy" and name in ("ndarray", "dtype"):
        return getattr(numpy, name)
    return None


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals a NumPy array needs; refuses everything else."""

    def find_class(self, module: str, name: str) -> Any:
        found = _numpy_global(module, name)
        if found is not None:
            return found
        if module == "_codecs" and name == "encode":  # how protocol 2 stores bytes
            import _codecs

            return _codecs.encode
        raise UnsafeInputError(
            f"CIFAR pickle refers to {module}.{name}, which a CIFAR batch never needs; "
            "refusing to load it (it could run code)"
        )


def load_batch(path: str) -> dict[str, Any]:
    """Load one CIFAR pickle safely; keys as ``str`` (the files were written by Python 2)."""
    try:
        with open(path, "rb") as fh:
            obj = _RestrictedUnpickler(fh, encoding="latin1").load()
    except UnsafeInputError as err:
        raise UnsafeInputError(f"{path}: {err}") from err
    except FileNotFoundError:
        raise
    except Exception as err:
        raise SourceError(
            f"{path}: not a readable CIFAR pickle ({type(err).__name__}: {err})"
        ) from err
    if not isinstance(obj, Mapping):
        raise SourceError(f"{path}: expected a dict; got {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def _images_and_labels(path: str) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    batch = load_batch(path)
    try:
        data, labels = batch["data"], batch["labels"]
    except KeyError as err:
        raise SourceError(f"{path}: CIFAR batch has no {err.args[0]!r} entry") from err
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
        raise SourceError(
            f"{path}: 'data' must be uint8 (N, {_PIXELS}); got {data.dtype} {data.shape}"
        )
    labels_arr = np.asarray(labels, dtype=np.int64)
    if labels_arr.shape != (len(data),):
        raise SourceError(f"{path}: {len(data)} images but {labels_arr.size} labels")
    return data.reshape(-1, 3, _SIDE, _SIDE), labels_arr


def convert(
    src: str | os.PathLike[str],
    dst: Any,
    *,
    split: Literal["train", "test"] = "train",
    shuffle: bool = True,
    seed: int = 0,
    **kw: Any,
) -> ConversionResult:
    """Convert one split of the CIFAR-10 python batches in ``src`` into ``dst``.

    Parameters
    ----------
    src
        The ``cifar-10-batches-py`` folder.
    dst
        The destination (``.zarr`` or ``.h5``).
    split
        ``"train"`` (``data_batch_1..5``, 50000 images) or ``"test"`` (``test_batch``).
    shuffle, seed
        Store the images in the seeded random order of :func:`chunkio.write_arrays` (the
        published files keep a fixed order; ``source_index`` maps back to it), or in file
        order with ``shuffle=False``.
    **kw
        Passed to :func:`chunkio.write_arrays` (``output``, ``execution``, ...).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}; got {split!r}")
    root = os.fspath(src)
    meta = load_batch(os.path.join(root, "batches.meta"))
    names = meta.get("label_names")
    if not isinstance(names, list) or not names:
        raise SourceError(f"{root}/batches.meta: expected a non-empty 'label_names' list")
    parts = [_images_and_labels(os.path.join(root, f)) for f in SPLITS[split]]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    bad = np.flatnonzero((labels < 0) | (labels >= len(names)))
    if bad.size:
        raise SourceError(
            f"{root}: label {labels[bad[0]]} (sample {bad[0]}) is outside the "
            f"{len(names)} label_names"
        )
    extra = {"source": {"dataset": "cifar10", "split": split, "files": list(SPLITS[split])}}
    return write_arrays(
        dst,
        {"image": images, "label": labels},
        class_names=[str(n) for n in names],
        shuffle=shuffle,
        seed=seed,
        output=_with_extra(kw.pop("output", None), extra),
        **kw,
    )


def _with_extra(output: Output | None, extra: dict[str, Any]) -> Output:
    """The caller's :class:`~chunkio.Output` (or the default) with this converter's ``extra``
    (the caller's own keys kept beside it)."""
    output = Output() if output is None else output
    return dataclasses.replace(output, extra={**extra, **dict(output.extra or {})})
