"""make_loader(): a DataLoader wired with the chunk-aware sampler and good defaults."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from .batch import collate
from .dataset import ChunkDataset
from .sampling import ChunkBatchSampler, default_window

__all__ = ["ChunkLoader", "default_num_workers", "make_loader"]


def default_num_workers() -> int:
    """One worker per available core, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


class ChunkLoader:
    """Iterates batches of a :class:`ChunkDataset` in chunk-aware shuffled order.

    Behaves like a DataLoader (``__iter__``, ``__len__``) and adds ``set_epoch`` and
    ``state_dict``/``load_state_dict``, which count the batches *delivered to you* (not the
    ones workers have prefetched), so a restored loader continues exactly after the last batch
    you received. If you never call ``set_epoch``, each completed pass advances the epoch.
    """

    def __init__(self, dataset: ChunkDataset, sampler: ChunkBatchSampler, loader: DataLoader[Any]):
        self.dataset = dataset
        self.sampler = sampler
        self.num_workers = loader.num_workers
        self._loader = loader
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
        self.sampler.set_epoch(epoch)
        self._auto_epoch = False
        self._resume_from = 0

    def __iter__(self) -> Iterator[Any]:
        self._delivered, self._resume_from = self._resume_from, 0
        for batch in self._loader:
            self._delivered += 1
            yield batch
        self._delivered = 0
        if self._auto_epoch:
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch delivered (JSON-serialisable)."""
        return {"sampler": self.sampler.state_dict(batches_done=self._delivered)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue, on the next ``__iter__``, right after the batch ``state`` was taken at."""
        self.sampler.load_state_dict(state["sampler"])
        self._resume_from = int(state["sampler"]["batches_done"])


def make_loader(
    path_or_dataset: Any,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_workers: int | None = None,
    window: int | None = None,
    fields: Any = None,
    drop_last: bool = False,
    prefetch: int = 2,
    persistent_workers: bool = True,
    pin_memory: bool | None = None,
    multiprocessing_context: Any = None,
    timeout: float = 0,
    rank: int | None = None,
    world_size: int | None = None,
) -> ChunkLoader:
    """A loader over a chunkio dataset with chunk-aware shuffling and sensible defaults.

    ``path_or_dataset`` is a dataset path (opened as ``ChunkDataset(path, fields)`` with a
    chunk cache sized to the shuffle window) or a :class:`ChunkDataset`. Workers default to
    one per core (max 8) and persist across epochs; each worker serves a contiguous stream of
    batches so chunks split between two of its batches come from its cache; ``pin_memory``
    defaults to ``torch.cuda.is_available()``.
    """
    if num_workers is None:
        num_workers = default_num_workers()
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0; got {num_workers}")
    if isinstance(path_or_dataset, ChunkDataset):
        dataset = path_or_dataset
    else:
        probe = ChunkDataset(path_or_dataset, fields)
        w = window or default_window(probe.chunk_sizes(), batch_size)
        dataset = ChunkDataset(path_or_dataset, fields, cache_bytes=(w + 1) * probe.chunk_nbytes())
    sampler = ChunkBatchSampler(
        dataset.chunk_sizes(),
        batch_size,
        window=window,
        seed=seed,
        shuffle=shuffle,
        drop_last=drop_last,
        rank=rank,
        world_size=world_size,
        num_streams=max(1, num_workers),
    )
    loader: DataLoader[Any] = DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        prefetch_factor=prefetch if num_workers > 0 else None,
        multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
        timeout=timeout,
    )
    return ChunkLoader(dataset, sampler, loader)
