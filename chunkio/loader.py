"""make_loader(): chunk-aware batches in sampler order, by default through a shared-memory ring.

Routes (``ChunkLoader.transport`` tells which one a loader took):

``"ring"``
    Worker processes read each batch straight into a preallocated shared-memory slot
    (:mod:`chunkio.transport`); only slot numbers travel. The default.
``"local"``
    ``num_workers=0`` with the ring transport: batches are read in this process into a
    reused buffer.
``"dataloader"``
    A torch ``DataLoader`` with the chunk-aware batch sampler. Chosen with
    ``workers=Workers(transport="dataloader")``, and automatically for datasets with a per-sample
    ``transform`` that does not declare its output shape, a ``batch_transform``, or samples
    of different shapes (ragged fields, images of several sizes without a fixed-size
    transform): there is no batch shape to preallocate.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Iterable, Iterator
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader

from .backends import Reader
from .dataset import ChunkDataset
from .errors import caller_stacklevel
from .loader_options import (
    DEFAULT_ORDERING,
    DEFAULT_POOL_BYTES,
    DEFAULT_WORKERS,
    LoaderOptions,
    Ordering,
    Workers,
    available_cores,
    pool_samples,
)
from .read.batch import collate
from .sampling.label_check import warn_if_label_sorted
from .sampling.sampler import ChunkBatchSampler
from .transport import Lease, LocalTransport, RingTransport
from .transport.gpu import DevicePrefetcher, copy_stream_for, map_tensors, pin_ring, pinned_empty
from .transport.gpu_decode import gpu_decode_route
from .transport.iterator import Indices, Parts
from .util.deprecated import Moved, moved_keywords
from .util.shared_stack import HeldSegments

__all__ = [
    "DEFAULT_POOL_BYTES",
    "ChunkLoader",
    "LoaderOptions",
    "Ordering",
    "RingFallbackWarning",
    "Workers",
    "default_num_workers",
    "make_loader",
    "pool_samples",
]


def default_num_workers() -> int:
    """One worker per available core, at most 8 (more than the cores warns:
    :class:`~chunkio.loader_options.WorkerCountWarning`)."""
    return max(1, min(available_cores(), 8))


class RingFallbackWarning(UserWarning):
    """A loader left the shared-memory ring because batches cannot be preallocated."""


class _Route(Protocol):
    def run(self, batches: Iterable[Indices], parts: Parts, *, epoch: int) -> Iterator[Lease]: ...

    def worker_pids(self) -> tuple[int, ...]: ...

    def close(self) -> None: ...


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
        return (Lease(batch) for batch in self.loader)

    def worker_pids(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        # a DataLoader keeps its persistent workers in its iterator; dropping it stops them
        self.loader._iterator = None


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
        route: _Route,
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


def _route_name(dataset: ChunkDataset, transport: str, num_workers: int, decode: str) -> str:
    """The route a loader takes (see the module docstring)."""
    if decode != "cpu":
        return "gpu-decode"
    if transport == "ring" and _ring_compatible(dataset):
        return "local" if num_workers == 0 else "ring"
    return "dataloader"


def _make_route(
    name: str, dataset: ChunkDataset, sampler: ChunkBatchSampler, options: LoaderOptions
) -> _Route:
    batch_size, pin, workers = sampler.batch_size, options.pin, options.num_workers
    ring = options.ring(remote=dataset.remote)
    if name == "local":
        allocate = {"allocate": pinned_empty} if pin else {}
        return LocalTransport(dataset, batch_size=batch_size, **allocate)
    if name == "gpu-decode":
        return gpu_decode_route(dataset, options.decode, options.target, options.workers.prefetch)
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


def _ring_compatible(dataset: ChunkDataset) -> bool:
    """Batches whose shape the ring can preallocate: every field has one batch shape (after a
    field transform), and no transform of unknown output."""
    if dataset.batch_transform is not None:
        return False
    if _undeclared(dataset):
        return False
    return all(dataset.output_shape(f) is not None for f in dataset.fields)


def _undeclared(dataset: ChunkDataset) -> bool:
    """A transform of unknown output: neither a field transform nor one of a batch's columns
    in place (:class:`chunkio.Normalize`)."""
    declared = dataset.field_transform is not None or dataset.columns_transform is not None
    return dataset.transform is not None and not declared


_MOVED = {
    **{
        old: Moved("ordering", Ordering, new)
        for old, new in (
            ("pool_bytes", "pool_bytes"),
            ("lanes", "lanes"),
            ("rank", "rank"),
            ("world_size", "world_size"),
        )
    },
    **{
        old: Moved("workers", Workers, new)
        for old, new in (
            ("prefetch", "prefetch"),
            ("persistent_workers", "persistent"),
            ("pin_memory", "pin_memory"),
            ("multiprocessing_context", "context"),
            ("timeout", "timeout"),
            ("transport", "transport"),
            ("copy", "copy"),
            ("decode", "decode"),
        )
    },
}


@moved_keywords("make_loader", _MOVED)
def make_loader(
    path_or_dataset: Any,
    batch_size: int,
    *,
    fields: Any = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    num_workers: int | None = None,
    device: torch.device | str | None = None,
    transform: Any = None,
    storage_options: Any = None,
    ordering: Ordering | None = None,
    workers: Workers | None = None,
) -> ChunkLoader:
    """A loader over a chunkio dataset with chunk-aware shuffling and sensible defaults.

    By default batches come through a shared-memory ring and are views of reused memory; a
    batch you keep is moved out of the way before its memory is reused, so it never changes
    (Linux; see :class:`ChunkLoader`), and batches you do not keep cost no copy.

    **Order.** The sequence of global batches is fixed by ``(seed, epoch, data, batch_size x
    world_size, pool, lanes, shuffle, drop_last)`` (:mod:`chunkio.sampling.order`): the same for
    every
    ``num_workers`` and world size, which only split the reading. Each batch draws from about
    ``pool_bytes / chunk bytes`` chunks through a sliding mixing pool, while each chunk is
    decoded about once per epoch (:class:`Ordering`).

    **Memory.** Readers hold the decoded chunks of the pool: about ``pool_bytes`` in all (the
    ring's workers each hold their lanes' share), plus two chunks per lane for the pool's
    edges. A ``Workers(transport="dataloader")`` worker reads whole batches, so each holds all
    of it and decodes every chunk (read amplification up to ``num_workers`` on that route).
    Data whose decoded chunks all fit ``Workers(hold_bytes)`` (1 GiB for all the readers
    together) is kept across epochs, so later epochs decode nothing (windows' arrays once,
    in shared memory, for all the workers).

    The keywords that moved into :class:`Ordering` (``pool_bytes``, ``lanes``, ``rank``,
    ``world_size``) and :class:`Workers` (``prefetch``, ``persistent_workers``,
    ``pin_memory``, ``multiprocessing_context``, ``timeout``, ``transport``, ``copy``,
    ``decode``) are still accepted for one release, with a ``DeprecationWarning`` naming the
    new spelling.

    Parameters
    ----------
    path_or_dataset
        A dataset path (opened as ``ChunkDataset(path, fields)``) or a :class:`ChunkDataset`,
        which the loader reads through a copy (``ChunkLoader.dataset``): yours is not changed.
    batch_size
        Samples per batch *on this rank* (the global batch is ``batch_size * world_size``).
    fields
        With a path: which arrays are read and what a batch is, as for :class:`ChunkDataset`.
        On a chunkio dataset, ``None`` (every field: batches are ``{name: tensor}`` dicts), a
        list of field names (batches are tuples in that order: ``for x, y in loader``) or one
        name (batches are that field's tensor). On an HDF5 file or Zarr store chunkio did not
        write, its arrays: a mapping ``{"image": "train/images", "label": "train/labels"}``
        (fields named by the keys, batches are tuples in its order) or a list of array paths
        (fields named by each path's last part).
    shuffle, seed, drop_last
        Passed to :class:`ChunkBatchSampler`: shuffle chunk-aware (seeded), and whether to
        drop the last, short batch.
    num_workers
        Reader processes; default one per core (max 8). On the ring every worker reads its
        lanes' rows of every batch. ``0`` reads in this process.
    device
        ``None``/``"cpu"``: batches in host memory. A CUDA device: batches arrive on it, copied
        on a side stream one batch ahead from page-locked memory. Raises ``ValueError`` if
        CUDA is requested but unavailable. Other devices get blocking copies.
    transform
        With a path: the dataset's per-sample ``transform``. :mod:`chunkio.transforms.image` (e.g.
        ``Compose([RandomResizedCrop(224), RandomHorizontalFlip()])``) are applied while
        reading, on the ring; a transform of unknown output shape falls back to the
        DataLoader route with a :class:`RingFallbackWarning`.
    storage_options
        With a URL (``s3://...``, ``https://...``): options for its filesystem (fsspec, e.g.
        s3fs's ``key``, ``secret``, ``client_kwargs``); chunks are then fetched by byte ranges,
        concurrently (see the README).
    ordering
        The mixing pool, lanes, rank and world size (:class:`Ordering`; default
        ``Ordering()``: a 64 MiB pool, 24 lanes, rank and world size from
        ``torch.distributed``).
    workers
        How the reader processes run and deliver batches (:class:`Workers`; default
        ``Workers()``: the shared-memory ring, 2 batches prefetched per worker, persistent
        workers, the default start method, no timeout, pinned when CUDA is available, views,
        JPEG fields decoded by the readers; ``Workers(decode="gpu")`` decodes them on
        ``device``).

    Returns
    -------
    ChunkLoader

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from chunkio import Output, write_arrays
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.zarr")
    >>> _ = write_arrays(path, {"x": np.arange(40).reshape(20, 2)}, output=Output(chunks=4))
    >>> loader = make_loader(path, 8, fields="x", num_workers=0)
    >>> [tuple(b.shape) for b in loader], loader.transport
    ([(8, 2), (8, 2), (4, 2)], 'local')
    >>> loader = make_loader(path, 8, fields="x", num_workers=0,
    ...                      ordering=Ordering(pool_bytes=1 << 20, lanes=4),
    ...                      workers=Workers(copy=True))
    """
    options = LoaderOptions(
        batch_size=batch_size,
        num_workers=default_num_workers() if num_workers is None else num_workers,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        device=device,
        ordering=DEFAULT_ORDERING if ordering is None else ordering,
        workers=DEFAULT_WORKERS if workers is None else workers,
    )
    if isinstance(path_or_dataset, ChunkDataset):
        if transform is not None or storage_options is not None:
            raise ValueError(
                "make_loader(transform=..., storage_options=...) go with a path; a "
                "ChunkDataset has its own (pass them to ChunkDataset)"
            )
        prepared = _prepare(path_or_dataset, None, options)
    else:  # one open: the reader that describes the dataset also reads its labels
        opened = ChunkDataset._opened(path_or_dataset, fields, transform, storage_options)
        with opened as (described, reader):
            prepared = _prepare(described, reader, options)
    return _assemble(prepared, options)


#: a loader's dataset, sampler, route and the segments its workers hold windows' arrays in
_Prepared = tuple[ChunkDataset, ChunkBatchSampler, str, HeldSegments | None]


def _prepare(given: ChunkDataset, reader: Reader | None, options: LoaderOptions) -> _Prepared:
    """The dataset the loader reads (a copy of ``given``, which stays as it is), its sampler,
    route and the segments its workers hold windows' arrays in. ``reader``: one open on the
    dataset for the label check (else it opens one)."""
    sampler = options.sampler(given)
    name = _route_name(given, options.transport, options.num_workers, options.decode)
    # ring workers read their lanes' rows of each batch; DataLoader workers whole batches
    readers = max(1, options.num_workers) if name == "ring" else 1
    # the readers must hold the pool, or they decode chunks again; the dataset budgets the
    # rest (every chunk kept across epochs when it fits Workers(hold_bytes)) in its copy
    needed = sampler.capacity_chunks(given.samples_per_chunk, readers) * given.chunk_nbytes()
    hold_bytes, workers = options.workers.hold_bytes, options.num_workers
    dataset, segments = given.for_loader(needed, workers=workers, hold_bytes=hold_bytes)
    warn_if_label_sorted(dataset, sampler, reader)
    return dataset, sampler, name, segments


def _assemble(prepared: _Prepared, options: LoaderOptions) -> ChunkLoader:
    dataset, sampler, name, segments = prepared
    if options.transport == "ring" and name == "dataloader" and _undeclared(dataset):
        warnings.warn(
            "make_loader: the dataset's transform declares no output shape, so batches "
            "cannot be preallocated and the loader falls back from the shared-memory ring "
            "to a DataLoader (pickled batches). Use chunkio.transforms.image (or give your "
            "transform the chunkio.transforms.sample.FieldTransform members) to stay on "
            "the ring",
            RingFallbackWarning,
            stacklevel=caller_stacklevel(),  # make_loader's caller
        )
    route = _make_route(name, dataset, sampler, options)
    return ChunkLoader(
        dataset,
        sampler,
        route,
        transport=name,
        num_workers=options.num_workers,
        device=options.target,
        copy=options.copy,
        segments=segments,
    )
