"""make_loader()'s options: the public option objects :class:`Ordering` and :class:`Workers`,
the keyword arguments validated once (:class:`LoaderOptions`), and the mixing pool they ask
for (:func:`pool_samples`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from .dataset import ChunkDataset
from .errors import caller_stacklevel
from .sampling.order import DEFAULT_LANES, check_int
from .sampling.sampler import DEFAULT_POOL_BATCHES, ChunkBatchSampler
from .transport import RingOptions
from .transport.gpu import resolve_device
from .transport.gpu_decode import GPU_DECODERS

__all__ = [
    "DEFAULT_HOLD_BYTES",
    "DEFAULT_POOL_BYTES",
    "LoaderOptions",
    "Ordering",
    "Transport",
    "WorkerCountWarning",
    "Workers",
    "available_cores",
    "num_workers_of",
    "pool_samples",
]

Transport = Literal["ring", "dataloader"]

#: Default mixing pool: decoded bytes summed over the loader's readers (see make_loader).
DEFAULT_POOL_BYTES = 64 << 20
#: Default hold_bytes: decoded bytes the readers together may keep across epochs (Workers)
DEFAULT_HOLD_BYTES = 1 << 30
#: batches a remote dataset's ring workers are told of beyond those in their slots, so that
#: their chunks are fetched ahead (bench_remote: 20 ms per request)
REMOTE_LOOKAHEAD = 8


class WorkerCountWarning(UserWarning):
    """``make_loader(num_workers=N)`` with more worker processes than the cores this process
    may run on: they compete for the CPUs (and with training), which slows loading."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; all cores where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Ordering:
    """How :func:`~chunkio.make_loader` orders samples beyond ``shuffle`` and ``seed``: the
    mixing pool, the lanes, and this process's share in distributed training.

    The sequence of *global* batches is a pure function of ``(seed, epoch, data,
    batch_size x world_size, pool_bytes, lanes, shuffle, drop_last)``
    (:mod:`chunkio.sampling.order`): the same for every ``num_workers`` and world size, which
    only split the reading.
    (:class:`chunkio.sampling.order.OrderSpec` is the same order resolved against a dataset: the
    pool in samples and the global batch size.)

    Parameters
    ----------
    pool_bytes
        Decoded bytes of the mixing pool (default 64 MiB; at least one chunk). Each batch
        draws from about ``pool_bytes / chunk bytes`` chunks through a sliding pool, while
        each chunk is decoded about once per epoch. The pool in samples, ``pool_bytes //
        bytes per sample`` over all of the dataset's fields, is part of the order.
    lanes
        Independent chunk streams each batch draws from; ranks and ring workers own whole
        lanes, so a multiple of ``world_size * num_workers`` reads every chunk once (24 by
        default: divisible by 1, 2, 3, 4, 6, 8, 12 and 24). Part of the order.
    rank, world_size
        This process's rank and the number of ranks (``None``: from ``torch.distributed``
        when it is initialised, else 0 and 1). ``batch_size`` is per rank.

    Examples
    --------
    >>> Ordering()
    Ordering(pool_bytes=67108864, lanes=24, rank=None, world_size=None)
    >>> Ordering(pool_bytes=256 << 20, rank=1, world_size=4).pool_bytes
    268435456
    """

    pool_bytes: int = DEFAULT_POOL_BYTES
    lanes: int = DEFAULT_LANES
    rank: int | None = None
    world_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pool_bytes, bool) or not isinstance(self.pool_bytes, int):
            raise TypeError(f"pool_bytes must be an int, got {self.pool_bytes!r}")
        check_int("lanes", self.lanes, 1)
        if self.world_size is not None:
            check_int("world_size", self.world_size, 1)
        if self.rank is not None:
            check_int("rank", self.rank, 0)


@dataclass(frozen=True)
class Workers:
    """:func:`~chunkio.make_loader`'s reader processes: how many, how they run and deliver
    batches (the transport, prefetching, process start method, timeout, pinning, copies), where
    JPEG fields are decoded and what the readers hold.

    The count lives here (``count``), beside everything else about the workers;
    ``make_loader(num_workers=N)`` is kept as its PyTorch spelling (``DataLoader``'s, which
    every PyTorch user types), the same number, not deprecated: pass one or the other (both,
    when they agree). The converters' ``Execution(workers=N)`` is the same concept for a
    conversion: the count of its processes. (``Workers`` once held everything but the count,
    while ``Execution.workers`` was one; the name was kept, and the count moved in, rather
    than the class renamed, so that ``workers=Workers(...)`` in existing code keeps its
    meaning.)

    Parameters
    ----------
    count
        Reader processes (``None``, the default: ``make_loader(num_workers=...)``, else one
        per core, at most 8). On the ring every worker reads its lanes' rows of every batch;
        ``0`` reads in the training process.
    transport
        ``"ring"`` (default: workers read each batch straight into a shared-memory slot)
        or ``"dataloader"`` (a torch DataLoader). The ring falls back to the DataLoader for
        transforms of unknown output shape and ragged fields; ``ChunkLoader.transport``
        tells the route taken.
    prefetch
        Batches in flight per worker (default 2).
    persistent
        Keep workers (and the ring) across epochs (default); stopped by
        :meth:`ChunkLoader.close` or when the loader is garbage collected.
    context
        ``"fork"``, ``"spawn"``, ``"forkserver"``, a multiprocessing context, or ``None``
        for the default.
    timeout
        Seconds to wait for one batch before raising :class:`~chunkio.errors.LoaderError`
        (0: no limit; a dead worker is reported at once either way).
    pin_memory
        Page-lock host batches (default ``None``: ``torch.cuda.is_available()``). Pinning
        needs CUDA: ``True`` without it warns once (``UserWarning``) and is skipped.
    copy
        Host delivery only: hand out a copy of every batch (one copy per batch). Not needed
        to keep batches: by default batches view reused memory, and a batch (or any view of
        it) still held when that memory comes round is moved out of the way first (on Linux:
        its pages are copied once, in place) and never changes; batches not kept cost no
        copy, and fields kept steadily are soon handed out as copies. Without Linux a kept
        batch changes (with a ``UserWarning``): pass ``True``.
    decode
        ``"cpu"`` (default): JPEG fields are decoded by the reading processes. ``"gpu"``
        (nvImageCodec) or ``"torchvision"`` (its nvJPEG): no worker processes; this process
        reads each batch's encoded bytes in a background thread and decodes the crops of
        ``transform`` (a :class:`~chunkio.transforms.Compose`) on ``device`` (CUDA), one
        batch ahead on a side stream (:mod:`chunkio.transport.gpu_decode`). ``"reference"``
        runs the same route with a CPU decoder (tests).
    hold_bytes
        Decoded bytes the readers together may keep across epochs (default 1 GiB; 0: off).
        When every chunk of the arrays the loader reads fits, decoded, in ``hold_bytes``,
        later epochs decode nothing (as insitubatch's pool does). The stacked variables of
        window fields (:class:`chunkio.Field`) are then held once for all the workers: the
        main process makes one shared-memory segment per stack and the workers decode it
        together before their first batches, each chunk about once (each reader its own copy
        where ``/dev/shm`` is too small, and without workers). Other fields' chunks are kept
        by each reader as it decodes them, when they fit ``hold_bytes`` divided among the
        readers (``num_workers``, or 1). The readers' memory is then at most ``hold_bytes`` in
        all, whatever the number of workers. Larger data keeps the mixing pool only and
        decodes each chunk once per epoch; a larger stack of window variables also holds its
        first chunks that fit beside the readers' pools (once for all the workers), so each
        epoch decodes only the others.

    Examples
    --------
    >>> Workers()
    Workers(count=None, transport='ring', prefetch=2, persistent=True, context=None, \
timeout=0.0, pin_memory=None, copy=False, decode='cpu', hold_bytes=1073741824)
    >>> Workers(count=2, context="spawn", timeout=60).timeout
    60
    """

    count: int | None = None
    transport: Transport = "ring"
    prefetch: int = 2
    persistent: bool = True
    context: Any = None
    timeout: float = 0.0
    pin_memory: bool | None = None
    copy: bool = False
    decode: str = "cpu"
    hold_bytes: int = DEFAULT_HOLD_BYTES

    def __post_init__(self) -> None:
        if self.count is not None:
            check_int("count", self.count, 0)
        if self.transport not in ("ring", "dataloader"):
            raise ValueError(f"transport must be 'ring' or 'dataloader'; got {self.transport!r}")
        check_int("prefetch", self.prefetch, 1)
        check_int("hold_bytes", self.hold_bytes, 0)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds; got {self.timeout!r}")
        if self.timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds; got {self.timeout}")
        if self.decode != "cpu" and self.decode not in GPU_DECODERS:
            raise ValueError(f"decode must be 'cpu' or one of {GPU_DECODERS}; got {self.decode!r}")


#: The defaults, shared (the objects are frozen)
DEFAULT_ORDERING = Ordering()
DEFAULT_WORKERS = Workers()


def num_workers_of(num_workers: int | None, workers: Any, default: Callable[[], int]) -> int:
    """The loader's worker count: ``make_loader(num_workers=N)`` or ``Workers(count=N)``
    (the same number, two spellings), else ``default()``. Both given must agree.

    >>> num_workers_of(2, Workers(), lambda: 8), num_workers_of(None, Workers(count=3), int)
    (2, 3)
    >>> num_workers_of(2, Workers(count=3), int)
    Traceback (most recent call last):
    ...
    ValueError: make_loader(num_workers=2) and Workers(count=3) give two worker counts: pass one
    """
    # None: the default Workers(); not a Workers: LoaderOptions refuses it, naming it
    count = workers.count if isinstance(workers, Workers) else None
    if num_workers is not None and count is not None and num_workers != count:
        raise ValueError(
            f"make_loader(num_workers={num_workers!r}) and Workers(count={count!r}) give two "
            "worker counts: pass one"
        )
    given = num_workers if num_workers is not None else count
    return default() if given is None else given


@dataclass(frozen=True)
class LoaderOptions:
    """:func:`make_loader`'s keyword arguments, validated once; what everything behind it gets.

    ``target`` (the device batches are delivered to, ``None`` for host memory) and ``pin``
    (page-lock host batches) are resolved from ``device`` and ``workers.pin_memory``.
    """

    batch_size: int
    num_workers: int
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = False
    device: torch.device | str | None = None
    ordering: Ordering = DEFAULT_ORDERING
    workers: Workers = DEFAULT_WORKERS
    target: torch.device | None = field(init=False)
    pin: bool = field(init=False)

    def __post_init__(self) -> None:
        workers = self.num_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"num_workers must be an int >= 0; got {workers!r}")
        cores = available_cores()
        if workers > cores:  # torch's DataLoader warns likewise
            warnings.warn(
                f"make_loader(num_workers={workers}) starts {workers} worker processes, and "
                f"this process may use {cores} cores: they compete for them (and with "
                f"training), which slows loading; pass num_workers <= {cores}, or leave it "
                "None for one per core (at most 8)",
                WorkerCountWarning,
                stacklevel=caller_stacklevel(),  # make_loader's caller
            )
        if not isinstance(self.ordering, Ordering):
            raise TypeError(f"ordering must be a chunkio.Ordering; got {self.ordering!r}")
        if not isinstance(self.workers, Workers):
            raise TypeError(
                f"workers must be a chunkio.Workers; got {self.workers!r} (the number of "
                "worker processes is num_workers, or Workers(count=...))"
            )
        target = resolve_device(self.device)
        decode = self.workers.decode
        if decode not in ("cpu", "reference") and (target is None or target.type != "cuda"):
            raise ValueError(
                f"Workers(decode={decode!r}) decodes JPEGs on a CUDA device and delivers the "
                f"batches there: pass device='cuda' (got device={self.device!r})"
            )
        object.__setattr__(self, "target", target)
        pin_memory = self.workers.pin_memory
        if pin_memory and not torch.cuda.is_available():
            warnings.warn(
                "make_loader(workers=Workers(pin_memory=True)): pinning page-locks memory for "
                "CUDA copies, and CUDA is not available here; batches are not pinned",
                UserWarning,
                stacklevel=caller_stacklevel(),  # make_loader's caller
            )
        to_cuda = target is not None and target.type == "cuda"
        pin = torch.cuda.is_available() and (pin_memory is not False or to_cuda)
        object.__setattr__(self, "pin", pin)

    @property
    def transport(self) -> Transport:
        """The transport asked for (:attr:`Workers.transport`)."""
        return self.workers.transport

    @property
    def decode(self) -> str:
        """Where JPEG fields are decoded (:attr:`Workers.decode`)."""
        return self.workers.decode

    @property
    def copy(self) -> bool:
        """Whether host batches are handed out as copies (:attr:`Workers.copy`)."""
        return self.workers.copy

    def sampler(self, dataset: ChunkDataset) -> ChunkBatchSampler:
        """This rank's batch sampler over ``dataset``, its mixing pool from ``ordering``."""
        return ChunkBatchSampler(
            dataset.chunk_sizes(),
            self.batch_size,
            pool=_mixing_pool(dataset, self.ordering.pool_bytes),
            lanes=self.ordering.lanes,
            seed=self.seed,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            rank=self.ordering.rank,
            world_size=self.ordering.world_size,
            files=dataset.samples.file_chunks,
        )

    def ring(self, *, remote: bool) -> RingOptions:
        return RingOptions(
            num_workers=max(1, self.num_workers),
            prefetch=self.workers.prefetch,
            persistent=self.workers.persistent,
            context=self.workers.context,
            timeout=float(self.workers.timeout),
            lookahead=REMOTE_LOOKAHEAD if remote else 0,
        )


def _mixing_pool(dataset: ChunkDataset, pool_bytes: int) -> int | None:
    """The mixing pool in samples (``None``: the sampler's default, for datasets of ragged
    fields only, which have no fixed sample size to count bytes by); see
    :func:`pool_samples`."""
    if isinstance(pool_bytes, bool) or not isinstance(pool_bytes, int):
        raise TypeError(f"pool_bytes must be an int, got {pool_bytes!r}")
    layout = dataset.layout
    sample = sum(f.sample_nbytes for f in layout.fields)
    chunk = sample * layout.samples_per_chunk
    if pool_bytes < chunk:
        raise ValueError(
            f"pool_bytes must hold at least one decoded chunk of {dataset.location!r} "
            f"({chunk} bytes: {layout.samples_per_chunk} samples of {sample} bytes), "
            f"got {pool_bytes}"
        )
    return pool_bytes // sample if sample else None


def pool_samples(dataset: ChunkDataset, pool_bytes: int, global_batch: int) -> int:
    """The mixing pool in samples: ``pool_bytes`` of the dataset's (all fields') samples.

    Counted over every field, not the selected ones, so the order does not change with
    ``fields``. Raises ``ValueError`` if the pool cannot hold one decoded chunk.
    """
    pool = _mixing_pool(dataset, pool_bytes)
    return DEFAULT_POOL_BATCHES * global_batch if pool is None else pool
