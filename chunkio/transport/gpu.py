"""Batches on the device: pinned host memory, and copies that overlap with your compute.

:class:`DevicePrefetcher` wraps any iterable of batches (or :class:`~chunkio.transport.Lease`
objects, whose host memory is reused once released). While you compute on batch ``k`` it has
already issued the copy of batch ``k + 1``; it releases a batch's host memory only after that
batch's copy has finished. The streams and events it drives come from a :class:`CopyStream`:
:class:`CudaCopyStream` on CUDA (a side stream, events, ``record_stream``), or
:class:`BlockingCopyStream` for other devices and for tests, so the ordering and lifetime logic
runs anywhere.

Without CUDA, asking for a CUDA device raises ``ValueError`` at ``make_loader`` time: silently
falling back to the CPU would hide a misconfigured job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from .lease import Lease, as_lease
from .ring import SlotRing

__all__ = [
    "BlockingCopyStream",
    "CopyEvent",
    "CopyStream",
    "CudaCopyStream",
    "DevicePrefetcher",
    "copy_stream_for",
    "map_tensors",
    "pin_ring",
    "pinned_empty",
    "resolve_device",
]


class CopyEvent(Protocol):
    def synchronize(self) -> None:
        """Block the host until the copies this event marks have finished."""
        ...


class CopyStream(Protocol):
    """Issues host-to-device copies and hands their results to the consumer."""

    def copy(self, batch: Any) -> tuple[Any, CopyEvent]:
        """Enqueue copies of every tensor in ``batch``; return the device batch and an event."""
        ...

    def hand_over(self, batch: Any, event: CopyEvent) -> None:
        """Make the consumer's work on ``batch`` wait for ``event`` (without blocking the host)."""
        ...


def map_tensors(fn: Callable[[torch.Tensor], Any], batch: Any) -> Any:
    """Apply ``fn`` to every tensor in a dict / list / tuple structure; keep other leaves.

    >>> map_tensors(lambda t: t + 1, {"x": torch.zeros(2), "id": "a"})["x"].tolist()
    [1.0, 1.0]
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: map_tensors(fn, v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(fn, v) for v in batch)
    return batch


def storage_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The strided tensors holding ``t``'s memory: ``t`` itself, or a sparse tensor's index
    and value arrays (what ``record_stream``, which takes strided tensors only, needs).

    >>> import warnings
    >>> with warnings.catch_warnings():  # torch's one-time "sparse CSR is in beta" notice
    ...     warnings.simplefilter("ignore")
    ...     csr = torch.eye(2).to_sparse_csr()
    >>> [p.tolist() for p in storage_parts(csr)]
    [[0, 1, 2], [0, 1], [1.0, 1.0]]
    """
    if t.layout == torch.sparse_csr:
        return (t.crow_indices(), t.col_indices(), t.values())
    if t.layout == torch.sparse_csc:
        return (t.ccol_indices(), t.row_indices(), t.values())
    if t.layout == torch.sparse_coo:
        return (t._indices(), t._values())
    return (t,)


def record_stream(t: torch.Tensor, stream: Any) -> None:
    """``t.record_stream(stream)`` for dense and sparse tensors alike."""
    for part in storage_parts(t):
        part.record_stream(stream)


class _Done:
    def synchronize(self) -> None:
        return None


class BlockingCopyStream:
    """Copies with a plain ``.to(device)``: finished when ``copy`` returns (any device)."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    def copy(self, batch: Any) -> tuple[Any, CopyEvent]:
        return map_tensors(lambda t: t.to(self.device), batch), _Done()

    def hand_over(self, batch: Any, event: CopyEvent) -> None:
        return None


class CudaCopyStream:
    """Copies on a side CUDA stream; the consumer's current stream waits on an event.

    Host tensors that are not page-locked (a ring whose registration failed, say) go through
    ``pin_memory()`` first, so every copy is an asynchronous DMA.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def _to_device(self, t: torch.Tensor) -> torch.Tensor:
        src = t if t.is_pinned() else t.pin_memory()
        return src.to(self.device, non_blocking=True)

    def copy(self, batch: Any) -> tuple[Any, CopyEvent]:
        with torch.cuda.stream(self.stream):
            out = map_tensors(self._to_device, batch)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self.stream)
        return out, event

    def hand_over(self, batch: Any, event: CopyEvent) -> None:
        consumer = torch.cuda.current_stream(self.device)
        consumer.wait_event(event)  # type: ignore[arg-type]
        # memory allocated on the side stream must not be reused before the consumer is done
        map_tensors(lambda t: record_stream(t, consumer), batch)


class _Staged:
    __slots__ = ("batch", "event", "lease")

    def __init__(self, batch: Any, event: CopyEvent, lease: Lease) -> None:
        self.batch, self.event, self.lease = batch, event, lease


class DevicePrefetcher(Iterator[Any]):
    """Yields ``source``'s batches on the device, copying one batch ahead.

    Order of events for batch ``k``: its copy was issued when batch ``k - 1`` was returned;
    now the consumer's stream is made to wait for it, the host waits for the copy to finish
    (it ran while you computed on ``k - 1``) and releases ``k``'s host memory, the copy of
    ``k + 1`` is issued, and ``k`` is returned. An error from ``source`` while fetching
    ``k + 1`` is raised on the following call, after ``k`` was delivered. At most one host
    batch is held at a time.

    >>> batches = [{"x": torch.full((2,), i)} for i in range(3)]
    >>> [b["x"].tolist() for b in DevicePrefetcher(batches, stream=BlockingCopyStream("cpu"))]
    [[0, 0], [1, 1], [2, 2]]
    """

    def __init__(self, source: Iterable[Any], *, stream: CopyStream) -> None:
        self._source = iter(source)
        self._stream = stream
        self._next: _Staged | Exception | None = None
        self._started = self._exhausted = False

    def __iter__(self) -> DevicePrefetcher:
        return self

    def __next__(self) -> Any:
        if not self._started:
            self._started = True
            self._next = self._stage()
        item, self._next = self._next, None
        if not isinstance(item, _Staged):
            self.close()
            if item is None:
                raise StopIteration
            raise item
        self._stream.hand_over(item.batch, item.event)
        item.event.synchronize()
        item.lease.release()
        self._next = self._stage()
        return item.batch

    def _stage(self) -> _Staged | Exception | None:
        if self._exhausted:
            return None
        try:
            lease = as_lease(next(self._source))
        except StopIteration:
            self._exhausted = True
            return None
        except Exception as err:  # raised after the batch already copied is delivered
            self._exhausted = True
            return err
        try:
            batch, event = self._stream.copy(lease.batch)
        except BaseException:
            lease.release()
            raise
        return _Staged(batch, event, lease)

    def close(self) -> None:
        """Wait for the copy in flight, release its host memory, close the source."""
        item, self._next = self._next, None
        self._exhausted = True
        if isinstance(item, _Staged):
            try:
                item.event.synchronize()
            finally:
                item.lease.release()
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


def resolve_device(device: torch.device | str | None) -> torch.device | None:
    """``None`` for host delivery (``None`` or a CPU device), else the target device.

    >>> resolve_device(None), resolve_device("cpu"), resolve_device("meta")
    (None, None, device(type='meta'))
    """
    if device is None:
        return None
    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available (torch "
            f"{torch.__version__}, torch.cuda.is_available() is False); pass device=None or "
            "'cpu' to receive batches in host memory"
        )
    return dev


def copy_stream_for(device: torch.device) -> CopyStream:
    """A side-stream copier on CUDA, blocking copies on any other device."""
    if device.type == "cuda":
        return CudaCopyStream(device)
    return BlockingCopyStream(device)


def pin_ring(ring: SlotRing) -> bool:
    """Page-lock a ring's shared memory for DMA (``cudaHostRegister``); False if refused.

    The memory is unregistered right before it is unmapped, or when a batch the consumer
    kept is moved out of the ring (:meth:`SlotRing.detach`).
    """
    if not torch.cuda.is_available():
        return False
    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    address = ring.address
    portable = 1  # cudaHostRegisterPortable: pinned for every CUDA context, as torch does
    if int(cudart.cudaHostRegister(address, ring.nbytes, portable)) != 0:
        return False

    def unpin() -> None:
        # a copy the consumer issued from the ring (``non_blocking=True``) may still read it
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        cudart.cudaHostUnregister(address)

    ring.pinned(unpin)
    return True


def pinned_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An uninitialised NumPy array in page-locked memory (needs CUDA)."""
    like = torch.from_numpy(np.empty(0, dtype=dtype))
    return torch.empty(shape, dtype=like.dtype, pin_memory=True).numpy()
