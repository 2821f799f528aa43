"""The one writer protocol of conversions: who writes a task's chunks, and how they become durable.

Where the format allows several writers (:attr:`Storage.concurrent_writers`) and the data has
a path other processes can open, each worker writes and syncs its own tasks through a
:class:`WriteTarget`; otherwise workers only read and return their arrays, and the calling
process writes them. Either way the calling process alone records tasks in the manifest,
writes the attributes and publishes (see :mod:`chunkio.convert.durability.staging`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...backends import Format, Writer, open_writer, storage_for
from ...format.layout import ATTR_KEY, COMPLETE_KEY
from ..durability.staging import Destination

__all__ = [
    "Runs",
    "Sync",
    "WriteTarget",
    "apply_writes",
    "start_writer",
    "write_here",
    "write_target",
]

#: ``(arrays, first chunk, stop chunk)`` that a written task must make durable
Sync = tuple[tuple[str, ...], int, int]

_writers: dict[tuple[str, str], Writer] = {}
_writers_lock = threading.Lock()  # dask workers run several tasks in threads


@dataclass(frozen=True)
class WriteTarget:
    """Where a worker writes its own tasks; picklable, no handles."""

    format: Format
    #: the data location a worker opens; None: workers return their arrays instead
    location: str | None
    #: whether written chunks must be fsync'd before the manifest may list them
    durable: bool
    #: one writer per process per run (a later run in the same worker opens afresh)
    run_id: str

    def writer(self) -> Writer:
        """This process's writer for the target, opened on first use."""
        if self.location is None:
            raise RuntimeError("this target has no location: the calling process writes")
        key = (self.location, self.run_id)
        with _writers_lock:
            if key not in _writers:
                _writers[key] = open_writer(self.location, format=self.format)
            return _writers[key]

    def write(self, writes: Sequence[tuple[str, int, Any]], syncs: Sequence[Sync]) -> None:
        """Write ``(array, start, values)`` blocks (see :func:`apply_writes`), then make
        ``syncs`` durable."""
        writer = self.writer()
        apply_writes(writer, writes)
        writer.flush()
        if self.durable and self.location is not None:
            storage = storage_for(self.format)
            for names, first, stop in syncs:
                storage.sync_chunks(self.location, names, first, stop)


@dataclass(frozen=True)
class Runs:
    """Runs ``(start, values)`` of whole chunks of one array that are all the shards they fall
    in will hold (:meth:`~chunkio.backends.Writer.write_runs`)."""

    runs: tuple[tuple[int, Any], ...]


def apply_writes(writer: Writer, writes: Sequence[tuple[str, int, Any]]) -> None:
    """Write ``(array, start, values)``: a block of rows, or :class:`Runs` (``start`` unused),
    whole shards where the writer can, else run by run."""
    for name, start, values in writes:
        if not isinstance(values, Runs):
            writer.write_block(name, start, values)
        elif not writer.write_runs(name, values.runs):
            for at, rows in values.runs:
                writer.write_block(name, at, rows)


def write_target(dest: Destination, *, parallel: bool) -> WriteTarget:
    """Workers write themselves when they run elsewhere and the format lets them."""
    location = dest.worker_location if parallel else None
    if location is not None and not storage_for(dest.plan.format).concurrent_writers:
        location = None
    return WriteTarget(dest.plan.format, location, dest.staged, os.urandom(8).hex())


def write_here(
    dest: Destination,
    writer: Writer,
    writes: Sequence[tuple[str, int, Any]],
    syncs: Sequence[Sync],
) -> None:
    """The calling process writes a task a worker returned, and makes it durable."""
    apply_writes(writer, writes)
    writer.flush()
    for names, first, stop in syncs:
        dest.sync(names, first, stop)


def start_writer(
    dest: Destination,
    layout_attrs: Mapping[str, Any],
    create_arrays: Callable[[Writer], None],
    *,
    reuse: bool = True,
) -> Writer:
    """This process's writer of ``dest``: reopened when resuming, else with its arrays created.

    A fresh dataset gets the layout first, without the completion marker, so a reader of
    unfinished data is told "incomplete", never served zeros; then ``create_arrays``; then
    ``dest.created()`` lets finished tasks be recorded. A staging that cannot be reopened for
    writing (an HDF5 file after a crash) or that ``reuse=False`` says holds nothing worth
    keeping is discarded.
    """
    fmt = dest.plan.format
    if dest.resumed and reuse:
        try:
            return open_writer(dest.data_location, format=fmt)
        except Exception:
            pass  # readable but no longer writable: start afresh
    if dest.resumed:
        dest.reset()
    writer = open_writer(dest.data_location, format=fmt)
    try:
        writer.set_attrs({ATTR_KEY: dict(layout_attrs), COMPLETE_KEY: False})
        create_arrays(writer)
        writer.flush()
    except BaseException:
        writer.close()
        raise
    dest.created()
    return writer
