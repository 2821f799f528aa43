"""Batches as the dataset hands them to a collate function."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex, overload

import numpy as np
import torch
from torch.utils.data import default_collate

from ..format.layout import DatasetLayout
from ..transforms.sample import FieldTransform, stored_output_shape
from .sparse import CSRBatch

__all__ = ["BatchShapes", "SampleBatch", "collate"]


class SampleBatch(list[Any]):
    """A batch already stacked by field that is also the list of its samples.

    ``ChunkDataset.__getitems__`` returns one. :func:`collate` hands back ``.collated``
    without copying, while torch's ``default_collate`` sees an ordinary list of samples and
    stacks them as usual, so a plain ``DataLoader`` works with either collate function.

    It is a real ``list`` because ``default_collate`` passes the batch itself to
    ``torch.stack`` when samples are tensors (a single field), and ``torch.stack`` takes
    lists and tuples only. The list is filled on first use - the first index, iteration or
    comparison, which is how ``default_collate`` starts - so the fast path through
    :func:`collate` never splits a batch into samples.

    Parameters
    ----------
    collated
        The batch by field: a tensor, a tuple or a dict of tensors (ragged fields: lists of
        tensors), as ``__getitems__`` arranges it.
    length
        Its number of samples.

    Examples
    --------
    >>> b = SampleBatch({"x": torch.arange(3)}, 3)
    >>> len(b), b[1], collate(b) is b.collated
    (3, {'x': tensor(1)}, True)
    """

    def __init__(self, collated: Any, length: int) -> None:
        super().__init__()
        self._collated = collated
        self._length = int(length)
        self._filled = False
        self._stacked = True
        self._from_samples = False

    @classmethod
    def from_samples(cls, samples: Sequence[Any]) -> SampleBatch:
        """A batch of samples that exist already (made by a per-sample transform).

        Its ``collated`` form is stacked on first use by ``default_collate``, tuples kept
        tuples (as ``__getitems__`` arranges them without a transform).
        """
        batch = cls(None, len(samples))
        list.extend(batch, samples)
        batch._filled, batch._stacked, batch._from_samples = True, False, True
        return batch

    @property
    def collated(self) -> Any:
        """The batch stacked by field (stacked now if it was built from samples)."""
        if not self._stacked:
            self._collated = _stack(list(list.__iter__(self)))
            self._stacked = True
        return self._collated

    def _fill(self) -> None:
        if not self._filled:
            self._filled = True
            list.extend(self, (_take(self._collated, i) for i in range(self._length)))

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, i: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> Any:
        self._fill()
        if isinstance(i, slice):
            return list.__getitem__(self, i)
        try:
            return list.__getitem__(self, i)
        except IndexError:
            raise IndexError(f"sample {i} out of range for a batch of {self._length}") from None

    def __iter__(self) -> Iterator[Any]:
        self._fill()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[Any]:
        self._fill()
        return list.__reversed__(self)

    def __contains__(self, item: object) -> bool:
        self._fill()
        return list.__contains__(self, item)

    def __eq__(self, other: object) -> bool:
        self._fill()
        if isinstance(other, SampleBatch):
            other._fill()
        return list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"SampleBatch(length={self._length})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as it was built: stacked fields (not one object per sample), or samples.
        if self._from_samples:
            return (SampleBatch.from_samples, (list(list.__iter__(self)),))
        return (SampleBatch, (self._collated, self._length))


def _stack(samples: list[Any]) -> Any:
    if not samples:
        return None
    out = default_collate(samples)
    first = samples[0]
    if isinstance(first, tuple) and not hasattr(first, "_fields") and isinstance(out, list):
        return tuple(out)  # default_collate turns tuples into lists
    return out


def _take(collated: Any, i: int) -> Any:
    if isinstance(collated, dict):
        return {k: v[i] for k, v in collated.items()}
    if isinstance(collated, tuple):
        return tuple(v[i] for v in collated)
    return collated[i]


def collate(batch: Sequence[Any]) -> Any:
    """Collate function for chunkio datasets: pass batches through, stack anything else.

    >>> b = SampleBatch({"x": torch.arange(3)}, 3)
    >>> collate(b)["x"].tolist(), default_collate(b)["x"].tolist()
    ([0, 1, 2], [0, 1, 2])
    """
    if isinstance(batch, SampleBatch):
        return batch.collated
    return default_collate(list(batch))


def to_tensor(value: Any) -> Any:
    """NumPy arrays (or lists of them, for ragged fields) -> tensors sharing memory."""
    if isinstance(value, list):
        return [torch.from_numpy(v) for v in value]
    if isinstance(value, CSRBatch):
        return value.to_torch()
    return torch.from_numpy(value)


@dataclass(frozen=True)
class BatchShapes:
    """The shapes of a :class:`chunkio.ChunkDataset`'s batches, as transports preallocate
    them, and its samples arranged as ``fields`` asks (held by the dataset, pickled with it).

    ``single``: samples are the one field's value; ``as_tuple``: tuples in ``fields`` order
    (else dicts); ``channel_counts``: channels of an image field of several sizes that a
    fixed-size field transform makes batches of (read with the metadata)."""

    location: Any
    layout: DatasetLayout
    fields: tuple[str, ...]
    field_transform: FieldTransform | None
    channels_last: bool
    single: bool
    as_tuple: bool
    channel_counts: dict[str, int]

    def batch_fields(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """The selected fields as a transport preallocates them: ``(dtype, sample_shape)``
        (see :class:`chunkio.transport.BatchSource`), after the field transform; fields of
        samples with different shapes have none (a ``TypeError``)."""
        out = {}
        for name in self.fields:
            info = self.layout.field(name)
            shape = self.output_shape(name)
            if shape is None:
                raise TypeError(
                    f"{self.location}: field {name!r} holds samples of different shapes "
                    f"({info.kind}): no batch shape"
                )
            out[name] = (info.dtype, shape)
        return out

    def channels_last_fields(self) -> frozenset[str]:
        """Fields a transport lays out channels last (see ``channels_last``)."""
        if not self.channels_last:
            return frozenset()
        t = self.field_transform
        out = {
            name
            for name in self.fields
            if self.layout.field(name).encoding is not None or (t is not None and t.field == name)
        }
        return frozenset(n for n in out if len(self.output_shape(n) or ()) == 3)

    def output_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of field ``name`` in a batch (after the field transform), or ``None``
        when its samples differ (ragged, or images of several sizes and no fixed-size
        transform)."""
        info = self.layout.field(name, where=str(self.location))
        if (
            getattr(info, "batches", "dense") == "csr"
        ):  # sparse tensors: as many values as rows hold
            return None
        t = self.field_transform
        if t is None or t.field != name:
            return None if info.sample_shape is None else tuple(info.sample_shape)
        if info.sample_shape is not None:
            return stored_output_shape(t, tuple(info.sample_shape))
        fixed = getattr(t, "fixed_size", None)
        if info.kind_def.flat and fixed is not None:
            channels = self.channel_counts.get(name)  # read with the metadata
            if channels is None:  # ragged (H, W) images
                return None
            return (channels, int(fixed[0]), int(fixed[1]))
        return None

    def arrange(self, columns: dict[str, Any]) -> Any:
        """Columns by field -> a sample or batch as ``fields`` asks: a dict, a tuple in
        ``fields`` order, or the one field's value."""
        if self.single:
            return columns[self.fields[0]]
        if self.as_tuple:
            return tuple(columns[f] for f in self.fields)
        return columns
