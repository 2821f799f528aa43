"""A ring of preallocated batch slots in one shared-memory segment.

Workers write batches straight into a slot; the main process hands out tensors that view it.
Only slot numbers cross process boundaries: a batch costs no pickling, no fresh segment and no
copy besides the reader's own scatter. Each slot holds the batch's sample indices (written by
the main process) followed by one ``(batch_size, *sample_shape)`` array per dense field.

Lifetime: the main process creates the segment and is the only one that unlinks it; workers
attach by name. The mapping itself lives as long as any array viewing it (see
:class:`~chunkio.util.shm.SegmentMapping`), so a tensor kept after the ring closed stays
readable instead of pointing at unmapped memory; its contents are then no longer refreshed.
A batch still viewed when its slot comes round is left to its holder (:meth:`SlotRing.detach`,
:mod:`.detach`): every region owns whole pages so that it can be moved alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import LoaderError
from ..util.numeric import IntArray, ceil_div
from ..util.shm import SHM_PREFIX, SegmentMapping, attach, create, free_bytes
from .detach import PAGE, map_region, privatise

__all__ = ["SHM_PREFIX", "FieldSpec", "RingLayout", "RingSpec", "SlotRing"]

#: every region (a slot's indices, each field) owns whole pages: workers never share a cache
#: line across regions, and a kept batch's region can be moved out of the ring on its own
_ALIGN = PAGE


def _aligned(n: int) -> int:
    return ceil_div(n, _ALIGN) * _ALIGN


@dataclass(frozen=True)
class FieldSpec:
    """One dense field of a slot: element dtype (``numpy`` string) and per-sample shape."""

    name: str
    dtype: str
    sample_shape: tuple[int, ...]
    #: a (C, H, W) field laid out channels last in memory: (H, W, C) per sample
    channels_last: bool = False

    @property
    def sample_nbytes(self) -> int:
        return int(np.prod(self.sample_shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def view(self, raw: npt.NDArray[np.uint8], batch_size: int) -> npt.NDArray[Any]:
        """``(batch_size, *sample_shape)`` over ``raw`` bytes, in this field's memory order."""
        return batch_view(
            raw.view(np.dtype(self.dtype)),
            batch_size,
            self.sample_shape,
            channels_last=self.channels_last,
        )


def batch_view(
    flat: npt.NDArray[Any], n: int, shape: tuple[int, ...], *, channels_last: bool = False
) -> npt.NDArray[Any]:
    """``flat`` as ``(n, *shape)``; with ``channels_last`` a ``(n, C, H, W)`` view of memory laid
    out ``(n, H, W, C)`` (what torch calls ``channels_last``: convolutions take it as it is).

    >>> v = batch_view(np.arange(12), 1, (3, 2, 2), channels_last=True)
    >>> v.shape, v[0, :, 0, 0].tolist()
    ((1, 3, 2, 2), [0, 1, 2])
    """
    if not channels_last:
        return flat.reshape((n, *shape))
    c, h, w = shape
    return flat.reshape((n, h, w, c)).transpose(0, 3, 1, 2)


@dataclass(frozen=True)
class RingLayout:
    """Where each slot's indices and fields live inside the segment (pure arithmetic).

    >>> lay = RingLayout((FieldSpec("x", "|u1", (3,)),), batch_size=4, num_slots=2)
    >>> page = _ALIGN  # each region rounded up to whole pages
    >>> lay.slot_nbytes == 2 * page, lay.nbytes == 4 * page, lay.field_offset(1, 0) == 3 * page
    (True, True, True)
    """

    fields: tuple[FieldSpec, ...]
    batch_size: int
    num_slots: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.num_slots < 1:
            raise ValueError(
                f"a ring needs batch_size >= 1 and num_slots >= 1; "
                f"got {self.batch_size} and {self.num_slots}"
            )

    @classmethod
    def of(
        cls,
        fields: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]],
        *,
        batch_size: int,
        num_slots: int,
        channels_last: Collection[str] = (),
    ) -> RingLayout:
        """Layout for ``{field: (dtype, sample_shape)}``; fields in ``channels_last`` are laid
        out channels last (see :func:`batch_view`)."""
        specs = tuple(
            FieldSpec(k, np.dtype(d).str, tuple(s), k in channels_last and len(s) == 3)
            for k, (d, s) in fields.items()
        )
        return cls(specs, int(batch_size), int(num_slots))

    @property
    def _sizes(self) -> list[int]:
        return [_aligned(self.batch_size * 8)] + [
            _aligned(self.batch_size * f.sample_nbytes) for f in self.fields
        ]

    @property
    def slot_nbytes(self) -> int:
        return sum(self._sizes)

    @property
    def nbytes(self) -> int:
        return self.slot_nbytes * self.num_slots

    def field_offset(self, slot: int, field: int) -> int:
        """Byte offset of field number ``field`` of ``slot`` (``-1`` selects the indices)."""
        return slot * self.slot_nbytes + sum(self._sizes[: field + 1])

    def region_nbytes(self, field: int) -> int:
        """Bytes of field number ``field``'s region in every slot (whole pages)."""
        return self._sizes[field + 1]


@dataclass(frozen=True)
class RingSpec:
    """What a worker needs to attach: the segment's name and its layout (pickles)."""

    name: str
    layout: RingLayout


def _check_space(nbytes: int) -> None:
    """A too-small /dev/shm fails later as SIGBUS in a worker; fail here, clearly, instead."""
    free = free_bytes()
    if free is not None and free < nbytes:
        raise LoaderError(
            f"the batch ring needs {nbytes / 2**20:.1f} MiB of shared memory but /dev/shm has "
            f"{free / 2**20:.1f} MiB free; lower prefetch, batch_size or num_workers, enlarge "
            "/dev/shm (docker: --shm-size), or use workers=chunkio.Workers(transport='dataloader')"
        )


class SlotRing:
    """Batch slots in one shared-memory segment, created by the main process.

    >>> lay = RingLayout.of({"x": (np.dtype("u1"), (2,))}, batch_size=3, num_slots=2)
    >>> ring = SlotRing.create(lay)
    >>> ring.fields(1)["x"].shape, ring.indices(0).dtype.name
    ((3, 2), 'int64')
    >>> ring.close()
    """

    def __init__(self, shm: SharedMemory, layout: RingLayout, *, owner: bool) -> None:
        self.layout = layout
        self.name = shm.name
        self._owner = owner
        self._unlinked = False
        self._shm: SharedMemory | None = shm
        mapping = SegmentMapping(shm)
        self._mapping: SegmentMapping | None = mapping
        self.address = mapping.address  # start of the mapping here (for ``cudaHostRegister``)
        whole = np.asarray(mapping)
        self._indices: list[IntArray] = []
        self._fields: list[dict[str, npt.NDArray[Any]]] = []
        #: where each slot's field regions are mapped here (moved by :meth:`detach`)
        self._addresses: list[list[int]] = []
        self._unpin: Callable[[], None] | None = None
        b = layout.batch_size
        for slot in range(layout.num_slots):
            start = layout.field_offset(slot, -1)
            self._indices.append(whole[start : start + 8 * b].view(np.int64))
            views = {}
            for k, f in enumerate(layout.fields):
                start = layout.field_offset(slot, k)
                views[f.name] = f.view(whole[start : start + b * f.sample_nbytes], b)
            self._fields.append(views)
            self._addresses.append(
                [self.address + layout.field_offset(slot, k) for k in range(len(layout.fields))]
            )

    @classmethod
    def create(cls, layout: RingLayout) -> SlotRing:
        """A new segment sized for ``layout`` (the caller must :meth:`close` it)."""
        _check_space(layout.nbytes)
        return cls(create(layout.nbytes), layout, owner=True)

    @classmethod
    def attach(cls, spec: RingSpec) -> SlotRing:
        """Attach to a ring another process created (never unlinks it)."""
        return cls(attach(spec.name), spec.layout, owner=False)

    @property
    def spec(self) -> RingSpec:
        return RingSpec(self.name, self.layout)

    @property
    def num_slots(self) -> int:
        return self.layout.num_slots

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    def indices(self, slot: int) -> IntArray:
        """The slot's sample-index area (``batch_size`` int64)."""
        return self._indices[slot]

    def fields(self, slot: int) -> dict[str, npt.NDArray[Any]]:
        """The slot's field arrays, ``(batch_size, *sample_shape)`` each."""
        return self._fields[slot]

    def add_release_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` right before the mapping is unmapped (after the last view is gone)."""
        if self._mapping is None:
            raise LoaderError(f"shared-memory ring {self.name} is closed")
        self._mapping.release_hooks.append(hook)

    def pinned(self, unregister: Callable[[], None]) -> None:
        """The mapping was page-locked for CUDA; ``unregister`` undoes it (run once: by
        :meth:`detach`, or right before the memory is unmapped)."""
        done: list[bool] = []

        def once() -> None:
            if not done:
                done.append(True)
                unregister()

        self._unpin = once
        self.add_release_hook(once)

    def detach(self, slot: int, names: Collection[str]) -> None:
        """Leave fields ``names`` of ``slot`` to whoever still views them, as they are.

        The pages under those views become private copies (same addresses, same bytes,
        never written again) and this process maps the slot's shared regions afresh for the
        next batches. Main process only, and only while no worker writes ``slot``. A
        page-locked ring is unlocked first (CUDA cannot keep pages that move); its batches
        are then pinned per copy. Raises :class:`~chunkio.errors.LoaderError` if the kernel
        refuses.
        """
        if self._mapping is None:
            raise LoaderError(f"shared-memory ring {self.name} is closed")
        if self._unpin is not None:
            self._unpin()
        b = self.layout.batch_size
        for k, f in enumerate(self.layout.fields):
            if f.name not in names:
                continue
            start, nbytes = self.layout.field_offset(slot, k), self.layout.region_nbytes(k)
            try:
                fresh = map_region(self.name, start, nbytes)
                privatise(self._addresses[slot][k], nbytes)
            except OSError as err:
                raise LoaderError(
                    f"field {f.name!r} of ring slot {slot} is still viewed by a batch you kept, "
                    f"and moving it out of the ring ({nbytes} bytes at offset {start} of "
                    f"/dev/shm/{self.name}) failed: {err}; pass "
                    "workers=chunkio.Workers(copy=True) to keep batches"
                ) from err
            self._addresses[slot][k] = int(fresh.ctypes.data)
            self._fields[slot][f.name] = f.view(fresh[: b * f.sample_nbytes], b)

    def close(self) -> None:
        """Unlink the segment (creator only) and drop this object's views; idempotent.

        The name disappears from ``/dev/shm`` at once; the memory is returned when the last
        array viewing it is garbage (immediately, unless a caller still holds a batch).
        """
        if self._owner and not self._unlinked and self._shm is not None:
            self._unlinked = True
            with contextlib.suppress(FileNotFoundError):
                self._shm.unlink()
        self._shm = None
        self._indices, self._fields, self._addresses = [], [], []
        self._mapping = None
