"""ChunkLoader: the loader :func:`~chunkio.make_loader` returns, iterating batches of its route
in sampler order, resumable (a :class:`~chunkio.util.stateful.Stateful` counting the batches
delivered), with host batches recycled or copied and device batches prefetched."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import Any, Protocol

import torch

from ..dataset import ChunkDataset
from ..sampling.sampler import ChunkBatchSampler
from ..transport import Lease
from ..transport.gpu import DevicePrefetcher, copy_stream_for, map_tensors
from ..transport.iterator import Indices, Parts
from ..util.shared_stack import HeldSegments

__all__ = ["ChunkLoader", "Route"]


class Route(Protocol):
    """How a loader's batches reach it (:mod:`.routes`): leases of batches, in order."""

    def run(self, batches: Iterable[Indices], parts: Parts, *, epoch: int) -> Iterator[Lease]: ...

    def worker_pids(self) -> tuple[int, ...]: ...

    def close(self) -> None: ...


def _host_batches(leases: Iterator[Lease], *, copy: bool) -> Generator[Any, None, None]:
    """Host delivery: the previous batch's memory is recycled when the next one is asked for."""
    held: Lease | None = None
    try:
        while True:
            if held is not None:  # before fetching: the freed slot can take the next batch
                held.release()
                held = None
            lease = next(leases, None)
            if lease is None:
                return
            if copy:
                batch = map_tensors(torch.clone, lease.batch)
                lease.release()
                yield batch
            else:
                held = lease
                yield lease.batch
    finally:
        if held is not None:
            held.release()
        close = getattr(leases, "close", None)
        if close is not None:
            close()


class ChunkLoader:
    """Iterates batches of a :class:`ChunkDataset` in chunk-aware shuffled order.

    Behaves like a DataLoader (``__iter__``, ``__len__``) and adds ``set_epoch`` and
    ``state_dict``/``load_state_dict``, which count the batches *delivered to you* (not the
    ones workers have prefetched), so a restored loader continues exactly after the last batch
    you received. If you never call ``set_epoch``, each completed pass advances the epoch.

    **Batch lifetime (ring and local routes, host delivery).** Batches view reused memory; a
    batch you keep (or any view of it: a slice, ``.numpy()``) is moved out of the way before
    that memory is reused (Linux), so it never changes, and batches you do not keep cost no
    copy (``workers=Workers(copy=True)``: copies). Batches delivered to a device
    (``device=...``) and batches of the DataLoader route are fresh memory.
    """

    def __init__(
        self,
        dataset: ChunkDataset,
        sampler: ChunkBatchSampler,
        route: Route,
        *,
        transport: str,
        num_workers: int,
        device: torch.device | None = None,
        copy: bool = False,
        segments: HeldSegments | None = None,
    ) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.transport = transport
        self.num_workers = num_workers
        self.device = device
        self.copy = copy
        self._route = route
        self._segments = segments  # where the workers hold windows' arrays
        self._delivered = 0
        self._resume_from = 0
        self._auto_epoch = True

    @property
    def batch_size(self) -> int:
        return self.sampler.batch_size

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (as with DistributedSampler); disables automatic advancing."""
        if epoch != self.sampler.epoch:
            self._resume_from = 0  # as in the sampler: only a new epoch cancels a resume
        self.sampler.set_epoch(epoch)
        self._auto_epoch = False

    def _batches(self) -> Generator[Any, None, None] | DevicePrefetcher:
        leases = self._route.run(
            self.sampler.iter_arrays(), self.sampler.reader_rows, epoch=self.sampler.epoch
        )
        if self.device is None or getattr(self._route, "delivers_on_device", False):
            return _host_batches(leases, copy=self.copy and self.device is None)
        return DevicePrefetcher(leases, stream=copy_stream_for(self.device))

    def __iter__(self) -> Iterator[Any]:
        self._delivered, self._resume_from = self._resume_from, 0
        batches = self._batches()
        try:
            for batch in batches:
                self._delivered += 1
                yield batch
        finally:
            batches.close()
        self._delivered = 0
        if self._auto_epoch:
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch delivered (JSON-serialisable; a
        :class:`~chunkio.util.stateful.Stateful`)."""
        return {"sampler": self.sampler.state_at(self._delivered)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue, on the next ``__iter__``, right after the batch ``state`` was taken at."""
        self.sampler.load_state_dict(state["sampler"])
        self._resume_from = int(state["sampler"]["batches_done"])

    def worker_pids(self) -> tuple[int, ...]:
        """Process ids of the running ring workers (empty for other routes or when idle)."""
        return self._route.worker_pids()

    def close(self) -> None:
        """Stop persistent workers and free shared memory (also done when garbage collected)."""
        self._route.close()
        if self._segments is not None:
            self._segments.close()

    def __enter__(self) -> ChunkLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
