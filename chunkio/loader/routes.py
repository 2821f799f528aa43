"""The routes a loader's batches take (see :mod:`chunkio.loader`): which one a dataset gets, and
the route object for it (a ring or local transport, the GPU-decode route, or a DataLoader)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..dataset import ChunkDataset
from ..loader_options import LoaderOptions
from ..read.batch import collate
from ..sampling.sampler import ChunkBatchSampler
from ..transport import Lease, LocalTransport, RingTransport
from ..transport.gpu import pin_ring, pinned_empty
from ..transport.gpu_decode import DecodeTarget, gpu_decode_route
from ..transport.iterator import Indices, Parts
from .chunk_loader import Route

__all__ = ["decode_target", "make_route", "ring_compatible", "route_name", "undeclared_transform"]


class _DataLoaderRoute:
    """A torch DataLoader whose batch sampler is the loader's sampler.

    Its workers read whole batches, round-robin, so each touches every lane and decodes each
    chunk once per worker (read amplification up to ``num_workers``). Splitting each batch
    into per-worker lane parts, as the ring does, was measured and rejected: on the benchmark
    data (LZ4, 3x96x96) the extra DataLoader IPC and the join halved throughput (15,700 vs
    32,300 samples/s with 2 workers).
    """

    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader

    def run(self, batches: Iterable[Indices], parts: Parts, *, epoch: int) -> Iterator[Lease]:
        # the DataLoader iterates the same sampler itself (its batches carry their epoch:
        # chunkio.sampling.sampler.EpochBatch); each of its batches is fresh memory
        it = iter(self.loader)
        try:
            for batch in it:
                yield Lease(batch)
        except Exception:
            # a failed pass stops its workers now, as the ring's does. Left to the garbage
            # collector (the error's traceback holds the iterator in a cycle), torch's iterator
            # finalizes its queues first and then waits 5 s per worker for a stop they no
            # longer deliver (measured: 10 s with 2 workers, torch 2.13)
            _shut_down(it)
            self.loader._iterator = None
            raise

    def worker_pids(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        # a DataLoader keeps its persistent workers in its iterator; dropping it stops them
        self.loader._iterator = None


def _shut_down(it: Iterator[Any]) -> None:
    """Stop a DataLoader iterator's worker processes (none for a single-process one)."""
    if isinstance(it, _MultiProcessingDataLoaderIter):
        it._shutdown_workers()


def route_name(dataset: ChunkDataset, transport: str, num_workers: int, decode: str) -> str:
    """The route a loader takes (see the module docstring)."""
    if decode != "cpu":
        return "gpu-decode"
    if transport == "ring" and ring_compatible(dataset):
        return "local" if num_workers == 0 else "ring"
    return "dataloader"


def make_route(
    name: str, dataset: ChunkDataset, sampler: ChunkBatchSampler, options: LoaderOptions
) -> Route:
    batch_size, pin, workers = sampler.batch_size, options.pin, options.num_workers
    ring = options.ring(remote=dataset.remote)
    if name == "local":
        allocate = {"allocate": pinned_empty} if pin else {}
        return LocalTransport(dataset, batch_size=batch_size, **allocate)
    if name == "gpu-decode":
        target = decode_target(dataset)
        return gpu_decode_route(
            dataset, target, options.decode, options.target, options.workers.prefetch
        )
    if name == "ring":
        on_ring = pin_ring if pin else (lambda ring: None)
        return RingTransport(dataset, batch_size=batch_size, options=ring, on_ring=on_ring)
    loader: DataLoader[Any] = DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=collate,
        pin_memory=pin,
        persistent_workers=ring.persistent and workers > 0,
        prefetch_factor=ring.prefetch if workers > 0 else None,
        multiprocessing_context=ring.context if workers > 0 else None,
        timeout=ring.timeout,
    )
    return _DataLoaderRoute(loader)


def decode_target(dataset: ChunkDataset) -> DecodeTarget:
    """What the GPU-decode route needs to know of ``dataset``, as values (the route reads no
    dataset attribute): its fields and transform, and its field transform's field's kind,
    encoding and batch shape."""
    crop = dataset.field_transform
    if crop is None:
        return DecodeTarget(dataset.location, tuple(dataset.fields), dataset.transform)
    info = dataset.layout.field(crop.field, where=str(dataset.location))
    return DecodeTarget(
        location=dataset.location,
        fields=tuple(dataset.fields),
        transform=dataset.transform,
        crop=crop,
        kind=info.kind,
        encoding=info.encoding,
        shape=dataset.output_shape(crop.field),
    )


def ring_compatible(dataset: ChunkDataset) -> bool:
    """Batches whose shape the ring can preallocate: every field has one batch shape (after a
    field transform), and no transform of unknown output."""
    if dataset.batch_transform is not None:
        return False
    if undeclared_transform(dataset):
        return False
    return all(dataset.output_shape(f) is not None for f in dataset.fields)


def undeclared_transform(dataset: ChunkDataset) -> bool:
    """A transform of unknown output: neither a field transform nor one of a batch's columns
    in place (:class:`chunkio.Normalize`)."""
    declared = dataset.field_transform is not None or dataset.columns_transform is not None
    return dataset.transform is not None and not declared
