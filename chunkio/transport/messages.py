"""The ring workers' protocol: every message, defined once for both ends of the pipe.

The main process (:class:`~chunkio.transport.iterator.RingIterator` through
:class:`~chunkio.transport.workers.RingWorkers`) and each worker
(:func:`~chunkio.transport.workers.worker_main`) send only these named tuples, and tell them
apart by type. Every message is a few dozen bytes (the sample indices of a read travel in the
slot itself), so a pipe never fills and no ``send`` can block.

=========  ==========================================  ===========================================
from       message                                     meaning
=========  ==========================================  ===========================================
main       ``ReadRows(seq, slot, start, stop, epoch)``  read rows ``[start, stop)`` of the slot's
                                                       batch ``seq`` (``epoch`` keys transforms)
main       ``Hint(indices)``                           samples a later batch reads (no slot yet):
                                                       fetch ahead, a hint (remote datasets)
main       ``Stop()``                                  stop serving and exit
worker     ``Ready(pid)``                              attached to the ring, serving
worker     ``Done(seq, slot)``                         this worker's rows of batch ``seq`` are in
worker     ``Failed(seq, slot, text, pickled)``        reading failed (``seq`` None: at startup);
                                                       the traceback and the pickled exception
=========  ==========================================  ===========================================

``tests/transport/test_messages.py`` holds this table to the definitions below.

On the pipe each message travels as one frame (:mod:`.frames`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "FROM_MAIN",
    "FROM_WORKER",
    "Done",
    "Failed",
    "Hint",
    "ReadRows",
    "Ready",
    "Stop",
    "ToWorker",
]


class ReadRows(NamedTuple):
    """Read rows ``[start, stop)`` of the batch in ``slot`` (batch number ``seq``)."""

    seq: int
    slot: int
    start: int
    stop: int
    epoch: int


class Hint(NamedTuple):
    """Samples a batch not dispatched yet will read from this worker (a prefetch hint)."""

    indices: Any  # an int64 array


class Stop(NamedTuple):
    """Stop serving and exit."""


class Ready(NamedTuple):
    """The worker attached to the ring and serves."""

    pid: int


class Done(NamedTuple):
    """The worker's rows of batch ``seq`` are in ``slot``."""

    seq: int
    slot: int


class Failed(NamedTuple):
    """Reading failed: the worker's traceback, and its exception pickled (``None`` when it
    does not pickle). ``seq`` and ``slot`` are ``None`` when the worker failed to start."""

    seq: int | None
    slot: int | None
    text: str
    pickled: bytes | None


#: what the main process sends a worker, and what a worker sends back
FROM_MAIN: tuple[type[tuple[Any, ...]], ...] = (ReadRows, Hint, Stop)
FROM_WORKER: tuple[type[tuple[Any, ...]], ...] = (Ready, Done, Failed)

ToWorker = ReadRows | Hint | Stop
