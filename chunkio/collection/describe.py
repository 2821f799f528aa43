"""Describing the files of a dataset of many files: here, or spread over forked processes.

A dataset of many files describes each file once, in the process that makes it
(:mod:`.files`): the file opened, its fields checked, its chunk index read. Through h5py that
is 10-40 ms per file, two minutes at 3,000 files before the first batch. HDF5 serialises
every call behind one lock, so threads gain nothing: the files are spread over processes
instead, one per idle core, each describing runs of consecutive files and sending back what it
found (the values a description here makes, pickled as the dataset pickles them to its
workers), put back in the order of the list.

The first files are described here, timed: a dataset whose first file is refused fails as
fast as before, and a pool starts only when the rest would take longer than
:data:`POOL_PAYS_S` here. The processes are forked (they start in milliseconds, with chunkio
imported, and never run the caller's script as spawn and forkserver do without a main
guard); what crosses the fork is safe for them: HDF5 readers are closed before any fork
(:mod:`chunkio.backends.hdf5.registry`), zarr starts its event loop again in a forked child,
and they read no file this process holds. Each exits when this process dies. Without fork
(Windows; macOS, where it is unsafe), or with under two idle cores, the files are described here.

A file's error reaches the caller as it would here (typed, naming the file); of several, the
first file's in the list's order. Warnings a description emits in a process are emitted
again here. Where no process can be forked, or one dies (killed, out of memory), the files
it had are described here.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait
from typing import TypeVar

from ..errors import caller_stacklevel

__all__ = ["POOL_PAYS_S", "can_fork", "describe_all", "describe_processes", "idle_cores"]

T = TypeVar("T")

#: seconds the files left to describe would take here above which a pool describes them
POOL_PAYS_S = 1.0
#: files described here, timed, before a pool is considered
_FIRST_FILES = 4
#: runs of files per process (a run is one task: one round trip, results pickled together)
_RUNS_PER_PROCESS = 4
#: processes at most, whatever the cores (each holds a Python with chunkio imported)
_MAX_PROCESSES = 32


def describe_processes() -> int:
    """Processes a pool may use here: the idle share of the cores this process may run on
    (:func:`idle_cores`; 0: no pool, fork not offered)."""
    if not can_fork():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        load = os.getloadavg()[0]
    except OSError:  # not obtainable: taken as idle
        load = 0.0
    return min(_MAX_PROCESSES, idle_cores(cores or 1, os.cpu_count() or 1, load))


def can_fork() -> bool:
    """Whether a pool may fork here (Linux: macOS offers fork, unsafely; not in a daemonic
    process, such as a DataLoader worker, which may have no children)."""
    return (
        sys.platform == "linux"
        and "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def idle_cores(mine: int, machine: int, load: float) -> int:
    """Of the ``mine`` cores this process may use, those the machine's ``load`` (its
    runnable processes, over its ``machine`` cores) leaves idle. Processes on a saturated
    machine only split this process's share of it: on 2 cores at load 15, a pool of two
    described 3,000 files in 95 s against 56 s in one process.

    >>> idle_cores(16, 16, 0.3), idle_cores(16, 64, 40.0), idle_cores(2, 2, 15.0)
    (16, 6, 0)
    """
    idle = max(0.0, 1.0 - load / machine)
    return round(mine * idle)


def describe_all(
    locations: Sequence[str],
    describe: Callable[[str], T],
    *,
    processes: int | None = None,
) -> list[T]:
    """``describe(location)`` of every location, in order; the first ones here, the rest in
    ``processes`` forked processes (default :func:`describe_processes`) when that pays
    (see the module docstring). ``describe`` must pickle (a module-level function, or a
    ``functools.partial`` of one), as must what it returns."""
    cores = describe_processes() if processes is None else int(processes)
    found: list[T] = [describe(location) for location in locations[:1]]
    started = time.perf_counter()  # from the second file: the first imports the backend
    for location in locations[1:_FIRST_FILES]:
        found.append(describe(location))
    rest = list(locations[len(found) :])
    if not rest:
        return found
    per_file = (time.perf_counter() - started) / (len(found) - 1)
    workers = min(cores, -(-len(rest) // _FIRST_FILES))
    if workers < 2 or per_file * len(rest) < POOL_PAYS_S or not _pickles(describe):
        return found + [describe(location) for location in rest]
    return found + _in_processes(rest, describe, workers)


def _pickles(describe: Callable[[str], T]) -> bool:
    """Whether ``describe`` crosses to a pool's process: pickled in the pool's feeder
    thread, a failure there can leave the pool's shutdown waiting forever, so a description
    holding something that does not pickle (a lock, a session in ``storage_options``) is made
    here instead."""
    try:
        pickle.dumps(describe)
    except Exception:
        return False
    return True


def _in_processes(locations: list[str], describe: Callable[[str], T], workers: int) -> list[T]:
    size = -(-len(locations) // (workers * _RUNS_PER_PROCESS))
    runs = [locations[i : i + size] for i in range(0, len(locations), size)]
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_watch_parent
    )
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns when a process with threads forks (another thread may hold
            # a lock the child then waits on); the children run chunkio's description only,
            # whose locks are released across a fork (see the module docstring)
            warnings.filterwarnings(
                "ignore", r".*fork\(\) may lead to deadlocks", DeprecationWarning
            )
            try:
                futures: list[Future[tuple[list[T], list[Warning | str]]]] = [
                    pool.submit(_describe_run, describe, run) for run in runs
                ]
            except (OSError, BrokenProcessPool):  # no process could be forked: here
                return [describe(location) for location in locations]
        found: list[T] = []
        for k, future in enumerate(futures):  # in order: the first bad file's error is raised
            try:
                values, caught = future.result()
            except BrokenProcessPool:  # a process died (killed, out of memory): the rest here
                return found + [describe(location) for run in runs[k:] for location in run]
            for message in caught:  # at the caller's line, as here
                warnings.warn(message, stacklevel=caller_stacklevel())
            found += values
        return found
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _describe_run(
    describe: Callable[[str], T], run: list[str]
) -> tuple[list[T], list[Warning | str]]:
    """In a pool's process: ``describe`` each of ``run``, and the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = [describe(location) for location in run]
    # the warnings themselves (a WarningMessage holds the source line's objects)
    return values, [w.message for w in caught]


def _watch_parent() -> None:
    """Pool initializer: exit when the describing process is gone (a pool's process waits
    on a queue whose pipe it holds both ends of, and would outlive it)."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:  # pragma: no cover - not a pool's process
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(70)

    threading.Thread(target=watch, name="chunkio-describe-watchdog", daemon=True).start()
