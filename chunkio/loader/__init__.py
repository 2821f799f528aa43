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
``"gpu-decode"``
    ``workers=Workers(decode="gpu")``: encoded JPEG fields travel as bytes and are decoded on
    the device (:mod:`chunkio.transport.gpu_decode`).

:func:`make_loader` is here; the loader it returns in :mod:`.chunk_loader`, the routes in
:mod:`.routes`. Modules here may import :mod:`chunkio.backends`, :mod:`chunkio.dataset`,
:mod:`chunkio.format`, :mod:`chunkio.loader_options`, :mod:`chunkio.patches` (make_loader over
a PatchDataset), :mod:`chunkio.read`, :mod:`chunkio.sampling`, :mod:`chunkio.transforms`,
:mod:`chunkio.transport`, :mod:`chunkio.util` and :mod:`chunkio.errors`.
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import torch

from ..backends import Reader
from ..dataset import ChunkDataset
from ..dataset.opening import opened
from ..errors import caller_stacklevel
from ..loader_options import (
    DEFAULT_ORDERING,
    DEFAULT_POOL_BYTES,
    DEFAULT_WORKERS,
    LoaderOptions,
    Ordering,
    Workers,
    available_cores,
    num_workers_of,
    pool_samples,
)
from ..patches.loading import PatchDataset, patch_prepared
from ..sampling.label_check import warn_if_label_sorted
from ..sampling.sampler import ChunkBatchSampler
from ..util.deprecated import Moved, moved_keywords
from ..util.shared_stack import HeldSegments
from .chunk_loader import ChunkLoader
from .routes import make_route, route_name, undeclared_transform

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
    world_size, pool, lanes, shuffle, drop_last)`` (:mod:`chunkio.sampling.order`; patches:
    :mod:`chunkio.patches.loading`): the same for every ``num_workers`` and world size, which
    only split the reading. Each batch draws from about ``pool_bytes / chunk bytes`` chunks
    through a sliding mixing pool, each chunk decoded about once per epoch (:class:`Ordering`).

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
        A dataset path (opened as ``ChunkDataset(path, fields)``), a :class:`ChunkDataset` or a
        :class:`~chunkio.PatchDataset` (its sampler's patches; no ``pool_bytes``, ``lanes``),
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
        Reader processes (PyTorch's spelling of ``Workers(count=...)``: pass one, or both
        equal); default one per core (max 8). On the ring every worker reads its lanes' rows
        of every batch. ``0`` reads in this process.
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
        The reader processes: how many (``count``, or ``num_workers``), how they run and
        deliver batches (:class:`Workers`; default ``Workers()``: one per core (at most 8),
        the shared-memory ring, 2 batches prefetched per worker, persistent workers, the
        default start method, no timeout, pinned when CUDA is available, views, JPEG fields
        decoded by the readers; ``Workers(decode="gpu")`` decodes them on
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
        num_workers=num_workers_of(num_workers, workers, default_num_workers),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        device=device,
        ordering=DEFAULT_ORDERING if ordering is None else ordering,
        workers=DEFAULT_WORKERS if workers is None else workers,
    )
    if isinstance(path_or_dataset, ChunkDataset | PatchDataset):
        if transform is not None or storage_options is not None:
            raise ValueError(
                "make_loader(transform=..., storage_options=...) go with a path; a "
                f"{type(path_or_dataset).__name__} has its own (pass them to it)"
            )
        if isinstance(path_or_dataset, PatchDataset):  # routes read it as a BatchSource
            return _assemble(cast(_Prepared, patch_prepared(path_or_dataset, options)), options)
        prepared = _prepare(path_or_dataset, None, options)
    else:  # one open: the reader that describes the dataset also reads its labels
        with opened(path_or_dataset, fields, transform, storage_options) as (described, reader):
            prepared = _prepare(described, reader, options)
    return _assemble(prepared, options)


#: a loader's dataset, sampler, route and the segments its workers hold windows' arrays in
_Prepared = tuple[ChunkDataset, ChunkBatchSampler, str, HeldSegments | None]


def _prepare(given: ChunkDataset, reader: Reader | None, options: LoaderOptions) -> _Prepared:
    """The dataset the loader reads (a copy of ``given``, which stays as it is), its sampler,
    route and the segments its workers hold windows' arrays in. ``reader``: one open on the
    dataset for the label check (else it opens one)."""
    sampler = options.sampler(given)
    name = route_name(given, options.transport, options.num_workers, options.decode)
    # ring workers read their lanes' rows of each batch; DataLoader workers whole batches
    readers = max(1, options.num_workers) if name == "ring" else 1
    # the readers must hold the pool, or they decode chunks again; the dataset budgets the
    # rest (every chunk kept across epochs when it fits Workers(hold_bytes)) in its copy
    needed = sampler.capacity_chunks(given.samples_per_chunk, readers) * given.chunk_nbytes()
    hold_bytes, workers = options.workers.hold_bytes, options.num_workers
    dataset, segments = given.for_loader(needed, workers=workers, hold_bytes=hold_bytes)
    warn_if_label_sorted(dataset.label_source(), sampler, reader)
    return dataset, sampler, name, segments


def _assemble(prepared: _Prepared, options: LoaderOptions) -> ChunkLoader:
    dataset, sampler, name, segments = prepared
    if options.transport == "ring" and name == "dataloader" and undeclared_transform(dataset):
        warnings.warn(
            "make_loader: the dataset's transform declares no output shape, so batches "
            "cannot be preallocated and the loader falls back from the shared-memory ring "
            "to a DataLoader (pickled batches). Use chunkio.transforms.image (or give your "
            "transform the chunkio.transforms.sample.FieldTransform members) to stay on "
            "the ring",
            RingFallbackWarning,
            stacklevel=caller_stacklevel(),  # make_loader's caller
        )
    route = make_route(name, dataset, sampler, options)
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
