"""``num_workers=0``: batches read in this process into reused buffers, handed out as leases."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from .detach import KeptViews
from .iterator import Indices, Parts, even_parts
from .lease import Lease
from .ring import batch_view
from .source import BatchSource

__all__ = ["LocalTransport"]

Allocate = Callable[[tuple[int, ...], np.dtype[Any]], npt.NDArray[Any]]


Buffer = dict[str, npt.NDArray[Any]]


class LocalTransport:
    """``num_workers=0``: read each batch in this process into a reused buffer.

    As on the ring, a released buffer waits one more release before it is reused, and a
    buffer whose last batch is still viewed then is left to its holder (a new one is
    allocated in its place: ``replaced`` counts them).
    """

    def __init__(
        self, dataset: BatchSource, *, batch_size: int, allocate: Allocate = np.empty
    ) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self._allocate = allocate
        self._free: list[tuple[Buffer, KeptViews]] = []
        self._waiting: tuple[Buffer, KeptViews] | None = None
        self.replaced = 0

    def _buffer(self) -> tuple[Buffer, KeptViews]:
        if not self._free:
            return self._new_buffer(), KeptViews(1)
        buf, kept = self._free.pop()
        if not kept.take(0):
            return buf, kept
        self.replaced += 1  # its last batch is still viewed: the holder keeps the memory
        return self._new_buffer(), kept  # (which keeps what it learnt of the consumer)

    def _new_buffer(self) -> Buffer:
        last = self.dataset.channels_last_fields()
        out = {}
        for name, (dtype, shape) in self.dataset.batch_fields().items():
            flat = self._allocate((self.batch_size * int(np.prod(shape)),), dtype)
            cl = name in last and len(shape) == 3
            out[name] = batch_view(flat, self.batch_size, shape, channels_last=cl)
        return out

    def run(
        self, batches: Iterable[Indices], parts: Parts = even_parts, *, epoch: int = 0
    ) -> Iterator[Lease]:
        for indices in batches:
            buf, kept = self._buffer()
            n = len(indices)
            out = {k: v[:n] for k, v in buf.items()}
            try:
                self.dataset.read_batch(indices, out=out, epoch=epoch)
            except BaseException:
                self._free.append((buf, kept))
                raise
            out = kept.hand_out(0, out)
            tensors = {k: torch.from_numpy(v) for k, v in out.items()}
            yield Lease(self.dataset.arrange(tensors), partial(self._release, (buf, kept)))

    def _release(self, entry: tuple[Buffer, KeptViews]) -> None:
        if self._waiting is not None:  # ``for batch in loader`` holds it until the next ask
            self._free.append(self._waiting)
        self._waiting = entry

    def worker_pids(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        self._free.clear()
        self._waiting = None
