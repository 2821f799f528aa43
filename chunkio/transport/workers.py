"""Ring workers: processes that read batches straight into shared-memory slots.

One duplex pipe per worker carries the protocol (:mod:`.messages`: every message both ends
send, defined once, with its table; :mod:`.frames` carries them: both ends read and write
the pipe's descriptor directly, never ``Connection.send``/``recv``); there are no queues, so
no feeder threads and no named semaphores to leak.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import select
import selectors
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from ..errors import LoaderError
from .frames import Inbox, encode, write_all
from .messages import Done, Failed, Hint, ReadRows, Ready, Stop, ToWorker
from .ring import RingSpec, SlotRing
from .source import BatchSource

__all__ = ["RingWorkers", "WorkerSpec", "describe_exit", "resolve_context", "worker_main"]

#: how often an idle worker checks that the process that started it is still alive
_PARENT_CHECK_S = 1.0
#: the most bytes one read takes from a pipe (every frame that has arrived, as a rule)
_READ_BYTES = 1 << 16


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker needs; pickled under spawn and forkserver (datasets drop handles)."""

    worker_id: int
    dataset: BatchSource
    ring: RingSpec


def _limit_threads() -> None:
    # Parallelism comes from the worker processes; nested thread pools only oversubscribe.
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(ImportError, AttributeError):
        from numcodecs import blosc

        blosc.set_nthreads(1)


def _pickled(err: BaseException) -> bytes | None:
    try:
        blob = pickle.dumps(err)
        pickle.loads(blob)  # some exceptions pickle but do not unpickle
    except Exception:
        return None
    return blob


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Entry point of a ring worker process."""
    # Ctrl-C reaches the whole process group; the main process handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    try:
        _limit_threads()
        ring = SlotRing.attach(spec.ring)
        write_all(conn.fileno(), encode(Ready(os.getpid())))
    except BaseException as err:
        with contextlib.suppress(OSError):
            write_all(
                conn.fileno(), encode(Failed(None, None, traceback.format_exc(), _pickled(err)))
            )
        sys.exit(1)
    try:
        _serve(spec.dataset, ring, conn, parent)
    except (EOFError, ConnectionError):
        pass  # the main process went away (EOF, or a reset socket under spawn)
    finally:
        ring.close()
        with contextlib.suppress(Exception):
            spec.dataset.close()


def _serve(dataset: BatchSource, ring: SlotRing, conn: Connection, parent: int) -> None:
    """Read the batches the main process sends, in order.

    Tasks already queued behind the current one are announced to the dataset first
    (:meth:`~.source.BatchSource.prefetch`): a remote dataset starts fetching their chunks
    while this one is decoded, so with ``prefetch`` batches in flight per worker the network
    waits overlap the work. :class:`~.messages.Hint` messages (:attr:`RingOptions.lookahead`)
    announce batches further ahead, before they have a slot.
    """
    queued: deque[ReadRows | Stop] = deque()
    announced = 0  # how many of the queued tasks were announced
    prefetch = dataset.prefetch  # a hint; sources with nothing to fetch ahead ignore it
    fd = conn.fileno()
    frames = Inbox()
    # one poll set for the pipe: ``Connection.poll`` builds a new selector on every call
    inbox = select.poll()
    inbox.register(fd, select.POLLIN)

    def pending(timeout_s: float) -> bool:
        return bool(inbox.poll(int(timeout_s * 1000)))

    def take() -> None:
        """Every message that has arrived (the pipe is readable)."""
        data = os.read(fd, _READ_BYTES)
        if not data:
            raise EOFError("the main process closed the pipe")
        for message in frames.feed(data):
            if isinstance(message, Hint):
                with contextlib.suppress(Exception):  # a hint: the read reports errors
                    prefetch(message.indices)
            else:
                queued.append(message)

    while True:
        if not queued:
            if not pending(_PARENT_CHECK_S):
                # Under fork this process inherits the main process's end of the pipe, so the
                # pipe never reports EOF: watch the parent instead (reparenting means it died).
                if os.getppid() != parent:
                    return
                continue
            take()
            if not queued:
                continue
        while pending(0):  # everything already sent
            take()
        for task in list(queued)[max(1, announced) :]:
            if isinstance(task, ReadRows):
                _announce(prefetch, ring, task)
        announced = len(queued)
        task = queued.popleft()
        announced = max(0, announced - 1)
        if isinstance(task, Stop):
            return
        try:
            out = {
                name: view[task.start : task.stop] for name, view in ring.fields(task.slot).items()
            }
            rows = ring.indices(task.slot)[task.start : task.stop]
            dataset.read_batch(rows, out=out, epoch=task.epoch)
            reply: Done | Failed = Done(task.seq, task.slot)
        except Exception as err:
            reply = Failed(task.seq, task.slot, traceback.format_exc(), _pickled(err))
        write_all(fd, encode(reply))


def _announce(prefetch: Any, ring: SlotRing, task: ReadRows) -> None:
    """Tell the dataset which samples a queued task will read (a hint: errors are ignored,
    the read itself reports them)."""
    with contextlib.suppress(Exception):
        prefetch(ring.indices(task.slot)[task.start : task.stop].copy())


def resolve_context(context: Any) -> BaseContext:
    """``None`` (the platform default), a start-method name, or a context object."""
    if context is None or isinstance(context, str):
        return multiprocessing.get_context(context)
    if isinstance(context, BaseContext):
        return context
    raise TypeError(
        f"the start method (Workers(context=...)) must be None, 'fork', 'spawn', 'forkserver' or a "
        f"multiprocessing context; got {context!r}"
    )


def describe_exit(exitcode: int | None) -> str:
    """Human words for a process exit code.

    >>> describe_exit(-9), describe_exit(1)
    ('signal SIGKILL (exit code -9)', 'exit code 1')
    """
    if exitcode is None:
        return "no exit code yet"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " - /dev/shm may be full" if name == "SIGBUS" else ""
        return f"signal {name} (exit code {exitcode}){hint}"
    return f"exit code {exitcode}"


class RingWorkers:
    """The main process's side: start, talk to, watch and stop ring workers."""

    def __init__(
        self, dataset: BatchSource, ring: RingSpec, *, num_workers: int, context: Any
    ) -> None:
        ctx = resolve_context(context)
        self.processes: list[Any] = []
        self.conns: list[Connection] = []
        self.inboxes = [Inbox() for _ in range(num_workers)]
        self.ready = [False] * num_workers
        self.ready_at = [0.0] * num_workers
        self.started = time.monotonic()
        try:
            for w in range(num_workers):
                mine, theirs = ctx.Pipe(duplex=True)
                proc = ctx.Process(  # type: ignore[attr-defined]
                    target=worker_main,
                    args=(WorkerSpec(w, dataset, ring), theirs),
                    name=f"chunkio-ring-worker-{w}",
                    daemon=True,  # multiprocessing terminates daemons when this process exits
                )
                self.conns.append(mine)
                try:
                    proc.start()
                finally:
                    theirs.close()  # the child has its own copy now
                self.processes.append(proc)
        except BaseException:
            self.shutdown(grace=0.0)
            raise
        # one poll set for the workers' lifetime: multiprocessing's ``wait`` and
        # ``Connection.poll`` build and fill a new selector on every call (a few per batch).
        # poll(2), not epoll: no kernel object for a later fork to inherit
        self._selector = selectors.PollSelector()
        for w, (conn, proc) in enumerate(zip(self.conns, self.processes, strict=True)):
            self._selector.register(conn, selectors.EVENT_READ, (w, False))
            self._selector.register(proc.sentinel, selectors.EVENT_READ, (w, True))

    def __len__(self) -> int:
        return len(self.processes)

    def pids(self) -> tuple[int, ...]:
        return tuple(int(p.pid) for p in self.processes)

    def describe(self, w: int) -> str:
        return f"ring worker {w} (pid {self.processes[w].pid})"

    def send(self, w: int, message: ToWorker) -> None:
        try:
            write_all(self.conns[w].fileno(), encode(message))
        except (OSError, ValueError) as err:  # ValueError: the connection was closed here
            raise self.death_error(w) from err

    def receive(self, timeout: float) -> tuple[list[tuple[int, Any]], list[int]]:
        """Messages that arrive within ``timeout`` s, as ``(worker, message)``, and dead workers.

        Every message that has arrived from each worker whose pipe is readable. Pending
        messages of a dead worker all come first, so an error it reported before exiting is
        seen before its death.
        """
        readable: set[int] = set()
        dead: list[int] = []
        for key, _ in self._selector.select(timeout):
            w, is_sentinel = key.data
            if is_sentinel:
                dead.append(w)
            else:
                readable.add(w)
        messages: list[tuple[int, Any]] = []
        for w in sorted({*readable, *dead}):
            conn = self.conns[w]
            try:
                while True:
                    # a dead worker's pipe is read only while it has bytes: its other end may
                    # live on in a process the worker forked, so it need not read as closed
                    if w not in readable and not conn.poll():
                        break
                    data = os.read(conn.fileno(), _READ_BYTES)
                    if not data:
                        raise EOFError  # the worker's end is closed
                    messages.extend((w, m) for m in self.inboxes[w].feed(data))
                    readable.discard(w)  # read once as reported; a dead one's rest by poll
                    if w not in dead:
                        break
            except (EOFError, OSError):
                if w not in dead:
                    dead.append(w)
        return messages, dead

    def mark_ready(self, w: int) -> None:
        self.ready[w] = True
        self.ready_at[w] = time.monotonic()

    def death_error(self, w: int) -> LoaderError:
        proc = self.processes[w]
        proc.join(timeout=1.0)  # the sentinel fired; this only collects the exit status
        when = (
            ""
            if self.ready[w]
            else (
                " while starting (its traceback, if any, is on stderr; under spawn and forkserver "
                "the dataset, its class and any transform must be picklable and importable)"
            )
        )
        return LoaderError(
            f"{self.describe(w)} exited unexpectedly with {describe_exit(proc.exitcode)}"
            f"{when}; the loader stopped its other workers (iterate again to start new ones)"
        )

    def shutdown(self, *, grace: float) -> None:
        """Ask every worker to stop, wait up to ``grace`` s, then terminate and kill; idempotent."""
        selector = getattr(self, "_selector", None)  # absent when a worker failed to start
        if selector is not None:
            selector.close()
        for conn in self.conns:
            with contextlib.suppress(OSError, ValueError):
                write_all(conn.fileno(), encode(Stop()))
        deadline = time.monotonic() + grace
        for proc in self.processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.processes:
            if proc.is_alive():
                proc.terminate()
        for proc in self.processes:
            proc.join(timeout=1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
            proc.close()
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
