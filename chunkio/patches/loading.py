"""Patches through :func:`~chunkio.make_loader`: a patch sampler's order cut into global batches,
and the batch source the loader's transports read patches through.

The order of a patch loader is its :class:`~chunkio.patches.PatchSampler`'s, seeded and grouped by
chunk (:func:`~chunkio.patches.samplers.locality_order`): the sampler's *global* keys of the epoch
(every rank's), cut into global batches of ``batch_size x world_size`` patches, of which rank ``r``
takes rows ``[r * batch_size, (r + 1) * batch_size)``, exactly as the loader splits the global
batches of samples (:func:`~chunkio.sampling.order.rank_rows`: a last partial batch is padded with
the epoch's first patches, so every rank gets as many batches). The sequence of global batches is
therefore the same for every ``num_workers`` and world size, and a state saved with one restores
onto any other with the same global batch.

What travels to the readers is a patch's *position* in the epoch's global keys: each reader
(ring worker, DataLoader worker, or this process) computes the keys of an epoch once from the
sampler it holds (a pure function of seed and epoch) and reads ``keys[positions]``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..backends import read_over_network
from ..errors import IncompatibleStateError
from ..sampling.order import check_int, check_state, rank_rows, split_rows
from ..sampling.sampler import EpochBatch, checked_batches_done, num_batches
from ..util.deprecated import keyword_moved_to_method
from ..util.numeric import IntArray
from .dataset import PatchDataset
from .samplers import GridSampler, PatchSampler, grid_origins

__all__ = [
    "LoaderSettings",
    "PatchBatchSampler",
    "PatchSource",
    "PatchDataset",
    "patch_prepared",
    "shares_chunks",
]

STATE_VERSION = 1
_HINTS = {
    "seed": " (build the patch sampler with the seed of the run the state was saved in)",
    "global_batch_size": " (keep batch_size * world_size fixed when resuming on another world "
    "size)",
}


class _Split(Protocol):
    @property
    def rank(self) -> int | None: ...

    @property
    def world_size(self) -> int | None: ...


class LoaderSettings(Protocol):
    """What a patch loader takes of :func:`~chunkio.make_loader`'s validated options."""

    @property
    def batch_size(self) -> int: ...

    @property
    def num_workers(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def shuffle(self) -> bool: ...

    @property
    def drop_last(self) -> bool: ...

    @property
    def transport(self) -> str: ...

    @property
    def decode(self) -> str: ...

    @property
    def ordering(self) -> _Split: ...


class PatchBatchSampler:
    """One rank's batches of patch *positions* in the epoch's global keys of ``patches``.

    Quacks like :class:`~chunkio.ChunkBatchSampler` for :class:`~chunkio.ChunkLoader`
    (``iter_arrays``, ``reader_rows``, ``set_epoch``, ``state_dict()``, ``state_at(n)``); as a
    DataLoader ``batch_sampler`` it yields :class:`~chunkio.sampling.sampler.EpochBatch` lists.
    Resume is one-shot, as the chunk sampler's. The state records the sampler's seed: it must be
    the same when restoring (the readers hold the sampler).

    Examples
    --------
    >>> from chunkio.format.volume_layout import VolumeSet
    >>> from chunkio.patches import GridSampler
    >>> vs = VolumeSet(shapes=((8, 8),), chunks=(4, 4), stacked=True)
    >>> grid = GridSampler().bind(vs, (4, 4))
    >>> [b.tolist() for b in PatchBatchSampler(grid, 1, rank=1, world_size=2).iter_arrays()]
    [[1], [3]]
    """

    def __init__(
        self,
        patches: PatchSampler,
        batch_size: int,
        *,
        rank: int,
        world_size: int,
        drop_last: bool = False,
    ) -> None:
        self.patches = patches
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0, self.world_size - 1)
        self.drop_last = bool(drop_last)
        self.epoch = patches.epoch
        self._count: tuple[int, int] | None = None  # (epoch, patches of every rank)
        self._done = 0  # batches yielded in the current (or last, if interrupted) pass
        self._resume = 0  # first batch of the next pass; set by load_state_dict
        self._whole: bool | None = None  # whether readers take whole batches (reader_rows)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def patches_in(self, epoch: int) -> int:
        """Patches of every rank in ``epoch``."""
        if self._count is None or self._count[0] != epoch:
            self._count = (epoch, len(self.patches.global_keys(epoch)))
        return self._count[1]

    def __len__(self) -> int:
        n = self.patches_in(self.epoch)
        return num_batches(n, self.batch_size, self.world_size, self.drop_last)

    def iter_batches(self, epoch: int | None = None, *, start: int = 0) -> Iterator[IntArray]:
        """This rank's batches ``start``, ``start + 1``, ... of ``epoch`` (positions)."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, 0)
        n, size = self.patches_in(epoch), self.global_batch
        count = num_batches(n, self.batch_size, self.world_size, self.drop_last)
        pad = np.arange(min(n, size), dtype=np.int64)  # the epoch's first patches
        for t in range(start, count):
            batch = np.arange(t * size, min((t + 1) * size, n), dtype=np.int64)
            yield rank_rows(batch, pad, self.rank, self.world_size)

    def iter_arrays(self) -> Iterator[IntArray]:
        """This rank's batches of the current epoch from the resume point (if any) on."""
        start, self._resume = self._resume, 0  # runs on the first next(), not before
        self._done = start
        for i, batch in enumerate(self.iter_batches(start=start), start):
            self._done = i + 1
            yield batch
        self._done = 0  # epoch complete: the next pass starts at batch 0

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        return (EpochBatch(batch.tolist(), epoch) for batch in self.iter_arrays())

    def reader_rows(self, n: int, readers: int) -> list[tuple[int, int]]:
        """Rows ``[0, n)`` of a batch among ``readers`` (:mod:`chunkio.transport.parts`): as
        one part, each batch read whole by one reader, readers taking batches in turn, when
        the patches of a batch can share chunks (the sampler groups them by chunk: split
        between readers, each would decode the shared ones; measured in
        ``docs/benchmarks.md``, patches); in even parts, every reader reading part of each
        batch (the first batch sooner), on a grid whose patches never share a chunk.

        >>> from chunkio.format.volume_layout import VolumeSet
        >>> from chunkio.patches import GridSampler, RandomPatchSampler
        >>> vs = VolumeSet(shapes=((8, 8),), chunks=(4, 4), stacked=True)
        >>> for sampler in (RandomPatchSampler(4), GridSampler()):
        ...     batches = PatchBatchSampler(sampler.bind(vs, (4, 4)), 4, rank=0, world_size=1)
        ...     print(batches.reader_rows(4, 2))
        [(0, 4)]
        [(0, 2), (2, 4)]
        """
        if self._whole is None:
            self._whole = shares_chunks(self.patches)
        if self._whole:
            return [(0, n)]
        # only the non-empty parts: a batch smaller than ``readers`` is then dealt out, each
        # of its parts to the next worker in turn, rather than to the same first workers
        parts = split_rows(n, np.array([n], np.int64), readers)
        return [(a, b) for a, b in parts if b > a]

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; a different epoch discards any pending resume point."""
        epoch = check_int("epoch", epoch, 0)
        if epoch != self.epoch:
            self._done = self._resume = 0
        self.epoch = epoch

    def _config(self) -> dict[str, Any]:
        order = {k: v for k, v in self.patches.config().items() if k != "world_size"}
        config = {
            "kind": "patches",
            "seed": self.patches.seed,
            "global_batch_size": self.global_batch,
            "drop_last": self.drop_last,
            "patch_sampler": order,
        }
        loaded: dict[str, Any] = json.loads(json.dumps(config))  # as a saved state reads back
        return loaded

    @keyword_moved_to_method("batches_done", "state_at")
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state after the batches yielded so far (a
        :class:`~chunkio.util.stateful.Stateful`). ``rank`` and ``world_size`` are for
        information: it restores onto any rank, world size (same global batch) and worker
        count."""
        return self._state(self._done)

    def state_at(self, batches_done: int) -> dict[str, Any]:
        """The state after ``batches_done`` batches of this epoch (a loader's delivered ones)."""
        return self._state(self._check_done(batches_done))

    def _state(self, done: int) -> dict[str, Any]:
        where = {"rank": self.rank, "world_size": self.world_size}
        return {"version": STATE_VERSION, "epoch": self.epoch, "batches_done": done, **where,
                **self._config()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume after batch ``state['batches_done']`` on the next pass;
        :class:`~chunkio.errors.IncompatibleStateError` if ``state`` fixes another order."""
        state = check_state(
            state, version=STATE_VERSION, config=self._config(), what="patch loader", hints=_HINTS
        )
        try:
            epoch = check_int("epoch", state.get("epoch"), 0)
            self.epoch, self._count = epoch, None
            done = self._check_done(state.get("batches_done"))
        except (TypeError, ValueError) as err:
            raise IncompatibleStateError(f"malformed patch loader state: {err}") from err
        self._done = self._resume = done

    def _check_done(self, batches_done: object) -> int:
        return checked_batches_done(batches_done, len(self))


def shares_chunks(sampler: PatchSampler) -> bool:
    """Whether two patches of ``sampler`` (bound) can need one chunk: always, but on a grid
    whose patches are whole chunks, each on the chunk grid and none overlapping another
    (a shifted last patch overlaps its neighbour). It decides how readers share a batch
    (:meth:`PatchBatchSampler.reader_rows`), never what is read.

    >>> from chunkio.format.volume_layout import VolumeSet
    >>> vs = VolumeSet(shapes=((8, 12),), chunks=(4, 4), stacked=True)
    >>> [shares_chunks(GridSampler(**kw).bind(vs, (4, 8))) for kw in ({}, {"edge": "pad"})]
    [True, False]
    """
    if not isinstance(sampler, GridSampler):
        return True
    volumes, size, stride = sampler.volumes, sampler.patch_size, sampler.stride
    for shape in set(volumes.shapes):
        for n, p, s, c in zip(shape, size, stride, volumes.chunks, strict=True):
            origins = grid_origins(n, p, s, sampler.edge)
            if p % c or (origins % c).any() or (np.diff(origins) < p).any():
                return True
    return False


class PatchSource:
    """The patches of a :class:`PatchDataset` by position in its sampler's global keys of an
    epoch: what the loader's transports read (``read_batch`` into a ring slot or a reused
    buffer, ``__getitems__`` of an :class:`~chunkio.sampling.sampler.EpochBatch` in DataLoader
    workers). ``dataset`` is the loader's copy of yours.

    Batches are ``{"image", "label" (when read), "volume", "origin"}`` (plus ``"spacing"`` and
    ``"origin_physical"`` when every store is an OME-Zarr image), as ``PatchDataset`` gives.
    """

    #: a loader's route check: a dataset transform of unknown output shape leaves the ring
    field_transform = None
    columns_transform = None

    def __init__(self, dataset: PatchDataset) -> None:
        self.dataset = dataset
        self.transform = dataset.transform
        self.remote = any(
            read_over_network(s.location, s.reader_options.documents) for s in dataset.stores
        )
        self._keys: tuple[int, IntArray] | None = None  # (epoch, its global keys)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_keys": None}  # each reader computes its own

    def keys(self, epoch: int) -> IntArray:
        """Every rank's patch keys of ``epoch``, in order (computed once per epoch)."""
        if self._keys is None or self._keys[0] != epoch:
            self._keys = (epoch, self.dataset.sampler.global_keys(epoch))
        return self._keys[1]

    def _lookup(self, positions: Sequence[int] | npt.ArrayLike, epoch: int) -> IntArray:
        keys = self.keys(int(epoch))
        at = np.asarray(positions, dtype=np.int64).reshape(-1)
        if at.size and (at.min() < 0 or at.max() >= len(keys)):
            bad = int(at[(at < 0) | (at >= len(keys))][0])
            raise IndexError(f"patch position {bad} outside epoch {epoch}'s {len(keys)} patches")
        found: IntArray = keys[at]
        return found

    def batch_fields(self) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """The fields of a batch, each ``(dtype, patch shape)``."""
        ds = self.dataset
        ndim = ds.volumes.ndim
        fields = {k: (np.dtype(ds.dtypes[k]), ds.volumes.item_shape(k, ds.patch_size))
                  for k in ds.fields}  # fmt: skip
        fields["volume"] = (np.dtype(np.int64), ())
        fields["origin"] = (np.dtype(np.int64), (ndim,))
        if all(s.ome is not None for s in ds.stores):
            fields["spacing"] = (np.dtype(np.float64), (ndim,))
            fields["origin_physical"] = (np.dtype(np.float64), (ndim,))
        return fields

    def read_batch(
        self,
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        epoch: int = 0,
    ) -> dict[str, Any]:
        """The patches at positions ``indices`` of ``epoch``, into ``out`` when given."""
        got = self.dataset.read_patches(self._lookup(indices, epoch), out=out)
        return {k: got[k] for k in (self.batch_fields() if out is None else out)}

    def arrange(self, columns: dict[str, Any]) -> dict[str, Any]:
        """A batch is a dict of tensors by field."""
        return columns

    def prefetch(self, indices: Sequence[int] | npt.ArrayLike) -> None:
        """Nothing is fetched ahead (a hint of :class:`chunkio.transport.BatchSource`)."""

    def channels_last_fields(self) -> frozenset[str]:
        """No field is laid out channels last."""
        return frozenset()

    def close(self) -> None:
        self.dataset.close()

    def __getitems__(self, batch: Sequence[int]) -> Any:
        epoch = getattr(batch, "epoch", self.dataset.sampler.epoch)
        keys = self._lookup(batch, epoch)
        return self.dataset.__getitems__([tuple(k) for k in keys.tolist()])

    def __getitem__(self, position: int) -> Any:
        return self.__getitems__([position])[0]

    def __len__(self) -> int:
        return len(self.keys(self.dataset.sampler.epoch))


def patch_prepared(
    given: PatchDataset, options: LoaderSettings
) -> tuple[PatchSource, PatchBatchSampler, str, None]:
    """What a loader over ``given`` reads (a copy: yours is not changed), its batch sampler and
    its route: ``"dataloader"`` when asked for or when the dataset has a per-patch
    ``transform`` (no batch shape to preallocate), else ``"local"`` without workers and
    ``"ring"`` with them."""
    sampler = given.sampler
    if options.decode != "cpu":
        raise ValueError(
            f"Workers(decode={options.decode!r}) decodes JPEG fields; a PatchDataset has none "
            "(leave decode='cpu')"
        )
    if options.seed not in (0, sampler.seed):  # 0: make_loader's default, not a choice
        raise ValueError(
            f"make_loader(seed={options.seed}) on a PatchDataset whose sampler has seed "
            f"{sampler.seed}: the order of patches is the sampler's; give it the seed "
            f"({type(sampler).__name__}(..., seed={options.seed}))"
        )
    if not options.shuffle and getattr(sampler, "shuffle", True):
        raise ValueError(
            f"make_loader(shuffle=False) on a PatchDataset whose {type(sampler).__name__} "
            "shuffles: the order of patches is the sampler's (GridSampler(shuffle=False) "
            "visits them in storage order)"
        )
    split = options.ordering  # DDP: the loader's rank and world size, else the sampler's
    rank = sampler.rank if split.rank is None else split.rank
    world = sampler.world_size if split.world_size is None else split.world_size
    dataset = copy.copy(given)  # pickles through __getstate__: the handle stays behind
    dataset.sampler = copy.deepcopy(sampler)
    batches = PatchBatchSampler(
        dataset.sampler, options.batch_size, rank=rank, world_size=world,
        drop_last=options.drop_last,
    )  # fmt: skip
    if options.transport == "dataloader" or dataset.transform is not None:
        route = "dataloader"
    else:
        route = "local" if options.num_workers == 0 else "ring"
    return PatchSource(dataset), batches, route, None
