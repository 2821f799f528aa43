"""A one-time warning when a loader's batches will mix labels much worse than a uniform shuffle.

A dataset converted in class-folder order (before conversions shuffled by default, or with
``shuffle=False``) stores each chunk with one or two classes. The loader's mixing pool and
lanes recover most of the mixing, but not always: :func:`warn_if_label_sorted` compares the
labels of the loader's first batches with a uniform shuffle and says what to do. A user's own
HDF5 file or Zarr store read in place was never shuffled at all, and is often sorted by label.

The labels are the dataset's first field named as in :data:`LABEL_FIELDS` that holds one
integer per sample: ``label`` (what chunkio's converters write), or a name users' own files
give their labels, so that ``fields=["train/images", "train/labels"]`` is checked too.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np

from ..backends import Reader
from ..errors import caller_stacklevel
from ..format.columns import column_values
from ..format.layout import LABEL_FIELDS, label_field

__all__ = [
    "LABEL_FIELDS",
    "LabelMixingWarning",
    "check_label_mixing",
    "label_field",
    "labels_of",
    "warn_if_label_sorted",
]

#: the loader's mean distinct labels per batch, as a fraction of a uniform shuffle's, below
#: which it warns
MIXING_THRESHOLD = 0.9
#: stored order counted as label-sorted below this fraction of a random order's mixing
SORTED_THRESHOLD = 0.5
#: label fields larger than this are not read just to warn
_MAX_LABEL_BYTES = 64 << 20
_BATCHES_CHECKED = 64
_warned: set[tuple[str, int, int, int]] = set()


class LabelMixingWarning(UserWarning):
    """The loader's batches mix labels much worse than a uniform shuffle would."""


def labels_of(
    dataset: Any, reader: Reader | None = None
) -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """The integer labels of ``dataset`` (see :func:`~chunkio.format.layout.label_field`), read
    once; ``None`` if it has none or they are too large to read just to check them.

    ``reader``: one already open on the dataset (else the dataset's :meth:`labels` opens and
    closes its own)."""
    info = label_field(dataset.layout)
    if info is None or info.sample_nbytes * len(dataset) > _MAX_LABEL_BYTES:
        return None
    if reader is None:
        labels: np.ndarray[Any, np.dtype[np.int64]] | None = dataset.labels()
        return labels
    # "label", or the array (or compound column) a store chunkio did not write names
    return np.asarray(column_values(reader, info), dtype=np.int64)


def _distinct_ratio(groups: list[Any], labels: Any, counts: Any) -> tuple[float, float, float]:
    """Mean distinct labels per group, a uniform shuffle's for the same sizes, and the ratio."""
    from .label_metrics import uniform_distinct_labels

    sizes = [len(g) for g in groups if len(g)]
    if not sizes:
        return 0.0, 0.0, 1.0
    seen = float(np.mean([np.unique(labels[g]).size for g in groups if len(g)]))
    expect = float(np.mean([uniform_distinct_labels(counts, b) for b in sizes]))
    return seen, expect, seen / expect if expect else 1.0


def check_label_mixing(
    dataset: Any, sampler: Any, reader: Reader | None = None
) -> dict[str, float] | None:
    """Stored and loader label mixing (``None`` without integer labels: :func:`label_field`).

    Keys: ``stored_ratio`` (distinct labels per chunk vs a random order) and, when the stored
    order is label-sorted, ``loader_ratio`` (distinct labels per batch of the sampler's first
    batches vs a uniform shuffle) and the loader's and a uniform shuffle's mean distinct labels
    per batch (``loader_ratio`` is 1.0 otherwise). ``reader``: as for :func:`labels_of`.
    """
    labels = labels_of(dataset, reader)
    if labels is None or labels.size == 0:
        return None
    _, codes = np.unique(labels, return_inverse=True)
    counts = np.bincount(codes)
    ends = np.cumsum(dataset.chunk_sizes())
    chunks = [np.arange(a, b) for a, b in zip(ends - dataset.chunk_sizes(), ends, strict=True)]
    stored = _distinct_ratio(chunks, codes, counts)[2]
    if stored >= SORTED_THRESHOLD:  # mixed chunks mix batches: skip computing the epoch
        return {"stored_ratio": stored, "loader_ratio": 1.0}
    # the first batches only: generated lazily, they cost one pool's work, not the epoch's
    batches = list(itertools.islice(sampler.iter_batches(sampler.epoch), _BATCHES_CHECKED))
    seen, uniform, ratio = _distinct_ratio(batches, codes, counts)
    return {
        "stored_ratio": stored,
        "loader_ratio": ratio,
        "loader_distinct": seen,
        "uniform_distinct": uniform,
    }


def warn_if_label_sorted(dataset: Any, sampler: Any, reader: Reader | None = None) -> None:
    """Warn once per dataset and setting if its stored order is label-sorted and batches suffer
    (``reader``: as for :func:`labels_of`)."""
    key = (str(dataset.location), sampler.batch_size, sampler.pool, sampler.lanes)
    if key in _warned or not sampler.shuffle:
        return
    found = check_label_mixing(dataset, sampler, reader)
    if found is None:
        return
    if found["stored_ratio"] < SORTED_THRESHOLD and found["loader_ratio"] < MIXING_THRESHOLD:
        _warned.add(key)
        if dataset.layout.foreign:  # a user's own store, read in place: nothing shuffled it
            from ..format.rewrite import rewrite_command

            arrays = {f.name: f.array or f.name for f in dataset.layout.fields}
            trusted = dataset.reader_options.trust_codecs
            command = rewrite_command(str(dataset.location), arrays, None, trust_codecs=trusted)
            remote = " (with --storage-options as for the dataset)" if dataset.remote else ""
            todo = (
                "Pass make_loader a larger pool (ordering=chunkio.Ordering(pool_bytes=...)), "
                "or write a shuffled copy once "
                f"(streamed, the source left as it is){remote}: {command}"
            )
        else:
            todo = (
                "Reconvert with shuffle=True (the converters' default), or pass make_loader "
                "a larger pool (ordering=chunkio.Ordering(pool_bytes=...))."
            )
        warnings.warn(
            f"{dataset.location!r} stores its samples sorted by label (each chunk holds "
            f"{found['stored_ratio']:.0%} of the distinct labels a random order would), and "
            f"this loader's batches hold {found['loader_distinct']:.1f} distinct labels against "
            f"{found['uniform_distinct']:.1f} for a uniform shuffle "
            f"({found['loader_ratio']:.0%}): training may suffer. {todo}",
            LabelMixingWarning,
            stacklevel=caller_stacklevel(),  # the user's line, however deep the call
        )
