"""What the reads of every field of the read core share: the process's context, its counters,
and the one way to read a small array whole.

A field's reads (:mod:`.dense`, :mod:`.ragged`, :mod:`.encoded`) serve one field of one
process's dataset handle, following :class:`FieldReads`; the core (:mod:`.core`) makes one per
field, by the field's kind, from :data:`chunkio.read.core.FIELD_KINDS`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..backends import Reader
from ..backends.base import StageClock, read_all
from ..errors import TransformError
from ..format.grid import SampleGrid
from ..format.layout import DatasetLayout, FieldInfo
from ..transforms.sample import FieldTransform, stored_output_shape
from ..util.numeric import IntArray

__all__ = [
    "CFDecodedReads",
    "DecodeThreads",
    "FieldReads",
    "MapRows",
    "PatchReadStats",
    "ReadContext",
    "ReadRequest",
    "ReadStats",
    "checked_out",
    "read_whole",
    "transformed_buffer",
    "transformed_shape",
]

#: runs a function over items, in order, maybe on several threads (:meth:`DecodeThreads.map`)
MapRows = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]


@dataclass
class ReadStats:
    """What this process has read: chunks decoded, chunks served from cache, samples served,
    and the seconds spent per stage (:meth:`stages`)."""

    chunks_read: int = 0
    cache_hits: int = 0
    rows_decoded: int = 0
    samples: int = 0
    batches: int = 0
    per_field: dict[str, int] = field(default_factory=dict)
    #: chunks decoded straight into the output (their samples were one run of the batch)
    direct_chunks: int = 0
    #: seconds gathering samples from decoded chunks into the output
    gather_s: float = 0.0
    clock: StageClock = field(default_factory=StageClock)
    #: patch reads: patches served, bytes decoded from the store and bytes delivered
    patches: int = 0
    bytes_decoded: int = 0
    bytes_delivered: int = 0

    @property
    def read_amplification(self) -> float:
        """Patch reads: bytes decoded per byte delivered (below 1 when patches share chunks)."""
        return self.bytes_decoded / self.bytes_delivered if self.bytes_delivered else 0.0

    def stages(self) -> dict[str, float]:
        """Seconds per stage in this process: ``read`` (file reads), ``checksum``,
        ``decode`` (decompression) and ``gather`` (copies into the batch)."""
        c = self.clock
        return {"read": c.read, "checksum": c.checksum, "decode": c.decode, "gather": self.gather_s}


#: patch reads count into the same counters (the name patches code has always used)
PatchReadStats = ReadStats


class DecodeThreads:
    """``map(fn, items)``, on ``count`` threads when more than one (started on first use).

    Apart from the core so that a field's reads can hold its :meth:`map` without a reference
    cycle back to the core (whose backend handle must close as soon as it is dropped)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._executor: ThreadPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``fn`` of each item, in order. On threads every call has run when this returns
        (the results are taken here, not as the caller iterates), and an error or interrupt
        (Ctrl-C) in this thread goes on only once the calls already running have finished,
        none starting after: they write into buffers (cache slots, batches) that the caller
        frees or reuses next."""
        if self.count <= 1:
            return map(fn, items)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.count, "chunkio-decode")
        calls = _Calls(fn)
        try:
            futures = [self._executor.submit(calls, item) for item in items]
            return iter([future.result() for future in futures])
        except BaseException:  # a submitted call whose future never came back counts too
            calls.stop()
            raise

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class _Calls:
    """``fn`` as the decode threads call it, counted while running, and never started once
    :meth:`stop` has been called (which waits for those running)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.running = 0
        self.stopped = False
        self.changed = threading.Condition()

    def __call__(self, item: Any) -> Any:
        with self.changed:
            if self.stopped:
                return None
            self.running += 1
        try:
            return self.fn(item)
        finally:
            with self.changed:
                self.running -= 1
                self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.wait_for(lambda: self.running == 0)


@dataclass
class ReadContext:
    """One process's read state that the reads of every field share (made by the core)."""

    reader: Reader
    layout: DatasetLayout
    grid: SampleGrid
    stats: ReadStats
    #: sample-axis chunks each dense field's cache keeps (at least a batch's)
    cache_chunks: int
    #: fields whose whole array is at most this many bytes are read whole, once
    preload_bytes: int
    #: ``map(fn, items)``, on the core's decode threads when it has more than one
    map_rows: MapRows = map
    #: readers of one array that several fields read (windows of the same variable), by
    #: array name: each chunk decoded once per process, whichever field asks; arrays held
    #: whole side by side (stacked variables), by the tuple of their names
    shared: dict[str | tuple[str, ...], Any] = field(default_factory=dict)
    #: stacked window variables' shared-memory segments, by the tuple of their names: a
    #: loader's workers decode them once together (:mod:`chunkio.util.shared_stack`)
    held: Mapping[tuple[str, ...], str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadRequest:
    """How one batch of a field is read (what :meth:`FieldReads.read` is asked)."""

    #: no later read asks for these samples (a loader's epoch order)
    once: bool = False
    #: this field's transform, or ``None``
    transform: FieldTransform | None = None
    #: the epoch the batch belongs to (the transform is keyed by it)
    epoch: int = 0
    #: the whole dataset's index of this store's sample 0 (many files read as one dataset):
    #: transforms are keyed by the dataset's indices, not a file's
    first: int = 0


class FieldReads(Protocol):
    """Serves one field of one process's dataset handle (one module per field kind, each
    implementation named ``<Kind>Reads``: :class:`~chunkio.read.dense.DenseReads`, ...)."""

    def read(self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest) -> Any:
        """Samples ``idx`` (validated) into ``out`` when given, read as ``how`` says."""
        ...

    def prefetch(self, idx: IntArray) -> None:
        """Start fetching what a later read of ``idx`` needs (remote readers only)."""
        ...


def read_whole(reader: Reader, name: str, stats: ReadStats | None = None) -> npt.NDArray[Any]:
    """Every element of array ``name``, read chunk by chunk along axis 0 (its chunks counted
    into ``stats`` when given)."""
    out = read_all(reader, name)
    if stats is not None:
        info = reader.array_info(name)
        stats.chunks_read += SampleGrid(int(info.shape[0]), int(info.chunks[0])).num_chunks
    return out


def transformed_buffer(
    ctx: ReadContext,
    info: FieldInfo,
    transform: FieldTransform,
    stored: set[tuple[int, ...]],
    count: int,
) -> npt.NDArray[Any]:
    """A new array for ``count`` transformed samples of ``info`` whose stored shapes are
    ``stored``; they must transform to one shape."""
    return np.empty((count, *transformed_shape(ctx, info, transform, stored)), info.dtype)


def transformed_shape(
    ctx: ReadContext, info: FieldInfo, transform: FieldTransform, stored: set[tuple[int, ...]]
) -> tuple[int, ...]:
    """The one shape samples of ``info`` of stored shapes ``stored`` transform to; a
    :class:`~chunkio.errors.TransformError` naming the field if one does not fit the
    transform or they give several (a batch needs one)."""
    shapes = set()
    for shape in sorted(stored):
        try:
            shapes.add(stored_output_shape(transform, shape))
        except (TypeError, ValueError) as err:
            raise TransformError(
                f"{ctx.reader.location}: the transform of field {info.name!r} cannot apply to "
                f"a sample of shape {shape}: {err}"
            ) from err
    if len(shapes) != 1:
        raise TransformError(
            f"{ctx.reader.location}: the transform of field {info.name!r} gives samples "
            f"of {len(shapes)} different shapes ({sorted(shapes)[:3]}...); a batch needs one "
            "(end it with a crop or a fixed-size resize)"
        )
    return shapes.pop()


class CFDecodedReads:
    """A field whose arrays are CF-encoded (``decode_cf``, :mod:`chunkio.format.cf`): read as
    stored by the reader of its kind (``reads``), then decoded into the batch."""

    def __init__(
        self, ctx: ReadContext, info: FieldInfo, reads: Callable[[ReadContext, FieldInfo], Any]
    ) -> None:
        self.info = info
        self.cf = info.cf
        self.inner = reads(ctx, dataclasses.replace(info, dtype=info.cf.stored, cf=None))
        #: a stacked window's variable axis in a batch (after the batch and step axes)
        self.axis = 1 + int(getattr(info, "stepped", False))

    def read(self, idx: IntArray, out: npt.NDArray[Any] | None, how: ReadRequest) -> Any:
        info = self.info
        if how.transform is not None:
            raise TypeError(f"field {info.name!r}: a field transform cannot apply to a CF field")
        out = checked_out(info, len(idx), out)
        raw = self.inner.read(idx, None, how)
        self.cf.decode(raw, out, self.axis)
        return out

    def prefetch(self, idx: IntArray) -> None:
        self.inner.prefetch(idx)


def checked_out(info: FieldInfo, count: int, out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
    """``out``, checked to fit ``count`` samples of ``info``, or a new array for them."""
    shape = (count, *(info.sample_shape or ()))
    if out is None:
        return np.empty(shape, dtype=info.dtype)
    if out.shape != shape or out.dtype != info.dtype:
        raise ValueError(
            f"output buffer for field {info.name!r} must be {shape} {info.dtype}; "
            f"got {out.shape} {out.dtype}"
        )
    return out
