"""make_loader()'s options: its keyword arguments validated once, and the mixing pool they ask
for (:func:`pool_samples`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from .dataset import ChunkDataset
from .errors import caller_stacklevel
from .sampling.order import DEFAULT_LANES
from .sampling.sampler import DEFAULT_POOL_BATCHES, ChunkBatchSampler
from .transport import RingOptions
from .transport.gpu import resolve_device
from .transport.gpu_decode import GPU_DECODERS

__all__ = ["DEFAULT_POOL_BYTES", "LoaderOptions", "Transport", "pool_samples"]

Transport = Literal["ring", "dataloader"]

#: Default mixing pool: decoded bytes summed over the loader's readers (see make_loader).
DEFAULT_POOL_BYTES = 64 << 20
#: batches a remote dataset's ring workers are told of beyond those in their slots, so that
#: their chunks are fetched ahead (bench_remote: 20 ms per request)
REMOTE_LOOKAHEAD = 8


@dataclass(frozen=True)
class LoaderOptions:
    """:func:`make_loader`'s keyword arguments, validated once; what everything behind it gets.

    ``target`` (the device batches are delivered to, ``None`` for host memory) and ``pin``
    (page-lock host batches) are resolved from ``device`` and ``pin_memory``.
    """

    batch_size: int
    num_workers: int
    shuffle: bool = True
    seed: int = 0
    pool_bytes: int = DEFAULT_POOL_BYTES
    lanes: int = DEFAULT_LANES
    drop_last: bool = False
    rank: int | None = None
    world_size: int | None = None
    prefetch: int = 2
    persistent_workers: bool = True
    pin_memory: bool | None = None
    multiprocessing_context: Any = None
    timeout: float = 0
    transport: Transport = "ring"
    device: torch.device | str | None = None
    copy: bool = False
    decode: str = "cpu"
    target: torch.device | None = field(init=False)
    pin: bool = field(init=False)

    def __post_init__(self) -> None:
        workers = self.num_workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"num_workers must be an int >= 0; got {workers!r}")
        if self.transport not in ("ring", "dataloader"):
            raise ValueError(f"transport must be 'ring' or 'dataloader'; got {self.transport!r}")
        target = resolve_device(self.device)
        if self.decode != "cpu":
            if self.decode not in GPU_DECODERS:
                raise ValueError(
                    f"decode must be 'cpu' or one of {GPU_DECODERS}; got {self.decode!r}"
                )
            if self.decode != "reference" and (target is None or target.type != "cuda"):
                raise ValueError(
                    f"decode={self.decode!r} decodes JPEGs on a CUDA device and delivers the "
                    f"batches there: pass device='cuda' (got device={self.device!r})"
                )
        object.__setattr__(self, "target", target)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn(
                "make_loader(pin_memory=True): pinning page-locks memory for CUDA copies, and "
                "CUDA is not available here; batches are not pinned",
                UserWarning,
                stacklevel=caller_stacklevel(),  # make_loader's caller
            )
        to_cuda = target is not None and target.type == "cuda"
        pin = torch.cuda.is_available() and (self.pin_memory is not False or to_cuda)
        object.__setattr__(self, "pin", pin)

    def sampler(self, dataset: ChunkDataset) -> ChunkBatchSampler:
        """This rank's batch sampler over ``dataset``, its mixing pool from ``pool_bytes``."""
        return ChunkBatchSampler(
            dataset.chunk_sizes(),
            self.batch_size,
            pool=_mixing_pool(dataset, self.pool_bytes),
            lanes=self.lanes,
            seed=self.seed,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            rank=self.rank,
            world_size=self.world_size,
        )

    def ring(self, *, remote: bool) -> RingOptions:
        return RingOptions(
            num_workers=max(1, self.num_workers),
            prefetch=self.prefetch,
            persistent=self.persistent_workers,
            context=self.multiprocessing_context,
            timeout=float(self.timeout),
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
