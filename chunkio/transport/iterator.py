"""Batches in sampler order from ring workers (or in-process), handed out as leases.

Scheduling: batch ``t`` of a pass goes to worker ``t % num_workers`` (as a DataLoader does, so
a sampler built with ``num_streams=num_workers`` gives each worker a contiguous stream of
batches and its chunk cache absorbs chunks split across them). Worker ``w`` owns slots
``[w * k, (w + 1) * k)``; a batch is dispatched as soon as its worker has a free slot, and a
slot returns to its worker when the consumer releases the lease.
"""

from __future__ import annotations

import contextlib
import pickle
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..errors import ChunkioError, LoaderError
from .lease import Lease
from .ring import RingLayout, SlotRing
from .workers import WorkerPool

__all__ = ["STARTUP_TIMEOUT_S", "LocalTransport", "RingOptions", "RingTransport"]

#: a worker that has not attached to the ring after this long is reported, never waited on
STARTUP_TIMEOUT_S = 120.0
#: longest single wait, so Ctrl-C is honoured promptly even if the signal hits another thread
_WAKE_S = 0.5
#: seconds workers get to finish their current batch when asked to stop
_GRACE_CLEAN_S, _GRACE_FAILED_S = 5.0, 0.5

Arrange = Callable[[dict[str, torch.Tensor]], Any]


@dataclass(frozen=True)
class RingOptions:
    """How a :class:`RingTransport` runs its workers."""

    num_workers: int
    prefetch: int = 2
    held: int = 1  # batches the consumer may hold at once (slots per worker = prefetch + held)
    persistent: bool = True
    context: Any = None
    timeout: float = 0.0

    def __post_init__(self) -> None:
        if self.num_workers < 1 or self.prefetch < 1 or self.held < 1:
            raise ValueError(
                "a ring needs num_workers, prefetch and held >= 1; got "
                f"{self.num_workers}, {self.prefetch}, {self.held}"
            )
        if self.timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds; got {self.timeout}")


def _fields_of(dataset: Any) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
    out = {}
    for name in dataset.fields:
        info = dataset.layout.field(name)
        out[name] = (info.dtype, tuple(info.sample_shape or ()))
    return out


def _teardown(pool: WorkerPool, ring: SlotRing, grace: float) -> None:
    try:
        pool.shutdown(grace=grace)
    finally:
        ring.close()


class _Superseded(LoaderError):
    """The pass was replaced by a newer one; the session itself is fine."""


class _Session:
    """One set of workers and their ring: for one pass or, if persistent, for many."""

    def __init__(
        self, dataset: Any, batch_size: int, opts: RingOptions, on_ring: Callable[[SlotRing], Any]
    ) -> None:
        per_worker = opts.prefetch + opts.held
        layout = RingLayout.of(
            _fields_of(dataset), batch_size=batch_size, num_slots=opts.num_workers * per_worker
        )
        self.ring = SlotRing.create(layout)
        try:
            self.pool = WorkerPool(
                dataset, self.ring.spec, num_workers=opts.num_workers, context=opts.context
            )
        except BaseException:
            self.ring.close()
            raise
        try:
            on_ring(self.ring)  # after the workers started: no CUDA registration crosses a fork
        except BaseException:
            _teardown(self.pool, self.ring, _GRACE_FAILED_S)
            raise
        self._close = weakref.finalize(self, _teardown, self.pool, self.ring, _GRACE_CLEAN_S)
        self.opts = opts
        self.closed = False
        self.free = [
            deque(range(w * per_worker, (w + 1) * per_worker)) for w in range(len(self.pool))
        ]
        self.tensors = [
            {k: torch.from_numpy(v) for k, v in self.ring.fields(s).items()}
            for s in range(layout.num_slots)
        ]
        self.inflight: dict[int, tuple[int, int, int]] = {}  # seq -> (worker, slot, n)
        self.results: dict[int, int] = {}  # seq -> slot, read and not yet handed out
        self.failures: dict[int, Exception] = {}  # seq -> its error, raised in batch order
        self.stale: set[int] = set()  # in flight for a pass the consumer abandoned
        self.next_seq = 0
        self.pass_id = 0

    def close(self, *, failed: bool) -> None:
        if not self.closed:
            self.closed = True
            self._close.detach()
            self.tensors = []  # the mapping goes as soon as no batch still views it
            _teardown(self.pool, self.ring, _GRACE_FAILED_S if failed else _GRACE_CLEAN_S)

    # -- one pass ---------------------------------------------------------------------------

    def stream(self, batches: Iterable[Sequence[int]], arrange: Arrange) -> Iterator[Lease]:
        """Leases for ``batches``, in order; one pass at a time (a new pass supersedes)."""
        me = self._start_pass()
        order: deque[int] = deque()  # dispatched seqs, in sampler order
        source = iter(batches)
        pending: Sequence[int] | None = None
        t = 0
        try:
            while True:
                while True:  # dispatch as far ahead as free slots allow
                    if pending is None:
                        pending = next(source, None)
                        if pending is None:
                            break
                    if not self.free[t % len(self.pool)]:
                        break
                    order.append(self._dispatch(t % len(self.pool), pending))
                    pending, t = None, t + 1
                if not order:
                    if pending is None:
                        return
                    raise LoaderError(
                        f"{self.pool.describe(t % len(self.pool))} has no free slot: the "
                        f"consumer holds more than {self.opts.held} of its batches; release "
                        "them (or pass copy=True)"
                    )
                seq = order.popleft()
                w, slot, n = self._wait(seq)
                view = {k: v[:n] for k, v in self.tensors[slot].items()}
                yield Lease(arrange(view), partial(self._release, w, slot))
                if self.pass_id != me:
                    raise _Superseded(
                        "this iterator was superseded by a newer iter() of the same loader: "
                        "persistent workers serve one pass at a time"
                    )
        finally:
            self._abandon(order)

    def _start_pass(self) -> int:
        self.pass_id += 1
        self._abandon(list(self.inflight))  # a pass still open on this session is superseded
        while self.stale:  # batches of an abandoned pass still in flight: let them land
            self._wait(min(self.stale))
        return self.pass_id

    def _abandon(self, seqs: Iterable[int]) -> None:
        """Dispatched batches nobody will take: free their slots as soon as they land."""
        for seq in seqs:
            if seq not in self.inflight:
                continue  # already handled (a newer pass superseded this one)
            if seq in self.results or seq in self.failures:
                self.failures.pop(seq, None)
                self._discard(seq, self.results.pop(seq, self.inflight[seq][1]))
            else:
                self.stale.add(seq)

    def _dispatch(self, w: int, indices: Sequence[int]) -> int:
        n = len(indices)
        if not 0 < n <= self.ring.layout.batch_size:
            raise LoaderError(
                f"the sampler produced a batch of {n} samples; the ring holds 1 to "
                f"{self.ring.layout.batch_size}"
            )
        slot = self.free[w].popleft()
        self.ring.indices(slot)[:n] = indices
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self.inflight[seq] = (w, slot, n)
        self.pool.send(w, (seq, slot, n))
        return seq

    def _release(self, w: int, slot: int) -> None:
        if not self.closed:
            self.free[w].append(slot)

    def _discard(self, seq: int, slot: int) -> None:
        self.stale.discard(seq)
        w, _, _ = self.inflight.pop(seq)
        self.free[w].append(slot)

    # -- waiting ----------------------------------------------------------------------------

    def _wait(self, seq: int) -> tuple[int, int, int]:
        """Block until ``seq`` is read: its ``(worker, slot, n)`` (stale: until discarded)."""
        task = self.inflight[seq]
        since = time.monotonic()
        while seq in self.inflight and seq not in self.results and seq not in self.failures:
            deadline = self._deadline(task[0], since)
            left = _WAKE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise self._timeout_error(seq)
            messages, dead = self.pool.receive(min(left, _WAKE_S))
            for worker, message in messages:
                self._handle(worker, message)
            if dead:
                raise self.pool.death_error(dead[0])
        if seq in self.failures:
            raise self.failures.pop(seq)
        if seq in self.results:
            del self.results[seq], self.inflight[seq]
        return task

    def _deadline(self, w: int, since: float) -> float | None:
        if not self.pool.ready[w]:
            return self.pool.started + max(STARTUP_TIMEOUT_S, self.opts.timeout)
        if self.opts.timeout <= 0:
            return None
        return max(since, self.pool.ready_at[w]) + self.opts.timeout

    def _handle(self, w: int, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            self.pool.mark_ready(w)
        elif kind == "done":
            _, seq, slot = message
            if seq in self.stale:
                self._discard(seq, slot)
            else:
                self.results[seq] = slot
        elif kind == "error":
            _, seq, slot, text, blob = message
            if seq is None:
                raise self._worker_error(w, seq, text, blob)
            if seq in self.stale:
                self._discard(seq, slot)
            else:  # raised when its batch is due, after the batches before it
                self.failures[seq] = self._worker_error(w, seq, text, blob)

    def _samples(self, seq: int) -> str:
        _, slot, n = self.inflight[seq]
        head = self.ring.indices(slot)[: min(n, 8)].tolist()
        return f"samples {head}{' ...' if n > 8 else ''}"

    def _worker_error(self, w: int, seq: int | None, text: str, blob: bytes | None) -> Exception:
        where = "while starting" if seq is None else f"reading a batch ({self._samples(seq)})"
        message = f"{self.pool.describe(w)} raised {where}; the worker's traceback:\n{text}"
        cause = None if blob is None else pickle.loads(blob)  # our own worker's bytes
        err: Exception = LoaderError(message)
        if isinstance(cause, ChunkioError):
            # Data errors keep their type (as on the DataLoader route), so
            # ``except CorruptChunkError`` works whichever transport read the batch.
            with contextlib.suppress(Exception):
                err = type(cause)(message)
        err.__cause__ = cause
        return err

    def _timeout_error(self, seq: int) -> LoaderError:
        w = self.inflight[seq][0]
        if not self.pool.ready[w]:
            return LoaderError(
                f"{self.pool.describe(w)} did not start within {STARTUP_TIMEOUT_S:.0f} s"
            )
        return LoaderError(
            f"{self.pool.describe(w)} produced no batch within timeout={self.opts.timeout} s "
            f"({self._samples(seq)}); the loader stopped its workers"
        )


class RingTransport:
    """Serves batches of a :class:`~chunkio.ChunkDataset` through ring workers.

    ``run(batches)`` yields :class:`Lease` objects in the order of ``batches``; each lease's
    tensors view a shared-memory slot that is reused once the lease is released. Workers and
    their ring last one pass, or until :meth:`close` when ``persistent``; any failure (worker
    error, death, timeout, ``KeyboardInterrupt``) stops them, and the next pass starts new
    ones.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int,
        options: RingOptions,
        on_ring: Callable[[SlotRing], Any] = lambda ring: None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.options = options
        self._on_ring = on_ring
        self._session: _Session | None = None

    def run(self, batches: Iterable[Sequence[int]]) -> Iterator[Lease]:
        session = self._session
        if session is None or session.closed:
            session = _Session(self.dataset, self.batch_size, self.options, self._on_ring)
            self._session = session
        try:
            yield from session.stream(batches, self.dataset._arrange)
        except _Superseded:
            raise  # the newer pass owns the session now
        except GeneratorExit:
            self._finish(session, failed=False)
            raise
        except BaseException:
            self._finish(session, failed=True)
            raise
        self._finish(session, failed=False)

    def _finish(self, session: _Session, *, failed: bool) -> None:
        if failed or not self.options.persistent:
            session.close(failed=failed)
            if self._session is session:
                self._session = None

    def worker_pids(self) -> tuple[int, ...]:
        session = self._session
        return () if session is None or session.closed else session.pool.pids()

    def close(self) -> None:
        """Stop the workers and free the ring (batches you still hold stay readable)."""
        if self._session is not None:
            self._session.close(failed=False)
            self._session = None


Allocate = Callable[[tuple[int, ...], np.dtype[Any]], npt.NDArray[Any]]


class LocalTransport:
    """``num_workers=0``: read each batch in this process into a reused buffer."""

    def __init__(self, dataset: Any, *, batch_size: int, allocate: Allocate = np.empty) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self._allocate = allocate
        self._free: list[dict[str, npt.NDArray[Any]]] = []

    def _buffer(self) -> dict[str, npt.NDArray[Any]]:
        if self._free:
            return self._free.pop()
        return {
            name: self._allocate((self.batch_size, *shape), dtype)
            for name, (dtype, shape) in _fields_of(self.dataset).items()
        }

    def run(self, batches: Iterable[Sequence[int]]) -> Iterator[Lease]:
        for indices in batches:
            buf = self._buffer()
            n = len(indices)
            out = {k: v[:n] for k, v in buf.items()}
            try:
                self.dataset.read_batch(indices, out=out)
            except BaseException:
                self._free.append(buf)
                raise
            tensors = {k: torch.from_numpy(v) for k, v in out.items()}
            yield Lease(self.dataset._arrange(tensors), partial(self._free.append, buf))

    def worker_pids(self) -> tuple[int, ...]:
        return ()

    def close(self) -> None:
        self._free.clear()
