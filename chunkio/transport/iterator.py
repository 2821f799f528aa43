"""Batches in sampler order from ring workers (or in-process), handed out as leases.

Scheduling: a batch's rows are cut into parts, each read by one worker (:mod:`.parts`: with one
part per worker all workers read every batch together, each its own lanes' chunks; with one
part, workers read whole batches in turn). A batch takes one slot of the shared ring as soon as
one is free, and is handed out, in order, when every part has landed; the slot returns when the
consumer releases the lease. The order the consumer sees is the sampler's, whatever the number
of workers.

Kept batches: a released slot waits one more release before it is reused (``for batch in
loader`` still holds the previous batch while it asks for the next), and if any view of its
last batch is still alive then, that memory is left to its holder (:mod:`.detach`) before
the workers write the slot again. A batch nobody kept costs no copy; a field the consumer
keeps steadily is handed out as copies for a while (:class:`.detach.KeptViews`).
"""

from __future__ import annotations

import contextlib
import pickle
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from ..errors import ChunkioError, LoaderError
from ..util.numeric import IntArray
from .detach import KeptViews, can_detach
from .lease import Lease
from .messages import Done, Failed, Hint, ReadRows, Ready
from .parts import Parts, assign, check_parts, even_parts
from .ring import RingLayout, SlotRing
from .source import BatchSource
from .workers import RingWorkers

__all__ = ["STARTUP_TIMEOUT_S", "Parts", "RingOptions", "RingTransport", "even_parts"]

#: a worker that has not attached to the ring after this long is reported, never waited on
STARTUP_TIMEOUT_S = 120.0
#: longest single wait, so Ctrl-C is honoured promptly even if the signal hits another thread
_WAKE_S = 0.5
#: seconds workers get to finish their current batch when asked to stop
_GRACE_CLEAN_S, _GRACE_FAILED_S = 5.0, 0.5

Arrange = Callable[[dict[str, torch.Tensor]], Any]
#: a batch's sample ids: a list of ints or an int64 array
Indices = Sequence[int] | IntArray


@dataclass(frozen=True)
class RingOptions:
    """How a :class:`RingTransport` runs its workers."""

    num_workers: int
    prefetch: int = 2
    held: int = 1  # batches the consumer may hold at once (slots = workers * prefetch + held + 1)
    persistent: bool = True
    context: Any = None
    timeout: float = 0.0
    #: batches beyond the dispatched ones whose samples workers are told of ahead (a remote
    #: dataset fetches their chunks meanwhile; they take no slot)
    lookahead: int = 0

    def __post_init__(self) -> None:
        if self.lookahead < 0:
            raise ValueError(f"lookahead must be >= 0 batches; got {self.lookahead}")
        if self.num_workers < 1 or self.prefetch < 1 or self.held < 1:
            raise ValueError(
                "a ring needs num_workers, prefetch and held >= 1; got "
                f"{self.num_workers}, {self.prefetch}, {self.held}"
            )
        if self.timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds; got {self.timeout}")


def _teardown(workers: RingWorkers, ring: SlotRing, grace: float) -> None:
    try:
        workers.shutdown(grace=grace)
    finally:
        ring.close()


class _Superseded(LoaderError):
    """The pass was replaced by a newer one; the session itself is fine."""


@dataclass
class _Batch:
    """A dispatched batch: its slot, size, and the workers still reading parts of it."""

    slot: int
    n: int
    pending: set[int]
    error: Exception | None = None


class _Session:
    """One set of workers and their ring: for one pass or, if persistent, for many."""

    #: leave batches still viewed when their slot comes round to their holders (off: the
    #: route before kept batches were detected, for the A/B benchmark bench_ring_keep only)
    keep_kept = True

    def __init__(
        self,
        dataset: BatchSource,
        batch_size: int,
        opts: RingOptions,
        on_ring: Callable[[SlotRing], Any],
    ) -> None:
        # one slot more than are in flight and held: the slot released last waits (see above)
        num_slots = opts.num_workers * opts.prefetch + opts.held + int(self.keep_kept)
        fields = dataset.batch_fields()
        layout = RingLayout.of(
            fields,
            batch_size=batch_size,
            num_slots=num_slots,
            channels_last=frozenset(dataset.channels_last_fields()),
        )
        self.ring = SlotRing.create(layout)
        try:
            self.workers = RingWorkers(
                dataset, self.ring.spec, num_workers=opts.num_workers, context=opts.context
            )
        except BaseException:
            self.ring.close()
            raise
        try:
            on_ring(self.ring)  # after the workers started: no CUDA registration crosses a fork
        except BaseException:
            _teardown(self.workers, self.ring, _GRACE_FAILED_S)
            raise
        self._close = weakref.finalize(self, _teardown, self.workers, self.ring, _GRACE_CLEAN_S)
        self.opts = opts
        self.closed = False
        self.free: deque[int] = deque(range(layout.num_slots))
        self.keep = self.keep_kept
        self.kept = KeptViews(layout.num_slots)
        self.waiting: int | None = None  # the slot released last, not reused before the next
        self.detached = 0  # field regions left to a consumer that kept their batch
        self.tensors = (
            []
            if self.keep
            else [
                {k: torch.from_numpy(v) for k, v in self.ring.fields(s).items()}
                for s in range(layout.num_slots)
            ]
        )
        self.parts: dict[int, list[tuple[int, int]]] = {}  # batch size -> checked parts
        self.inflight: dict[int, _Batch] = {}  # seq -> batch, until every part has landed
        self.stale: set[int] = set()  # in flight for a pass the consumer abandoned
        self.next_seq = 0
        self.pass_id = 0

    def close(self, *, failed: bool) -> None:
        if not self.closed:
            self.closed = True
            self._close.detach()
            self.tensors = []  # the mapping goes as soon as no batch still views it
            _teardown(self.workers, self.ring, _GRACE_FAILED_S if failed else _GRACE_CLEAN_S)

    # -- one pass ---------------------------------------------------------------------------

    def stream(
        self, batches: Iterable[Indices], arrange: Arrange, parts: Parts, epoch: int = 0
    ) -> Iterator[Lease]:
        """Leases for ``batches`` of ``epoch``, in order; one pass at a time (a new pass
        supersedes).

        Each of a batch's ``parts(n, num_workers)`` is read by one worker (:func:`.parts.assign`:
        all workers at once with lane-aligned parts, or whole batches in turn with one part).
        """
        me = self._start_pass()
        order: deque[int] = deque()  # dispatched seqs, in sampler order
        source = iter(batches)
        ahead: deque[Indices] = deque()  # taken from the sampler, not dispatched yet
        hinted = 0  # the first ``hinted`` of ``ahead`` were announced to the workers
        try:
            while True:
                while True:  # dispatch as far ahead as free slots allow
                    if not ahead:
                        batch = next(source, None)
                        if batch is None:
                            break
                        ahead.append(batch)
                    if not self.free:
                        break
                    order.append(self._dispatch(ahead.popleft(), parts, epoch))
                    hinted = max(0, hinted - 1)
                if self.opts.lookahead:  # the sampler knows what comes: say so ahead
                    while len(ahead) < self.opts.lookahead:
                        batch = next(source, None)
                        if batch is None:
                            break
                        ahead.append(batch)
                    for j, batch in enumerate(list(ahead)[hinted:], hinted):
                        self._hint(batch, parts, self.next_seq + j)  # the seq it will get
                    hinted = len(ahead)
                if not order:
                    if not ahead:
                        return
                    raise LoaderError(
                        f"the ring has no free slot: the consumer holds more than "
                        f"{self.opts.held} batches; release them (or pass "
                        "workers=chunkio.Workers(copy=True))"
                    )
                seq = order.popleft()
                slot, n = self._wait(seq)
                yield Lease(self._batch(slot, n, arrange), partial(self._release, slot))
                if self.pass_id != me:
                    raise _Superseded(
                        "this iterator was superseded by a newer iter() of the same loader: "
                        "persistent workers serve one pass at a time"
                    )
        finally:
            self._abandon(order)

    def _batch(self, slot: int, n: int, arrange: Arrange) -> Any:
        # Fresh views and a fresh container per batch (O(fields), whatever the batch size):
        # a consumer that edits its batch (``batch["x"] = x.cuda()``) never edits a later one.
        if self.keep:
            # one fresh array per field, watched: every tensor and ``.numpy()`` view of the
            # batch keeps it alive (``torch.from_numpy`` holds it), so it says "still kept"
            arrays = {k: v[:n] for k, v in self.ring.fields(slot).items()}
            arrays = self.kept.hand_out(slot, arrays)
            return arrange({k: torch.from_numpy(a) for k, a in arrays.items()})
        # (``detach`` makes a full batch's fresh view in a third of the time of a slice)
        if n == self.ring.layout.batch_size:
            return arrange({k: v.detach() for k, v in self.tensors[slot].items()})
        return arrange({k: v[:n] for k, v in self.tensors[slot].items()})

    def _start_pass(self) -> int:
        self.pass_id += 1
        self._abandon(list(self.inflight))  # a pass still open on this session is superseded
        while self.stale:  # batches of an abandoned pass still in flight: let them land
            self._wait(min(self.stale))
        return self.pass_id

    def _abandon(self, seqs: Iterable[int]) -> None:
        """Dispatched batches nobody will take: free their slots as soon as they land."""
        for seq in seqs:
            batch = self.inflight.get(seq)
            if batch is None:
                continue  # already handled (a newer pass superseded this one)
            if batch.pending:
                self.stale.add(seq)
            else:
                self._discard(seq)

    def _ranges(self, n: int, parts: Parts) -> list[tuple[int, int]]:
        if not 0 < n <= self.ring.layout.batch_size:
            raise LoaderError(
                f"the sampler produced a batch of {n} samples; the ring holds 1 to "
                f"{self.ring.layout.batch_size}"
            )
        ranges = self.parts.get(n)
        if ranges is None:  # the sampler's parts depend on n only: check them once
            ranges = self.parts[n] = check_parts(parts(n, len(self.workers)), n, len(self.workers))
        return ranges

    def _hint(self, indices: Indices, parts: Parts, seq: int) -> None:
        """Tell each worker the samples it will read of batch ``seq``, not dispatched yet."""
        ids = np.asarray(indices, dtype=np.int64)
        for w, (a, b) in assign(self._ranges(len(ids), parts), seq, len(self.workers)).items():
            self._send(w, Hint(ids[a:b]))

    def _dispatch(self, indices: Indices, parts: Parts, epoch: int) -> int:
        n = len(indices)
        ranges = self._ranges(n, parts)
        slot = self._take()
        self.ring.indices(slot)[:n] = indices
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        readers = assign(ranges, seq, len(self.workers))
        self.inflight[seq] = _Batch(slot, n, set(readers))
        for w, (a, b) in sorted(readers.items()):
            self._send(w, ReadRows(seq, slot, a, b, epoch))
        return seq

    def _send(self, w: int, message: Hint | ReadRows) -> None:
        """Send ``message`` to worker ``w``; if it has died, the error it reported before
        exiting (a failed start, say) is raised rather than a bare death."""
        try:
            self.workers.send(w, message)
        except LoaderError:
            for v, said in self.workers.receive(0)[0]:
                self._handle(v, said)  # raises a worker's own start failure
            raise

    def _take(self) -> int:
        """A free slot, its last batch's memory left to whoever still views it."""
        slot = self.free.popleft()
        kept = self.kept.take(slot)
        if kept:
            if can_detach():
                self.ring.detach(slot, kept)
                self.detached += len(kept)
            else:
                warnings.warn(
                    f"a batch you kept (fields {kept}) views ring memory that is now reused: "
                    "it changes. Moving it out of the ring needs Linux; keep batches with "
                    "workers=chunkio.Workers(copy=True) or .clone()",
                    UserWarning,
                    stacklevel=2,
                )
        return slot

    def _release(self, slot: int) -> None:
        if self.closed:
            return
        if not self.keep:
            self.free.append(slot)
            return
        # ``for batch in loader`` still holds batch k while it asks for k + 1, which releases
        # k's slot: that slot waits until k + 2 is asked for, so only kept batches are moved
        if self.waiting is not None:
            self.free.append(self.waiting)
        self.waiting = slot

    def _discard(self, seq: int) -> None:
        self.stale.discard(seq)
        self.free.append(self.inflight.pop(seq).slot)

    # -- waiting ----------------------------------------------------------------------------

    def _wait(self, seq: int) -> tuple[int, int]:
        """Block until every part of ``seq`` is read: its ``(slot, n)``."""
        batch = self.inflight[seq]
        since = time.monotonic()
        while seq in self.inflight and batch.pending:
            deadline = self._deadline(batch, since)
            left = _WAKE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise self._timeout_error(seq)
            messages, dead = self.workers.receive(min(left, _WAKE_S))
            for worker, message in messages:
                self._handle(worker, message)
            if dead:
                raise self.workers.death_error(dead[0])
        if seq in self.inflight:  # not stale: hand it out (or raise its error)
            del self.inflight[seq]
            if batch.error is not None:
                self.free.append(batch.slot)
                raise batch.error
        return batch.slot, batch.n

    def _deadline(self, batch: _Batch, since: float) -> float | None:
        if not all(self.workers.ready[w] for w in batch.pending):
            return self.workers.started + max(STARTUP_TIMEOUT_S, self.opts.timeout)
        if self.opts.timeout <= 0:
            return None
        return max(since, *(self.workers.ready_at[w] for w in batch.pending)) + self.opts.timeout

    def _handle(self, w: int, message: Ready | Done | Failed) -> None:
        if isinstance(message, Ready):
            self.workers.mark_ready(w)
            return
        if isinstance(message, Failed) and message.seq is None:  # it failed to start
            raise self._worker_error(w, None, message.text, message.pickled)
        seq = message.seq
        if seq is None:  # only a worker that failed to start (above) names no batch
            return
        batch = self.inflight.get(seq)
        if batch is None:
            return
        batch.pending.discard(w)
        if isinstance(message, Failed) and batch.error is None:  # raised when its batch is due
            batch.error = self._worker_error(w, seq, message.text, message.pickled)
        if not batch.pending and seq in self.stale:
            self._discard(seq)

    def _samples(self, seq: int) -> str:
        batch = self.inflight[seq]
        head = self.ring.indices(batch.slot)[: min(batch.n, 8)].tolist()
        return f"samples {head}{' ...' if batch.n > 8 else ''}"

    def _worker_error(self, w: int, seq: int | None, text: str, blob: bytes | None) -> Exception:
        where = "while starting" if seq is None else f"reading a batch ({self._samples(seq)})"
        message = f"{self.workers.describe(w)} raised {where}; the worker's traceback:\n{text}"
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
        w = min(self.inflight[seq].pending)
        if not self.workers.ready[w]:
            return LoaderError(
                f"{self.workers.describe(w)} did not start within {STARTUP_TIMEOUT_S:.0f} s"
            )
        return LoaderError(
            f"{self.workers.describe(w)} produced no batch within timeout={self.opts.timeout} s "
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
        dataset: BatchSource,
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

    def run(
        self, batches: Iterable[Indices], parts: Parts = even_parts, *, epoch: int = 0
    ) -> Iterator[Lease]:
        """Leases in the order of ``batches``; ``parts(n, num_workers)`` splits each batch's
        rows among the workers (default: evenly; see :mod:`.parts`); ``epoch`` keys random
        augmentations."""
        session = self._session
        if session is None or session.closed:
            session = _Session(self.dataset, self.batch_size, self.options, self._on_ring)
            self._session = session
        try:
            yield from session.stream(batches, self.dataset.arrange, parts, epoch)
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
        return () if session is None or session.closed else session.workers.pids()

    def close(self) -> None:
        """Stop the workers and free the ring (batches you still hold stay readable)."""
        if self._session is not None:
            self._session.close(failed=False)
            self._session = None
