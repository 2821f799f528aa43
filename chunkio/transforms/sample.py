"""Per-sample transforms that declare their output shape, so batches stay preallocated.

A :class:`FieldTransform` transforms one field of every sample and says, before reading
anything, what shape comes out. The loader can then preallocate its batch buffers (the
shared-memory ring) and the reader writes each transformed sample straight into its row.
:class:`chunkio.transforms.image.Compose` is one; any object with these members is another.

Image fields are stored channels first, ``(C, H, W)``; a transform sees them channels last,
as Pillow and image decoders do: ``(H, W, C)``, or ``(H, W)`` for one channel. Its
``output_shape`` is in that layout too. Random parameters come from ``key = (seed, epoch,
sample index)``, so a run is reproducible and a resumed epoch repeats them.

Two members are optional, and let a dataset refuse a transform that cannot apply when it is
made (a :class:`~chunkio.errors.TransformError`) rather than when a batch is read:
``input_dtype`` (the one dtype it takes, e.g. ``uint8``) and ``fixed_size`` (the output
``(height, width)`` whatever the input's, or ``None`` when it depends on it: such a
transform cannot make one batch of images of several sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray

__all__ = [
    "Column",
    "Columns",
    "ColumnsTransform",
    "DescribesColumns",
    "FieldTransform",
    "channels_last",
    "is_columns_transform",
    "is_field_transform",
    "stored_output_shape",
    "transform_rows",
]

Key = tuple[int, int, int]


@runtime_checkable
class FieldTransform(Protocol):
    """A per-sample transform of one field with a declared output shape."""

    #: the field it transforms (the others pass through)
    field: str
    #: first element of every key
    seed: int

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of a transformed sample of ``input_shape`` (channels last)."""
        ...

    def apply(self, image: npt.NDArray[Any], out: npt.NDArray[Any], key: Key) -> None:
        """Transform ``image`` into ``out`` (a view of the batch row), randomness from ``key``."""
        ...


def is_field_transform(obj: Any) -> TypeGuard[FieldTransform]:
    """Whether ``obj`` declares its output shape (and so keeps batches preallocated)."""
    return isinstance(obj, FieldTransform) and isinstance(getattr(obj, "field", None), str)


@dataclass(frozen=True)
class Column:
    """One field of a dataset's batches as a columns transform checks it, in plain values:
    the dataset builds them from its layout, so that this layer never reads a dataset.

    ``arrays``: the stored arrays it reads, in order; ``sample_shape``: ``None`` for samples
    of several shapes; ``plain_arrays``: its arrays hold its values as stored;
    ``one_array_batches``: its batches are one array; ``stepped``, ``stacked``: a window's
    steps axis, its variables stacked on one axis."""

    arrays: tuple[str, ...]
    dtype: np.dtype[Any]
    sample_shape: tuple[int, ...] | None
    kind: str
    plain_arrays: bool
    one_array_batches: bool
    stepped: bool = False
    stacked: bool = False


@dataclass(frozen=True)
class Columns:
    """The fields of a dataset's batches by name, in batch order, and where the dataset is
    (named in errors): what :meth:`ColumnsTransform.check_dataset` checks against."""

    location: object
    fields: Mapping[str, Column]


class DescribesColumns(Protocol):
    """A dataset that says what its batches hold (:class:`chunkio.ChunkDataset` does)."""

    def batch_columns(self) -> Columns: ...


class ColumnsTransform(Protocol):
    """Transforms a batch's columns in place, keeping their shapes and dtypes (e.g.
    :class:`chunkio.Normalize`): the reader applies it to each batch (or a ring worker's rows
    of it) as it is read, so batches stay preallocated."""

    def apply_columns(self, columns: Mapping[str, Any]) -> None: ...

    def check_dataset(self, columns: Columns) -> None:
        """Raise unless it fits the dataset whose batches hold ``columns`` (called once by the
        dataset, before any worker starts)."""
        ...


def is_columns_transform(obj: Any) -> TypeGuard[ColumnsTransform]:
    """Whether ``obj`` is a :class:`ColumnsTransform`."""
    return all(callable(getattr(obj, m, None)) for m in ("apply_columns", "check_dataset"))


def channels_last(sample: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A stored ``(C, H, W)`` image as a transform sees it: ``(H, W, C)``, ``(H, W)`` if
    ``C == 1``. Other samples are returned as they are. A view, never a copy.

    >>> import numpy as np
    >>> channels_last(np.zeros((3, 4, 5))).shape, channels_last(np.zeros((1, 4, 5))).shape
    ((4, 5, 3), (4, 5))
    """
    if sample.ndim != 3:
        return sample
    return sample[0] if sample.shape[0] == 1 else sample.transpose(1, 2, 0)


def stored_output_shape(transform: FieldTransform, stored: tuple[int, ...]) -> tuple[int, ...]:
    """The transformed sample shape in the stored layout (channels first for images)."""
    if len(stored) != 3:
        return tuple(transform.output_shape(stored))
    c = stored[0]
    seen = (stored[1], stored[2]) if c == 1 else (stored[1], stored[2], c)
    shape = tuple(int(s) for s in transform.output_shape(seen))
    if len(shape) != len(seen) or (c != 1 and shape[2] != c):
        raise ValueError(
            f"transform of field {transform.field!r}: output_shape({seen}) must keep the "
            f"channels; got {shape}"
        )
    return (c, shape[0], shape[1])


def transform_rows(
    transform: FieldTransform,
    source: npt.NDArray[Any] | Sequence[npt.NDArray[Any]],
    rows: IntArray,
    indices: IntArray,
    out: npt.NDArray[Any],
    epoch: int,
    map_rows: Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]] = map,
) -> None:
    """``out[j] = transform(source[rows[j]])`` for each sample, keyed by ``(seed, epoch,
    indices[j])``; ``map_rows`` may spread the samples over threads. ``source`` is an array
    of samples (a dense field's decoded chunks) or a list of them (a ragged field's, each of
    its own shape)."""
    seed = int(transform.seed)

    def one(job: tuple[int, tuple[int, int]]) -> None:
        j, (row, index) = job
        # a strided view of the decoded chunk: Compose copies only the crop it needs
        image = channels_last(source[row])
        transform.apply(image, channels_last(out[j]), (seed, int(epoch), index))

    pairs = zip(rows.tolist(), indices.tolist(), strict=True)
    for _ in map_rows(one, enumerate(pairs)):
        pass
