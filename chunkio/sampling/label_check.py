"""A one-time warning when a loader's batches will mix labels much worse than a uniform shuffle.

A dataset converted in class-folder order (before conversions shuffled by default, or with
``shuffle=False``) stores each chunk with one or two classes. The loader's mixing pool and
lanes recover most of the mixing, but not always: :func:`warn_if_label_sorted` compares the
labels of the loader's first batches with a uniform shuffle and says what to do. A user's own
HDF5 file or Zarr store read in place was never shuffled at all, and is often sorted by label.

The labels are the dataset's first field named as in :data:`LABEL_FIELDS` that holds one
integer per sample: ``label`` (what chunkio's converters write), or a name users' own files
give their labels, so that ``fields=["train/images", "train/labels"]`` is checked too.

The check reads no dataset: the dataset hands it a :class:`LabelSource`
(:meth:`chunkio.ChunkDataset.label_source`), the values it needs, built in the dataset's layer.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..backends import Reader, ReaderOptions
from ..errors import caller_stacklevel
from ..format.columns import column_values
from ..format.layout import LABEL_FIELDS, DatasetLayout, FieldInfo, label_field
from ..util.numeric import IntArray

__all__ = [
    "LABEL_FIELDS",
    "LabelFiles",
    "LabelMixingWarning",
    "LabelSource",
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
#: files of a dataset of many files whose labels tell whether it stores them sorted
_FILES_CHECKED = 8
_warned: set[tuple[str, int, int, int]] = set()


class LabelMixingWarning(UserWarning):
    """The loader's batches mix labels much worse than a uniform shuffle would."""


class LabelFiles(Protocol):
    """The files of a dataset of many files, as the check reads their labels one file at a
    time (:class:`chunkio.collection.files.FileSet` is one)."""

    @property
    def parts(self) -> Sequence[Any]: ...

    @property
    def starts(self) -> IntArray:
        """Each file's first sample, and the total at the end."""
        ...

    def part_labels(self, part: int, info: FieldInfo) -> npt.NDArray[np.int64]:
        """Field ``info``'s values of file ``part``'s samples, read whole."""
        ...


@dataclass(frozen=True, eq=False)
class LabelSource:
    """What the label check needs of a dataset, as values: built by the dataset
    (:meth:`chunkio.ChunkDataset.label_source`), so that this layer never reads one.

    ``location``: named in the warning (and, as text, the key it warns once per);
    ``num_samples`` and ``chunk_sizes``: its samples and their chunks in storage order;
    ``read_labels``: every sample's label read whole through a reader of its own (``None``
    without a label field); ``reader_options`` and ``remote``: how the rewrite command the
    warning suggests for a user's own store reads it; ``files``: many files, else ``None``.
    """

    location: object
    layout: DatasetLayout
    num_samples: int
    chunk_sizes: IntArray
    read_labels: Callable[[], npt.NDArray[np.int64] | None]
    reader_options: ReaderOptions
    remote: bool = False
    files: LabelFiles | None = None


def labels_of(
    source: LabelSource, reader: Reader | None = None
) -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """The integer labels of a dataset (``source``: ``dataset.label_source()``; see
    :func:`~chunkio.format.layout.label_field`), read once; ``None`` if it has none or they
    are too large to read just to check them.

    ``reader``: one already open on the dataset (else ``source.read_labels`` opens and
    closes its own)."""
    info = label_field(source.layout)
    if info is None or info.sample_nbytes * source.num_samples > _MAX_LABEL_BYTES:
        return None
    if reader is None:
        return source.read_labels()
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
    source: LabelSource, sampler: Any, reader: Reader | None = None
) -> dict[str, float] | None:
    """Stored and loader label mixing (``None`` without integer labels: :func:`label_field`).

    Keys: ``stored_ratio`` (distinct labels per chunk vs a random order) and, when the stored
    order is label-sorted, ``loader_ratio`` (distinct labels per batch of the sampler's first
    batches vs a uniform shuffle) and the loader's and a uniform shuffle's mean distinct labels
    per batch (``loader_ratio`` is 1.0 otherwise). ``source`` and ``reader``: as for
    :func:`labels_of`.
    """
    if source.files is not None:  # many files: read the labels of a few, not of every file
        return _check_files(source, source.files, sampler)
    return _check_whole(source, sampler, reader)


def _check_whole(
    source: LabelSource, sampler: Any, reader: Reader | None
) -> dict[str, float] | None:
    """:func:`check_label_mixing` from every sample's label, read at once."""
    labels = labels_of(source, reader)
    if labels is None or labels.size == 0:
        return None
    _, codes = np.unique(labels, return_inverse=True)
    counts = np.bincount(codes)
    ends = np.cumsum(source.chunk_sizes)
    chunks = [np.arange(a, b) for a, b in zip(ends - source.chunk_sizes, ends, strict=True)]
    stored = _distinct_ratio(chunks, codes, counts)[2]
    if stored >= SORTED_THRESHOLD:  # mixed chunks mix batches: skip computing the epoch
        return {"stored_ratio": stored, "loader_ratio": 1.0}
    return _loader_mixing(stored, _first_batches(sampler), codes, counts)


def _first_batches(sampler: Any) -> list[Any]:
    # the first batches only: generated lazily, they cost one pool's work, not the epoch's
    return list(itertools.islice(sampler.iter_batches(sampler.epoch), _BATCHES_CHECKED))


def _loader_mixing(stored: float, batches: list[Any], codes: Any, counts: Any) -> dict[str, float]:
    seen, uniform, ratio = _distinct_ratio(batches, codes, counts)
    return {
        "stored_ratio": stored,
        "loader_ratio": ratio,
        "loader_distinct": seen,
        "uniform_distinct": uniform,
    }


def warn_if_label_sorted(source: LabelSource, sampler: Any, reader: Reader | None = None) -> None:
    """Warn once per dataset and setting if its stored order is label-sorted and batches suffer
    (``source`` and ``reader``: as for :func:`labels_of`)."""
    key = (str(source.location), sampler.batch_size, sampler.pool, sampler.lanes)
    if key in _warned or not sampler.shuffle:
        return
    found = check_label_mixing(source, sampler, reader)
    if found is None:
        return
    if found["stored_ratio"] < SORTED_THRESHOLD and found["loader_ratio"] < MIXING_THRESHOLD:
        _warned.add(key)
        if source.layout.foreign:  # a user's own store, read in place: nothing shuffled it
            from ..format.rewrite import rewrite_command

            arrays = {f.name: f.array or f.name for f in source.layout.fields}
            trusted = source.reader_options.trust_codecs
            command = rewrite_command(str(source.location), arrays, None, trust_codecs=trusted)
            remote = " (with --storage-options as for the dataset)" if source.remote else ""
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
            f"{source.location!r} stores its samples sorted by label (each chunk holds "
            f"{found['stored_ratio']:.0%} of the distinct labels a random order would), and "
            f"this loader's batches hold {found['loader_distinct']:.1f} distinct labels against "
            f"{found['uniform_distinct']:.1f} for a uniform shuffle "
            f"({found['loader_ratio']:.0%}): training may suffer. {todo}",
            LabelMixingWarning,
            stacklevel=caller_stacklevel(),  # the user's line, however deep the call
        )


class _FileLabels:
    """The labels of a dataset of many files, each file's read on first use (and kept)."""

    def __init__(self, files: LabelFiles, info: FieldInfo) -> None:
        self.files, self.info = files, info
        self.starts = files.starts
        self.read: dict[int, np.ndarray[Any, np.dtype[np.int64]]] = {}

    def part(self, i: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        if i not in self.read:
            self.read[i] = self.files.part_labels(i, self.info)
        return self.read[i]

    def of(self, ids: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
        ids = np.asarray(ids, dtype=np.int64)
        part_of = np.searchsorted(self.starts, ids, side="right") - 1
        out = np.empty(ids.size, np.int64)
        for i in np.unique(part_of).tolist():
            here = part_of == i
            out[here] = self.part(i)[ids[here] - self.starts[i]]
        return out


def _check_files(source: LabelSource, files: LabelFiles, sampler: Any) -> dict[str, float] | None:
    """:func:`check_label_mixing` of a dataset of many files: the stored order judged from
    :data:`_FILES_CHECKED` files spread over the list, the loader's batches (only when it is
    sorted) from the files they touch; no other file is read."""
    info = label_field(source.layout)
    if info is None or source.num_samples == 0:
        return None
    labels = _FileLabels(files, info)
    n = len(files.parts)
    picked = np.unique(np.linspace(0, n - 1, min(n, _FILES_CHECKED)).round().astype(np.int64))
    ends = np.cumsum(source.chunk_sizes)
    chunks = []
    for i in picked.tolist():  # the chunks of the picked files (a chunk lies in one file)
        lo, hi = int(files.starts[i]), int(files.starts[i + 1])
        first, last = np.searchsorted(ends, [lo, hi], side="right").tolist()
        bounds = np.clip(np.concatenate(([lo], ends[first:last])), lo, hi)
        chunks += [np.arange(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    if not chunks:
        return None
    ids = np.concatenate(chunks)
    values, codes = np.unique(labels.of(ids), return_inverse=True)
    counts = np.bincount(codes)
    position = {v: k for k, v in enumerate(values.tolist())}
    stored = _distinct_ratio(_runs([c.size for c in chunks]), codes, counts)[2]
    if stored >= SORTED_THRESHOLD:
        return {"stored_ratio": stored, "loader_ratio": 1.0}
    batches = _first_batches(sampler)
    seen = [labels.of(b) for b in batches]
    extra = sorted({v for b in seen for v in b.tolist()} - set(position))
    for v in extra:  # labels the picked files lack: counted as one sample each
        position[v] = len(position)
    counts = np.concatenate((counts, np.ones(len(extra), np.int64)))
    mapped = [np.array([position[v] for v in b.tolist()], np.int64) for b in seen]
    flat = np.concatenate(mapped) if mapped else np.zeros(0, np.int64)
    return _loader_mixing(stored, _runs([b.size for b in mapped]), flat, counts)


def _runs(lengths: list[int]) -> list[Any]:
    """Positions of consecutive runs of ``lengths`` in their concatenation."""
    bounds = np.cumsum([0, *lengths])
    return [np.arange(a, b) for a, b in itertools.pairwise(bounds)]
