"""How many worker processes a conversion uses, and whether a process pool is worth it.

The one answer for every conversion (images - check and write pass -, arrays, volumes): the
engine (:mod:`chunkio.convert.engine.core`) runs a job's tasks on :func:`worker_count` processes,
in this process when that is 1. ``workers`` as the user passes it is an upper bound; a
``client`` (``dask.distributed``) is always used.

The thresholds are measurements, not tuning knobs, except :data:`POOL_MIN_SECONDS`, which
tests and benchmarks set to ``0.0`` to force the pools on tiny data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "POOL_MIN_BYTES",
    "POOL_MIN_SECONDS",
    "VOLUME_WORKERS",
    "Work",
    "available_cores",
    "check_workers",
    "pool_pays",
    "worker_count",
]

#: Work estimated to take less than this in one process stays in this process. Starting a
#: pool of worker processes (each imports NumPy, Pillow, zarr and h5py) measured 0.4-0.8 s
#: on 2 cores, and two workers save at most half the work, so below about 2 s of work a
#: pool is a loss. Set it to ``0.0`` before converting to use the pools (check and write)
#: whenever ``workers > 1``.
POOL_MIN_SECONDS = 2.0

#: Work known only by its input bytes (volumes: a volume is read, converted and written by
#: one task, nothing is timed beforehand) stays in this process below this many bytes: a
#: process pool costs seconds to start (imports), worth it for real data only.
POOL_MIN_BYTES = 256 << 20

#: Processes a conversion of volumes uses by default at most: each holds about two volumes
#: (image and label) in memory.
VOLUME_WORKERS = 4


@dataclass(frozen=True)
class Work:
    """What is known of the work ahead when deciding whether a pool pays.

    ``seconds``: estimated time in this process; ``nbytes``: the bytes to read when nothing
    was timed; ``reads``: ``False`` when there is nothing to read (NumPy arrays already in
    memory: a pool was measured slower - 1 GiB on 2 cores, when zarr-python still wrote the
    chunks: 3.2x the time with the arrays pickled to each worker, 1.2x with them in shared
    memory). Nothing known: a pool pays (the caller asked for it).
    """

    seconds: float | None = None
    nbytes: int | None = None
    reads: bool = True


def pool_pays(work: Work) -> bool:
    """Whether a pool of worker processes is worth starting for ``work``.

    >>> pool_pays(Work(seconds=0.1)), pool_pays(Work(seconds=60.0)), pool_pays(Work())
    (False, True, True)
    >>> pool_pays(Work(nbytes=1 << 20)), pool_pays(Work(nbytes=1 << 30))
    (False, True)
    """
    if POOL_MIN_SECONDS <= 0:
        return True  # forced (tests, benchmarks)
    if not work.reads:
        return False
    if work.seconds is not None:
        return work.seconds >= POOL_MIN_SECONDS
    if work.nbytes is not None:
        return work.nbytes >= POOL_MIN_BYTES
    return True


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity


def check_workers(workers: Any, *, optional: bool = False) -> None:
    """``workers`` is an int >= 1 (or ``None`` where ``optional``); else a ValueError."""
    if optional and workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        what = "None or an int >= 1" if optional else "an int >= 1"
        raise ValueError(f"workers must be {what}; got {workers!r}")


def worker_count(
    requested: int | None,
    *,
    client: Any,
    work: Callable[[], Work],
    cap: int | None = None,
) -> int:
    """Worker processes for a job: ``requested``, or by default every core (at most ``cap``);
    1 (this process) when no ``client`` runs the job and :func:`pool_pays` says the pool
    would not pay for ``work()`` (called only when it matters).

    >>> worker_count(4, client=None, work=lambda: Work(seconds=0.5))
    1
    >>> worker_count(4, client=None, work=lambda: Work(seconds=10.0))
    4
    """
    check_workers(requested, optional=True)
    cores = available_cores()
    n = requested if requested is not None else (cores if cap is None else min(cap, cores))
    forced = POOL_MIN_SECONDS <= 0  # no need to estimate the work (image files timed...)
    if client is None and n > 1 and not forced and not pool_pays(work()):
        return 1
    return max(1, n)
