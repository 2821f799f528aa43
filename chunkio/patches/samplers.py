"""Patch samplers: which patches an epoch visits, in which order, on which rank.

A sampler yields patch keys ``(volume, *origin)`` (tuples of ints) for
:class:`~chunkio.patches.PatchDataset`. Every sampler

* is a pure function of ``(seed, epoch)`` and its options (``np.random.default_rng([seed,
  epoch])``): the global order is the same on every rank and every run;
* shards for DDP: rank ``r`` of ``world_size`` takes the ``r``-th contiguous piece of the
  global order (contiguous, so its reads stay local), padded by repeating the order's start
  so every rank yields the same number of patches, as ``DistributedSampler`` does;
* resumes: ``state_dict()`` records ``(seed, epoch, patches_done)``; after
  ``load_state_dict`` the next ``__iter__`` continues right after that patch (one-shot, as
  the chunk sampler's resume). A loader that prefetches saves ``state_at(patches_done)``;
* keeps reads local: random orders are shuffled by *group* - the patches whose centres fall
  in one chunk of one volume stay together (:func:`locality_order`), so a batch decodes few
  chunks;
* follows a mask when bound with one (:class:`~chunkio.patches.masks.PatchMask`, the
  dataset's ``mask``): grids keep the patches centred in the mask, random patches are drawn
  uniformly among the origins centred in it.

Call ``set_epoch`` every epoch (as with ``DistributedSampler``); a sampler is *bound* to a
dataset's volumes by :class:`~chunkio.patches.PatchDataset` (or :meth:`PatchSampler.bind`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, TypeAlias

import numpy as np
from torch.utils.data import Sampler

from ..format.label_index import LabelIndex
from ..format.volume_layout import VolumeSet
from ..sampling.order import check_state
from ..util.deprecated import keyword_moved_to_method
from ..util.numeric import IntArray, ceil_div, ceil_div_array
from .masks import PatchMask

__all__ = [
    "GridSampler",
    "PatchSampler",
    "RandomPatchSampler",
    "grid_origins",
    "locality_order",
]

PatchKey: TypeAlias = tuple[int, ...]
EdgeMode = Literal["shift", "pad"]
STATE_VERSION = 1


def _int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")
    return int(value)


def grid_origins(length: int, patch: int, stride: int, edge: EdgeMode) -> IntArray:
    """Patch origins along one axis of ``length`` voxels: with ``stride <= patch`` every voxel
    is covered.

    ``edge="shift"`` moves the last patch back inside the volume; ``"pad"`` keeps the stride
    and lets the last patch stick out (the reader pads it). An axis shorter than the patch
    gets one patch at 0, padded either way.

    >>> grid_origins(10, 4, 4, "shift").tolist(), grid_origins(10, 4, 4, "pad").tolist()
    ([0, 4, 6], [0, 4, 8])
    >>> grid_origins(3, 4, 2, "shift").tolist()
    [0]
    """
    if edge not in ("shift", "pad"):
        raise ValueError(f"edge must be 'shift' or 'pad'; got {edge!r}")
    n = 1 if length <= patch else ceil_div(length - patch, stride) + 1
    origins = np.arange(n, dtype=np.int64) * stride
    if edge == "shift":
        origins = np.minimum(origins, max(length - patch, 0))
    return origins


def locality_order(
    keys: IntArray, patch_size: Sequence[int], volumes: VolumeSet, rng: np.random.Generator
) -> IntArray:
    """A random order of ``keys`` that keeps patches centred in the same chunk together.

    Groups (volume, chunk holding the patch centre) come in random order, patches within a
    group in random order.
    """
    return group_order(locality_groups(keys, patch_size, volumes), rng)


def locality_groups(keys: IntArray, patch_size: Sequence[int], volumes: VolumeSet) -> IntArray:
    """The group of each key for :func:`locality_order`: numbered (from 0) by (volume, chunk
    holding the patch centre), in ascending order of those."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    shapes = np.asarray(volumes.shapes, np.int64)[keys[:, 0]]
    centre = np.clip(keys[:, 1:] + np.asarray(patch_size) // 2, 0, shapes - 1)
    group_keys = np.column_stack([keys[:, 0], centre // np.asarray(volumes.chunks)])
    _, group = np.unique(group_keys, axis=0, return_inverse=True)
    out: IntArray = group.reshape(-1).astype(np.int64, copy=False)
    return out


def group_order(group: IntArray, rng: np.random.Generator) -> IntArray:
    """A random order of the keys of :func:`locality_groups` ``group``: groups in random
    order, keys within a group in random order."""
    if len(group) == 0:
        return np.zeros(0, np.int64)
    group_rank = rng.permutation(int(group.max()) + 1)[group]
    out: IntArray = np.lexsort((rng.random(len(group)), group_rank)).astype(np.int64)
    return out


def _dist_rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PatchSampler(Sampler[PatchKey]):
    """Base class: binding, epochs, rank sharding and resume; subclasses build the order."""

    kind: ClassVar[str] = "patch"

    def __init__(
        self, *, seed: int = 0, rank: int | None = None, world_size: int | None = None
    ) -> None:
        self.seed = _int("seed", seed, 0)
        dist_rank, dist_world = _dist_rank_world()
        self.world_size = _int("world_size", dist_world if world_size is None else world_size, 1)
        self.rank = _int("rank", dist_rank if rank is None else rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size {self.world_size}; got {self.rank}")
        self.epoch = 0
        self._volumes: VolumeSet | None = None
        self._patch: tuple[int, ...] = ()
        self._label_index: LabelIndex | None = None
        self._mask: PatchMask | None = None
        self._done = 0  # patches yielded in the current (or interrupted) pass
        self._resume = 0  # first patch of the next pass, set by load_state_dict
        self._cache: tuple[int, IntArray] | None = None

    # -- binding -----------------------------------------------------------------------------
    def bind(
        self,
        volumes: VolumeSet,
        patch_size: Sequence[int],
        label_index: LabelIndex | None = None,
        *,
        mask: PatchMask | None = None,
    ) -> PatchSampler:
        """Attach the volumes (and label index, and mask) to sample from; returns ``self``."""
        size = tuple(_int("patch_size", p, 1) for p in patch_size)
        if len(size) != volumes.ndim:
            raise ValueError(
                f"patch_size must have {volumes.ndim} sizes for {volumes.ndim}-D volumes; "
                f"got {tuple(patch_size)}"
            )
        if mask is not None and len(mask) != volumes.count:
            raise ValueError(f"the mask has {len(mask)} volumes; the dataset {volumes.count}")
        self._volumes, self._patch, self._label_index = volumes, size, label_index
        self._mask = mask
        self._cache = None
        self._check_bound()
        return self

    def _check_bound(self) -> None:
        """Subclasses validate their options against the volumes here."""

    @property
    def volumes(self) -> VolumeSet:
        if self._volumes is None:
            raise RuntimeError(
                f"{type(self).__name__} is not bound to any volumes: pass it to "
                "PatchDataset(..., sampler=...) or call .bind(volumes, patch_size)"
            )
        return self._volumes

    @property
    def mask(self) -> PatchMask | None:
        """The mask patches are centred in (``None``: anywhere)."""
        return self._mask

    def _uniform(self, n: int, rng: np.random.Generator) -> IntArray:
        """``n`` random keys inside the volumes (and centred in the mask, if any)."""
        if self._mask is None:
            return uniform_keys(n, self.volumes, self.patch_size, rng)
        return self._mask.draw(n, self.volumes.shapes, self.patch_size, rng)

    @property
    def patch_size(self) -> tuple[int, ...]:
        self.volumes  # noqa: B018 - raises the "not bound" error
        return self._patch

    # -- the order ---------------------------------------------------------------------------
    def global_keys(self, epoch: int) -> IntArray:
        """Every rank's patches of ``epoch``, in order: an ``(n, 1 + ndim)`` int64 array."""
        raise NotImplementedError

    def keys(self, epoch: int | None = None) -> IntArray:
        """This rank's patches of ``epoch`` (default: the current epoch), in order."""
        epoch = self.epoch if epoch is None else _int("epoch", epoch, 0)
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        order = self.global_keys(epoch)
        per = ceil_div(len(order), self.world_size)
        if per * self.world_size > len(order) and len(order):
            order = np.resize(order, (per * self.world_size, order.shape[1]))
        mine = order[self.rank * per : (self.rank + 1) * per]
        self._cache = (epoch, mine)
        return mine

    def __len__(self) -> int:
        return len(self.keys())

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; a different epoch discards a pending resume point."""
        epoch = _int("epoch", epoch, 0)
        if epoch != self.epoch:
            self._done = self._resume = 0
        self.epoch = epoch

    def __iter__(self) -> Iterator[PatchKey]:
        start, self._resume = self._resume, 0
        self._done = start
        return self._run(self.keys(), start)

    def _run(self, keys: IntArray, start: int) -> Iterator[PatchKey]:
        for i in range(start, len(keys)):
            self._done = i + 1
            yield tuple(keys[i].tolist())
        self._done = 0

    # -- state -------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything besides seed and epoch that determines the order (JSON-ready)."""
        vs = self.volumes
        return {
            "sampler": self.kind,
            "world_size": self.world_size,
            "patch_size": list(self.patch_size),
            "shapes": [list(s) for s in vs.shapes],
            "chunks": list(vs.chunks),
            # only with a mask: the states of unmasked samplers keep their keys
            **({"mask": self._mask.summary()} if self._mask is not None else {}),
        }

    @keyword_moved_to_method("patches_done", "state_at")
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position after the patches yielded so far (a
        :class:`~chunkio.util.stateful.Stateful`)."""
        return self._state(self._done)

    def state_at(self, patches_done: int) -> dict[str, Any]:
        """The position after ``patches_done`` patches of this epoch, whatever was yielded."""
        return self._state(self._check_done(patches_done))

    def _state(self, done: int) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "epoch": self.epoch,
            "patches_done": done,
            "rank": self.rank,
            **self.config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state``; :class:`~chunkio.errors.IncompatibleStateError` (a
        ``ValueError``) if it was saved under another configuration."""
        state = check_state(
            state, version=STATE_VERSION, config=self.config(), what="patch sampler"
        )
        self.seed = _int("seed", state.get("seed"), 0)
        self.epoch = _int("epoch", state.get("epoch"), 0)
        self._cache = None
        self._done = self._resume = self._check_done(state.get("patches_done"))

    def _check_done(self, done: object) -> int:
        n = _int("patches_done", done, 0)
        if n > len(self):
            raise ValueError(f"patches_done must be <= {len(self)} patches per epoch; got {n}")
        return n


class GridSampler(PatchSampler):
    """Every volume tiled by a regular grid of patches (inference, stitching, evaluation);
    with a mask, the grid's patches centred in it.

    Parameters
    ----------
    stride, overlap
        Step between patch origins per axis (an int or one per axis), or the overlap between
        neighbours (``stride = patch_size - overlap``); default: no overlap.
    edge
        ``"shift"``: the last patch of an axis is moved back inside the volume; ``"pad"``:
        it keeps the stride and sticks out (padded by the dataset's ``pad_mode``).
    shuffle
        Visit the patches in a random, chunk-grouped order (training); default: storage order.
    """

    kind = "grid"

    def __init__(
        self,
        *,
        stride: int | Sequence[int] | None = None,
        overlap: int | Sequence[int] | None = None,
        edge: EdgeMode = "shift",
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        if stride is not None and overlap is not None:
            raise ValueError(f"give stride or overlap, not both; got {stride!r} and {overlap!r}")
        if edge not in ("shift", "pad"):
            raise ValueError(f"edge must be 'shift' or 'pad'; got {edge!r}")
        self._stride_arg, self._overlap_arg = stride, overlap
        self.edge: EdgeMode = edge
        self.shuffle = bool(shuffle)
        # the grid (after the mask) and its locality groups: the same every epoch, so made
        # once per binding (each epoch reorders them; a mask test per epoch cost as much as
        # reading a small epoch's patches)
        self._grid: tuple[IntArray, IntArray] | None = None
        self._grid_for: tuple[Any, ...] | None = None  # the (edge, stride) it was made for

    @property
    def stride(self) -> tuple[int, ...]:
        size = self.patch_size
        if self._stride_arg is not None:
            return _per_axis("stride", self._stride_arg, len(size), 1)
        overlap = _per_axis("overlap", self._overlap_arg or 0, len(size), 0)
        if any(o >= p for o, p in zip(overlap, size, strict=True)):
            raise ValueError(f"overlap {overlap} must be smaller than the patch {size}")
        return tuple(p - o for p, o in zip(size, overlap, strict=True))

    def _check_bound(self) -> None:
        self._grid = None
        stride = self.stride
        if any(s > p for s, p in zip(stride, self.patch_size, strict=True)):
            raise ValueError(
                f"stride {stride} must not exceed the patch size {self.patch_size}: a grid "
                "with gaps cannot cover the volumes"
            )

    def volume_keys(self, volume: int) -> IntArray:
        """The grid of one volume, in C order of the origins."""
        shape = self.volumes.shapes[volume]
        axes = [
            grid_origins(n, p, s, self.edge)
            for n, p, s in zip(shape, self.patch_size, self.stride, strict=True)
        ]
        mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))
        return np.column_stack([np.full(len(mesh), volume, np.int64), mesh])

    def global_keys(self, epoch: int) -> IntArray:
        keys, groups = self._bound_grid()
        if not self.shuffle:
            return keys.copy()
        rng = np.random.default_rng([self.seed, epoch])
        return keys[group_order(groups, rng)]

    def _bound_grid(self) -> tuple[IntArray, IntArray]:
        """The grid's keys in storage order (those centred in the mask) and their locality
        groups, made on first use after binding (and again if ``edge`` or the stride changed)."""
        made_for = (self.edge, self.stride)
        if self._grid is None or self._grid_for != made_for:
            self._grid_for = made_for
            keys = np.concatenate([self.volume_keys(v) for v in range(self.volumes.count)])
            if self._mask is not None:
                keys = keys[self._mask.eligible(keys, self.patch_size, self.volumes.shapes)]
            keys.setflags(write=False)
            self._grid = (keys, locality_groups(keys, self.patch_size, self.volumes))
        return self._grid

    def __getstate__(self) -> dict[str, Any]:
        # the grid is made again where it is used: a slide's can be millions of keys
        return {**self.__dict__, "_grid": None}

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "stride": list(self.stride),
            "edge": self.edge,
            "shuffle": self.shuffle,
        }


class _CountedSampler(PatchSampler):
    """Base of the samplers that draw ``num_patches`` patches per epoch (all ranks together);
    by default as many as non-overlapping patches tile the volumes."""

    def __init__(
        self,
        num_patches: int | None = None,
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(seed=seed, rank=rank, world_size=world_size)
        self._num = None if num_patches is None else _int("num_patches", num_patches, 1)

    @property
    def num_patches(self) -> int:
        if self._num is not None:
            return self._num
        size = self.patch_size
        return int(sum(np.prod(ceil_div_array(s, size)) for s in self.volumes.shapes))

    def config(self) -> dict[str, Any]:
        return {**super().config(), "num_patches": self.num_patches}


class RandomPatchSampler(_CountedSampler):
    """Patches at uniformly random positions: a uniform volume, then a uniform origin in it
    (with a mask: a uniform origin among those centred in the mask, over every volume).

    Parameters
    ----------
    num_patches
        Patches per epoch (all ranks together); default: as many as non-overlapping patches
        tile the volumes.
    """

    kind = "random"

    def global_keys(self, epoch: int) -> IntArray:
        rng = np.random.default_rng([self.seed, epoch])
        keys = self._uniform(self.num_patches, rng)
        return keys[locality_order(keys, self.patch_size, self.volumes, rng)]


def uniform_keys(
    n: int, volumes: VolumeSet, patch_size: Sequence[int], rng: np.random.Generator
) -> IntArray:
    """``n`` keys: volume uniform, origin uniform among those keeping the patch inside."""
    vol = rng.integers(0, volumes.count, size=n)
    span = np.maximum(np.asarray(volumes.shapes, np.int64)[vol] - np.asarray(patch_size), 0)
    origin = np.floor(rng.random((n, volumes.ndim)) * (span + 1)).astype(np.int64)
    return np.column_stack([vol, origin]).astype(np.int64)


def _per_axis(name: str, value: int | Sequence[int], ndim: int, minimum: int) -> tuple[int, ...]:
    values = [value] * ndim if isinstance(value, int | np.integer) else list(value)
    if len(values) != ndim:
        raise ValueError(f"{name} needs 1 or {ndim} values; got {value!r}")
    return tuple(_int(name, v, minimum) for v in values)
