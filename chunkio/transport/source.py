"""What a transport needs from a dataset: the small protocol it depends on.

A transport moves batches from reader processes to the consumer; it does not know how a
dataset reads them. :class:`BatchSource` is everything it asks: the fields a batch has (to
preallocate slots), "read this batch into these buffers", and how to arrange a batch's
tensors for the consumer. :class:`chunkio.ChunkDataset` is one; a test double is another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["BatchSource", "FieldShapes"]

#: field name -> (element dtype, per-sample shape), in batch order
FieldShapes = dict[str, tuple[np.dtype[Any], tuple[int, ...]]]


@runtime_checkable
class BatchSource(Protocol):
    """A dataset whose batches a transport can read into preallocated buffers.

    Implementations must pickle (a transport hands them to worker processes) and open their
    files lazily in each process. The optional capabilities (:meth:`prefetch`,
    :meth:`channels_last_fields`) are declared here with their defaults, which a source that
    subclasses this protocol inherits: transports call them, never probe for them.
    """

    def batch_fields(self) -> FieldShapes:
        """The fields of a batch, each ``(dtype, sample_shape)``; batches are dense."""
        ...

    def read_batch(
        self,
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """Read samples ``indices`` into ``out`` (one ``(len(indices), *shape)`` array per
        field, views of a transport's slot); ``epoch`` is the epoch the batch belongs to,
        which keys random augmentations."""
        ...

    def arrange(self, columns: dict[str, torch.Tensor]) -> Any:
        """The batch as the consumer receives it (a dict, tuple or single tensor)."""
        ...

    def prefetch(self, indices: Sequence[int] | npt.ArrayLike) -> None:
        """Start fetching what a later read of ``indices`` needs (a hint: it returns at once).
        Ring workers call it for the batches queued behind the one they read; a source with
        nothing to fetch ahead ignores it (the default)."""
        return None

    def channels_last_fields(self) -> frozenset[str]:
        """Fields laid out channels last: ``(C, H, W)`` samples whose producer writes
        ``(H, W, C)``, e.g. decoded images (default: none)."""
        return frozenset()

    def close(self) -> None:
        """Close this process's handles (a worker calls it when it stops)."""
        ...
