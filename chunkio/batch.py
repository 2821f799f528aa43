"""Batches as the dataset hands them to a collate function."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

__all__ = ["SampleBatch", "collate"]


class SampleBatch(Sequence[Any]):
    """A batch already stacked by field, that still looks like a list of samples.

    ``ChunkDataset.__getitems__`` returns one; :func:`collate` hands back ``.collated`` without
    copying, while torch's ``default_collate`` sees an ordinary sequence of samples and stacks
    them as usual, so a plain ``DataLoader`` works with either collate function.
    """

    def __init__(self, collated: Any, length: int) -> None:
        self.collated = collated
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._length))]
        if not -self._length <= i < self._length:
            raise IndexError(f"sample {i} out of range for a batch of {self._length}")
        return _take(self.collated, i)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._length))


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
    return torch.from_numpy(value)
