"""Window fields: steps of dense arrays around each anchor (:class:`chunkio.Field` steps).

A batch of anchors ``a`` reads rows ``a + step`` of each variable. Windows of neighbouring
anchors overlap, so the batch's rows are made unique first; each variable's dense reader
(:class:`~chunkio.read.dense.DenseReads`, shared by every window field of that array in this
process) decodes the chunks of that union once, through its cache, and one gather per variable
puts each ``(anchor, step)`` row into the batch at ``[b, step, variable]``. A loader keeps a
field's stacked variables decoded whole, side by side, when they fit its budget (held), else
streams them through one cache of chunks side by side (:mod:`chunkio.read.windows.stream`),
holding their first chunks that fit the budget (:mod:`chunkio.read.windows.held`): either way
a batch of the field is one ``np.take``; :func:`window_path` picks and logs it.

The window readers live here, the streamed stack in :mod:`.stream`, held stacks' filling in
:mod:`.held`. Like the rest of
:mod:`chunkio.read`, modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends`, :mod:`chunkio.images` and
:mod:`chunkio.transforms`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from ...format.layout import DatasetLayout, FieldInfo
from ...format.windows import Field
from ...util.numeric import IntArray
from ...util.shared_stack import BLOCK_BYTES, HeldSegments, StackShape, fill_local, fill_shared
from ..base import ReadContext, ReadRequest, checked_out
from ..dense import DenseReads, PreloadedReads, dense_reads
from .held import LaneFiller, part_shape, segment_fits
from .stream import StreamedStack, streamed_lane, streamed_stack, variable_field_name

__all__ = [
    "Field",
    "WindowPath",
    "WindowReads",
    "check_field_transform",
    "held_segments",
    "stack_shapes",
    "stream_cache_bytes",
    "variable_reader",
    "window_path",
]

#: rows of stacked variables at least this large are copied into the batch one by one
ROW_COPY_BYTES = 2048

_log = logging.getLogger("chunkio")

#: private A/B switch (``benchmarks/bench_windows.py --ab``): streamed caches as large as the
#: order asks, whatever the budget, as before 2026-11-29
_ORDER_CACHE = False


def variable_reader(ctx: ReadContext, info: Any, j: int) -> DenseReads | PreloadedReads:
    """The process's one dense reader of variable ``j`` of window field ``info`` (made on
    first use, shared by every window field that reads the array)."""
    array = info.arrays[j]
    found = ctx.shared.get(array)
    if found is None:
        found = ctx.shared[array] = dense_reads(ctx, _variable_info(info, j))
    return cast(DenseReads | PreloadedReads, found)


def _variable_info(info: Any, j: int) -> FieldInfo:
    """Variable ``j`` of window field ``info`` as a dense field of its own (one step)."""
    array = info.arrays[j]
    return FieldInfo(
        variable_field_name(array),
        info.dtype,
        tuple(info.sample_shape[info.stepped + info.stacked :]),
        array=array,
        rows_per_chunk=info.rows[j],
    )


def stack_shape(layout: DatasetLayout, info: Any) -> StackShape:
    """The stack of window field ``info``'s variables (blocks of :data:`BLOCK_BYTES`)."""
    return StackShape(
        tuple(info.arrays),
        tuple(info.rows),
        layout.num_samples,
        tuple(info.sample_shape[info.stepped + info.stacked :]),
        np.dtype(info.dtype).str,
        BLOCK_BYTES,
    )


def stack_shapes(layout: DatasetLayout, fields: Sequence[str]) -> list[StackShape] | None:
    """The stacks :func:`held_stack` makes for the window fields ``fields`` (read in that
    order), one per distinct tuple of two or more arrays; ``None`` when one of them would not
    be made: an array of it held apart before (by a field of that variable alone, or another
    stack), or a variable twice in one field. A field of one variable that no stack holds
    reads it through its own reader; one whose variables are all stacked reads their lanes."""
    found: dict[tuple[str, ...], StackShape] = {}
    stacked: set[str] = set()
    apart: set[str] = set()
    for name in fields:
        info: Any = layout.field(name)  # with windows, every field is a window field
        arrays = tuple(info.arrays)
        if arrays in found:
            continue
        if len(set(arrays)) < len(arrays):
            return None
        if len(arrays) == 1 or set(arrays) <= stacked:
            apart |= set(arrays) - stacked
            continue
        if (stacked | apart) & set(arrays):
            return None
        stacked |= set(arrays)
        found[arrays] = stack_shape(layout, info)
    return list(found.values())


def held_segments(layout: DatasetLayout, fields: Sequence[str]) -> HeldSegments | None:
    """Shared-memory segments for the stacks of window fields ``fields``, made by a loader's
    main process for its workers; ``None``: nothing stacked (or some window array held
    apart), or ``/dev/shm`` too small for them (each worker then holds its own)."""
    shapes = stack_shapes(layout, fields)
    return HeldSegments.if_room(shapes) if shapes else None


class WindowPath(NamedTuple):
    """How a loader's readers read its window fields (:func:`window_path`)."""

    #: the stacks held whole (decoded once, kept across epochs)
    hold: bool
    #: the shared-memory segments its workers hold stacks (or their first chunks) in
    segments: HeldSegments | None
    #: bytes of chunks each reader caches
    cache_bytes: int
    #: the readers' ``preload_bytes``: the held bytes (whole, or the first chunks' of a
    #: stack streamed past them: :func:`chunkio.read.windows.held.held_part`), else 0
    preload_bytes: int


def window_path(
    layout: DatasetLayout,
    fields: Sequence[str],
    *,
    held: int,
    edge: int,
    hold_bytes: int,
    workers: int,
    cache_bytes: int,
) -> WindowPath:
    """Whether a loader's readers hold the window fields ``fields`` of ``layout`` whole
    (``held`` decoded bytes, against ``hold_bytes``), the shared-memory segments its
    ``workers`` hold them in, and the bytes of chunks each reader keeps (``cache_bytes``,
    what the order asks, when held; ``edge``: the row chunks beyond an order chunk its windows
    reach); logged (logger ``"chunkio"``) with the sizes and why.

    Held: decoded once (in shared memory, once for all the workers), kept across epochs. Else
    streamed: each chunk decoded about once per pass through each reader's cache
    (:func:`stream_cache_bytes`), and where the budget has room beside the caches (a mixing
    pool each), the stack's first whole chunks held as above (one stack of variables chunked
    alike): each pass decodes only the others. Stacked variables are streamed, not held a copy
    per worker, when ``/dev/shm`` has no room for one shared copy: each worker would decode
    every chunk before its first batch. A stream whose variables cannot share one cache
    (chunked apart along time, or an array read apart by another field) reads them one by
    one, several times slower: a warning.
    """
    segments = held_segments(layout, fields) if workers and held <= hold_bytes else None
    shapes = stack_shapes(layout, fields)
    if segments is not None:
        hold = True
    elif workers and shapes:
        hold = False
    else:
        hold = held * max(1, workers) <= hold_bytes
    mb = 1 << 20
    if hold:
        where = "in shared memory for all the workers" if segments else "by each reader"
        _log.info(
            "chunkio windows: held path: the decoded arrays (%.1f MiB) fit "
            "Workers(hold_bytes=%.1f MiB); decoded once %s, kept across epochs",
            held / mb, hold_bytes / mb, where,
        )  # fmt: skip
        return WindowPath(True, segments, cache_bytes, held)
    if held > hold_bytes:
        why = (
            f"the decoded arrays ({held / mb:.1f} MiB) exceed "
            f"Workers(hold_bytes={hold_bytes / mb:.1f} MiB)"
        )
    elif shapes:
        why = (
            f"/dev/shm has no room for one copy ({held / mb:.1f} MiB) shared by the {workers} "
            "workers (a copy each would decode every chunk once per worker)"
        )
    else:
        why = (
            f"a copy per worker ({workers} x {held / mb:.1f} MiB) exceeds "
            f"Workers(hold_bytes={hold_bytes / mb:.1f} MiB)"
        )
    readers = max(1, workers)
    alike = shapes is not None and all(len(set(s.chunk_rows)) == 1 for s in shapes)
    part = _held_part(shapes, edge, hold_bytes, readers, cache_bytes) if alike else None
    if part is not None:
        segments, shape, whole = part
        cache = cache_bytes // (1 + max(0, edge))  # the mixing pool's: the rest is held
        _log.info(
            "chunkio windows: streamed path, held in part: %s; the first %.1f MiB of them "
            "(%.0f%% of the rows) decoded once %s and kept across epochs, the rest decoded "
            "about once per pass through a cache of %.1f MiB per reader (%d x %.1f MiB + "
            "%.1f MiB within Workers(hold_bytes))",
            why, shape.data_nbytes / mb, 100 * shape.num_rows / whole.num_rows,
            "in shared memory for all the workers" if workers else "by the reader",
            cache / mb, readers, cache / mb, shape.data_nbytes / mb,
        )  # fmt: skip
        return WindowPath(False, segments, cache, shape.data_nbytes)
    cache = stream_cache_bytes(cache_bytes, edge, hold_bytes, readers)
    within = (
        f"{readers} x {cache / mb:.1f} MiB within Workers(hold_bytes)"
        if cache * readers <= hold_bytes
        else f"the mixing pool's own, above Workers(hold_bytes) for {readers} reader(s): "
        "lower Ordering(pool_bytes) to stay within it"
    )
    if alike:
        _log.info(
            "chunkio windows: streamed path: %s; each chunk decoded about once per pass "
            "through a cache of %.1f MiB per reader (%s)%s",
            why, cache / mb, within, ", variables side by side" if shapes else "",
        )  # fmt: skip
    else:  # stacked variables that cannot share one cache
        _log.warning(
            "chunkio windows: streamed path, variable by variable: %s, and the variables "
            "are not stacked alike (chunked apart along time, or read apart by another "
            "field), so each batch gathers every variable on its own, several times slower "
            "than the held path; rechunk them alike, or raise Workers(hold_bytes)",
            why,
        )
    return WindowPath(False, None, cache, 0)


def _held_part(
    shapes: list[StackShape] | None, edge: int, hold_bytes: int, readers: int, order_bytes: int
) -> tuple[HeldSegments, StackShape, StackShape] | None:
    """The segment holding the first chunks of the one stack of ``shapes`` that fit
    ``hold_bytes`` beside ``readers`` caches of the mixing pool (``order_bytes`` with the
    ``edge`` chunks beyond each), the part's shape and the whole's; ``None``: no room for a
    chunk, several stacks, ``/dev/shm`` too small, or the A/B switch before 2026-11-29."""
    if _ORDER_CACHE or not shapes or len(shapes) != 1:
        return None
    pool = order_bytes // (1 + max(0, edge))
    part = part_shape(shapes[0], hold_bytes - readers * pool)
    segments = None if part is None else HeldSegments.if_room([part])
    return None if segments is None or part is None else (segments, part, shapes[0])


def stream_cache_bytes(order_bytes: int, edge: int, hold_bytes: int, readers: int) -> int:
    """Bytes of chunks each of ``readers`` readers caches when windows are streamed.

    ``order_bytes`` is what the order asks a reader to hold, each of its chunks counted with
    the ``edge`` chunks its windows reach beyond it; the mixing pool's chunks alone (that
    divided by ``1 + edge``) already decode each chunk about once per pass (the reach is only
    needed at the edges of the order's runs of chunks). A reader caches the pool at least, and
    up to what the order asks where ``hold_bytes`` leaves its share of room: more slots keep
    more of the edges and of the previous pass.

    >>> mb = 1 << 20
    >>> stream_cache_bytes(99 * mb, 2, 118 * mb, 2) // mb   # the budget's share
    59
    >>> stream_cache_bytes(99 * mb, 2, 0, 2) // mb          # the pool: no fewer
    33
    >>> stream_cache_bytes(99 * mb, 2, 1 << 40, 2) // mb    # no more than the order asks
    99
    """
    if _ORDER_CACHE:
        return order_bytes
    pool = order_bytes // (1 + max(0, edge))
    return max(pool, min(order_bytes, hold_bytes // max(1, readers)))


def held_stack(ctx: ReadContext, info: Any) -> npt.NDArray[Any] | None:
    """The stacked variables of window field ``info`` held whole, ``(rows, V, *shape)``, read
    once per process (or once for all of a loader's workers, in the shared-memory segment the
    loader made for them: :mod:`chunkio.util.shared_stack`) and shared by every window field of the
    same arrays, or ``None``: one variable, arrays too large to hold, or one of them held apart
    already (another field's stack or reader: each array is held once)."""
    arrays = tuple(info.arrays)
    found = ctx.shared.get(arrays)
    if found is not None:
        return cast(npt.NDArray[Any], found)
    shape = stack_shape(ctx.layout, info)
    if (
        len(arrays) < 2
        or shape.data_nbytes // len(arrays) > ctx.preload_bytes  # each variable's own reader
        # a loader's segment too small for the stack holds its first chunks (.held)
        or not segment_fits(ctx.held.get(arrays), shape, ctx.preload_bytes)
        or len(set(arrays)) < len(arrays)
        or any(a in ctx.shared for a in arrays)
    ):
        return None
    fill = LaneFiller(ctx, shape)
    name = ctx.held.get(arrays)
    stack = None if name is None else fill_shared(name, shape, fill)
    if stack is None:  # this process's own
        stack = fill_local(shape, fill)
    for j in range(len(arrays)):
        # a window field of this variable alone gathers from its lane of the stack
        ctx.shared[arrays[j]] = PreloadedReads(ctx, _variable_info(info, j), stack[:, j])
    ctx.shared[arrays] = stack
    return stack


class WindowReads:
    """One window field of one process's dataset handle; ``idx`` are anchor rows."""

    def __init__(self, ctx: ReadContext, info: Any) -> None:
        self.ctx = ctx
        self.info = info
        self.steps = np.asarray(info.steps, dtype=np.int64)
        #: stacked variables held whole: every (anchor, step) row of all of them is one
        #: contiguous run of both the stack and the batch, so one ``np.take`` reads a batch
        self.stack = held_stack(ctx, info)
        #: not held (beyond the budget): the same rows streamed through one cache of chunks
        #: of all the variables side by side, again one ``np.take`` a batch
        self.streamed: StreamedStack | None = None
        if (
            self.stack is None
            and len(info.arrays) > 1
            and len(set(info.arrays)) == len(info.arrays)
        ):
            self.streamed = streamed_stack(ctx, stack_shape(ctx.layout, info))
        #: a variable alone whose chunks a streamed stack decodes: read from its lane there
        self.lane = (
            streamed_lane(ctx, info.arrays[0])
            if self.stack is None and len(info.arrays) == 1
            else None
        )
        streamed = self.streamed or (self.lane[0] if self.lane is not None else None)
        if streamed is not None:  # a batch admits the chunks of every field's steps at once
            streamed.register(self.steps)
        self._sources: list[DenseReads | PreloadedReads] | None = None

    @property
    def path(self) -> str:
        """How this field reads: ``"held"``, ``"streamed"`` or ``"per variable"``."""
        if self.stack is not None:
            return "held"
        return "per variable" if self.streamed is None and self.lane is None else "streamed"

    @property
    def sources(self) -> list[DenseReads | PreloadedReads]:
        """Each variable's own reader (made on first use: a stack needs none)."""
        if self._sources is None:
            info = self.info
            self._sources = [variable_reader(self.ctx, info, j) for j in range(len(info.arrays))]
        return self._sources

    def read(
        self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest
    ) -> npt.NDArray[Any]:
        info = self.info
        if how.transform is not None:
            raise TypeError(f"field {info.name!r}: a field transform cannot apply to a window")
        out = checked_out(info, len(idx), out)
        shape = out.shape
        if not len(idx):
            return out
        target = out if out.flags.c_contiguous else np.empty(shape, dtype=info.dtype)
        count = len(idx) * len(self.steps)  # (anchor, step) rows
        if self.streamed is not None:
            self.streamed.gather(idx, self.steps, target.reshape(count, -1))
        elif self.lane is not None:
            self.lane[0].gather(idx, self.steps, target.reshape(count, -1), self.lane[1])
        else:
            # anchors keep every step inside
            rows = (idx[:, None] + self.steps[None, :]).reshape(-1)
            if self.stack is not None:  # one pass straight into the batch, no temporary
                flat = self.stack.reshape(len(self.stack), -1)
                # mode="clip": every row is in range; "raise" gathers into a temporary
                np.take(flat, rows, axis=0, out=target.reshape(count, -1), mode="clip")
            else:
                self._gather(rows, target.reshape(count, len(self.sources), -1))
        if target is not out:
            out[...] = target
        return out

    def _gather(self, rows: IntArray, view: npt.NDArray[Any]) -> None:
        """Variable by variable: each ``(anchor, step)`` row of variable ``j`` lands at
        ``view[k, j]``; chunks the cache lacks decoded once for the batch's unique rows."""
        union: IntArray | None = None
        inverse: IntArray | None = None
        # Stacked variables land in strided rows (every V-th), where np.take gathers into a
        # temporary and copies it over: rows this large are copied one by one instead (2.6x
        # less CPU for 32 KB rows of 3 variables)
        by_row = len(self.sources) > 1 and view.shape[2] * view.itemsize >= ROW_COPY_BYTES
        for j, source in enumerate(self.sources):
            if isinstance(source, PreloadedReads):  # held whole: its rows are the array's
                buffer, picks = source.whole, rows
            else:
                if union is None:
                    union, inverse = np.unique(rows, return_inverse=True)
                    inverse = inverse.reshape(-1)
                buffer, where = source.locate(union)
                picks = where[inverse]
            flat = buffer.reshape(len(buffer), -1)  # a view: a lane's rows are contiguous
            if by_row:
                dest = view[:, j, :]
                for k, r in enumerate(picks.tolist()):
                    dest[k] = flat[r]
            else:  # mode="clip": every row is in range; "raise" gathers into a temporary
                np.take(flat, picks, axis=0, out=view[:, j, :], mode="clip")

    def prefetch(self, idx: IntArray) -> None:
        if self.stack is not None:
            return  # held whole
        rows = np.unique(idx[:, None] + self.steps[None, :])
        streamed = self.streamed or (self.lane[0] if self.lane is not None else None)
        if streamed is not None:
            streamed.prefetch(rows)
            return
        for source in self.sources:
            source.prefetch(rows)


def check_field_transform(layout: DatasetLayout, name: str, where: str) -> None:
    """The field transform's field ``name`` exists (else ``MissingFieldError``) and is not a
    window (field transforms are for images: a ``TypeError``)."""
    info = layout.field(name, where=where)
    if info.kind == "window":
        raise TypeError(
            f"{where}: field {info.name!r} is a window; field transforms apply to images "
            "(normalise windows with chunkio.Normalize)"
        )
