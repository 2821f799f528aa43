"""MNIST (and Fashion-MNIST, same format) idx files -> chunkio dataset.

The published layout: ``train-images-idx3-ubyte`` / ``train-labels-idx1-ubyte`` and
``t10k-images-idx3-ubyte`` / ``t10k-labels-idx1-ubyte``, each possibly gzipped (``.gz``).
An idx file starts with a big-endian header: magic number (2051 for images, 2049 for labels),
the item count, and for images the row and column counts; the rest is uint8 data. Both magic
numbers and all sizes are checked. Stored: ``image`` uint8 (N, 1, 28, 28), channels-first like
every chunkio image dataset, and ``label`` int64, with class names ``"0"`` .. ``"9"``.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from chunkio import Output
from chunkio.convert import ConversionResult, write_arrays
from chunkio.errors import SourceError

__all__ = ["IMAGES_MAGIC", "LABELS_MAGIC", "convert", "read_idx"]

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049
_PREFIX = {"train": "train", "test": "t10k"}


def _find(root: str, name: str) -> str:
    for candidate in (name, name + ".gz"):
        path = os.path.join(root, candidate)
        if os.path.isfile(path):
            return path
    raise SourceError(f"{root}: neither {name} nor {name}.gz exists")


def read_idx(path: str, *, magic: int) -> npt.NDArray[np.uint8]:
    """Read an idx file (gzipped or not) whose header must carry ``magic``."""
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as err:
        raise SourceError(f"{path}: cannot read ({err})") from err
    ndim = {IMAGES_MAGIC: 3, LABELS_MAGIC: 1}[magic]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise SourceError(f"{path}: {len(data)} bytes, shorter than the {header}-byte header")
    found = struct.unpack(">i", data[:4])[0]
    if found != magic:
        raise SourceError(f"{path}: magic number {found}; expected {magic} for this file")
    dims = struct.unpack(f">{ndim}i", data[4:header])
    expected = int(np.prod(dims, dtype=np.int64))
    if expected != len(data) - header:
        raise SourceError(
            f"{path}: header declares {dims} = {expected} bytes of data; the file holds "
            f"{len(data) - header}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def convert(
    src: str | os.PathLike[str],
    dst: Any,
    *,
    split: Literal["train", "test"] = "train",
    shuffle: bool = True,
    seed: int = 0,
    **kw: Any,
) -> ConversionResult:
    """Convert one split of the MNIST idx files in ``src`` into ``dst``.

    Parameters
    ----------
    src
        The folder holding the idx files.
    dst
        The destination (``.zarr`` or ``.h5``).
    split
        ``"train"`` (``train-*``) or ``"test"`` (``t10k-*``).
    shuffle, seed
        Store the images in the seeded random order of :func:`chunkio.write_arrays` (the
        published files keep a fixed order; ``source_index`` maps back to it), or in file
        order with ``shuffle=False``.
    **kw
        Passed to :func:`chunkio.write_arrays` (``output``, ``execution``, ...).
    """
    if split not in _PREFIX:
        raise ValueError(f"split must be one of {sorted(_PREFIX)}; got {split!r}")
    root, prefix = os.fspath(src), _PREFIX[split]
    images_path = _find(root, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(root, f"{prefix}-labels-idx1-ubyte")
    images = read_idx(images_path, magic=IMAGES_MAGIC)
    labels = read_idx(labels_path, magic=LABELS_MAGIC).astype(np.int64)
    if len(images) != len(labels):
        raise SourceError(
            f"{root}: {len(images)} images in {images_path} but {len(labels)} labels in "
            f"{labels_path}"
        )
    if labels.size and labels.max() > 9:
        raise SourceError(f"{labels_path}: label {labels.max()} outside 0..9")
    extra = {
        "source": {
            "dataset": "mnist",
            "split": split,
            "files": [os.path.basename(images_path), os.path.basename(labels_path)],
        }
    }
    return write_arrays(
        dst,
        {"image": images[:, None], "label": labels},
        class_names=[str(i) for i in range(10)],
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
