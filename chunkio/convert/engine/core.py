"""The one conversion engine: run a job's tasks in-process, on a process pool or on dask.

Every conversion - image folders, arrays, volumes - is a picklable :class:`Job` (what a worker
needs: the source, where to write) and a list of tasks (blocks of samples, volumes), each
owning whole chunks so parallel writers never share one. :func:`run_tasks` keeps a bounded
number of tasks in flight (memory stays bounded) and hands each result to ``finish`` in the
calling process, in whatever order tasks complete; ``finish`` writes what the worker did not
write itself and records the task in the manifest.

:func:`drive` is the one conversion driver on top: it shows the progress bar and, for each
finished task, has the :class:`TaskSink` write what the worker returned (in this process) and
record the task once it is durable. Images, arrays, volumes, appends and stitching all go
through it; how many workers, and whether a pool is worth starting, is answered once, in
:mod:`chunkio.convert.engine.workers`.

On the first failure nothing new starts, queued tasks are cancelled (on dask, submitted tasks
are waited for instead: they cannot be told apart from running ones), running ones that the
worker already wrote are still finished (less to redo on resume), and the failure is raised
as a :class:`~chunkio.errors.ConversionError` (or :class:`~chunkio.errors.SourceError`)
naming the destination and the task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sized
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tqdm.auto import tqdm

from ...errors import ConversionError, OptionalDependencyError, SourceError
from ..options import Execution, Progress
from ..progress import advance
from .processes import MAIN_GUARD_HINT, WorkerProcesses, worker_processes
from .workers import Work, pool_pays

__all__ = ["Job", "Task", "TaskSink", "drive", "progress_bar", "require_distributed", "run_tasks"]


class Task(Protocol):
    """One unit of work: picklable, owning whole chunks."""

    def describe(self) -> str: ...


T = TypeVar("T", bound=Task)
R = TypeVar("R")
T_contra = TypeVar("T_contra", bound=Task, contravariant=True)
R_co = TypeVar("R_co", covariant=True)
R_contra = TypeVar("R_contra", contravariant=True)


class Job(Protocol[T_contra, R_co]):
    """What workers run: picklable (sent once per worker), opens its own handles."""

    def run(self, task: T_contra) -> R_co: ...

    def written(self, result: Any) -> bool:
        """Whether the worker wrote ``result``'s chunks itself (nothing left to write)."""
        ...


class _Runner(Protocol[T_contra]):
    max_in_flight: int

    def submit(self, task: T_contra) -> Any: ...

    def wait(self, futures: Iterable[Any]) -> set[Any]: ...

    def cancel(self, future: Any) -> bool: ...


class _InProcess(Generic[T, R]):
    max_in_flight = 1

    def __init__(self, job: Job[T, R]) -> None:
        self.job = job

    def submit(self, task: T) -> Future[R]:
        fut: Future[R] = Future()
        try:
            fut.set_result(self.job.run(task))
        except Exception as err:
            fut.set_exception(err)
        return fut

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(futures)

    def cancel(self, future: Any) -> bool:
        return True


_worker_job: list[Any] = []


def _init_worker(job: Any) -> None:
    """Process-pool initializer: the job travels once per worker, not once per task."""
    _worker_job[:] = [job]


def _pool_task(task: Any) -> Any:
    return _worker_job[0].run(task)


def _dask_task(job: Any, task: Any) -> Any:
    return job.run(task)


class _Pool(Generic[T]):
    def __init__(self, pool: WorkerProcesses, workers: int) -> None:
        self.pool, self.max_in_flight = pool, 2 * workers

    def submit(self, task: T) -> Future[Any]:
        return self.pool.submit(_pool_task, task)

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(futures_wait(list(futures), return_when=FIRST_COMPLETED).done)

    def cancel(self, future: Any) -> bool:
        return bool(future.cancel())


class _Dask(Generic[T]):
    def __init__(self, client: Any, job: Any) -> None:
        import distributed

        self.client = client
        self._distributed: Any = distributed  # untyped package
        # Sent once to every worker, not once per task (a job with ragged plans is large).
        self.job = client.scatter(job, broadcast=True, hash=False)
        self.max_in_flight = 2 * max(1, sum(client.nthreads().values()))

    def submit(self, task: T) -> Any:
        return self.client.submit(_dask_task, self.job, task, pure=False)

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(self._distributed.wait(list(futures), return_when="FIRST_COMPLETED").done)

    def cancel(self, future: Any) -> bool:
        # dask cannot stop a task that has started, nor say whether it has: one left running
        # would go on writing into a staging a rerun may already have reset. So every
        # submitted task (at most two per thread) is waited for.
        return False


def require_distributed() -> None:
    """Fail early, with the install hint, when ``client=`` is passed without distributed."""
    try:
        import distributed  # noqa: F401
    except ImportError as err:
        raise OptionalDependencyError(
            "client= needs the 'distributed' package: pip install 'chunkio[distributed]'"
        ) from err


class TaskSink(Protocol[T_contra, R_contra]):
    """Where :func:`drive` puts finished tasks, in the calling process.

    (Not :class:`chunkio.Output`, how a dataset is stored: a sink is what a converter hands
    the engine to write and record each finished task.)
    """

    def write(self, task: T_contra, result: R_contra) -> None:
        """Write (and make durable) what a worker returned instead of writing it."""
        ...

    def done(self, task: T_contra, result: R_contra) -> int:
        """The task's chunks are durable: record it; returns the units of progress it made."""
        ...


def progress_bar(progress: Progress) -> tqdm[Any]:
    """The bar of a job (or of a pass over files): one per job, drawn here only."""
    return tqdm(
        total=progress.total,
        initial=progress.done,
        unit=progress.unit,
        unit_scale=progress.scale,
        desc=progress.label,
        # None: tqdm's own rule, shown when the output is a terminal (Execution.progress)
        disable=None if progress.show is None else not progress.show,
        dynamic_ncols=True,
    )


def drive(
    job: Job[T, R],
    tasks: Iterable[T],
    *,
    execution: Execution,
    sink: TaskSink[T, R],
    progress: Progress,
    destination: str | None,
    resumable: bool = True,
) -> None:
    """The conversion driver: run ``tasks``, have ``sink`` write what the workers did not
    and record each task once durable, advancing the bar.

    ``destination`` names where failures happened (see :func:`run_tasks`); ``None`` raises
    them as they are (an append or a stitch: nothing to resume).
    """
    with progress_bar(progress) as bar:

        def finish(task: T, result: R) -> None:
            if not job.written(result):
                sink.write(task, result)
            advance(bar, sink.done(task, result))

        run_tasks(
            job,
            tasks,
            execution=execution,
            finish=finish,
            destination=destination,
            unit=progress.unit,
            resumable=resumable,
        )


def run_tasks(
    job: Job[T, R],
    tasks: Iterable[T],
    *,
    execution: Execution,
    finish: Callable[[T, R], None],
    destination: str | None,
    unit: str,
    resumable: bool = True,
    start_here: bool = False,
) -> None:
    """Run ``job`` on every task; call ``finish(task, result)`` here as each completes.

    ``execution.client`` (a ``dask.distributed.Client``) runs tasks on its cluster, whose
    workers must share this machine's filesystem; else ``workers > 1`` runs a process pool
    that never runs the caller's ``__main__`` and dies with this process
    (:mod:`~chunkio.convert.engine.processes`); else tasks run here. ``start_here``: without a
    client, tasks run here, timed, until the rest is estimated worth a pool
    (:func:`~chunkio.convert.engine.workers.pool_pays`). ``unit`` names tasks in messages ("block",
    "volume"); ``resumable`` says whether finished tasks survive a failure (errors then say
    "rerun to resume"); ``destination=None`` raises failures unwrapped.
    """
    kept = f"finished {unit}s are kept: rerun to resume" if resumable else ""
    where = None if destination is None else _Where(destination, kept)
    workers, client = execution.workers or 1, execution.client
    if client is not None:
        require_distributed()
        if _has_tasks(tasks):
            _drive(_Dask(client, job), job, tasks, finish, where)
        return
    if start_here and workers > 1:
        tasks = _start_here(job, list(tasks), finish, where)
    if workers <= 1 or not _has_tasks(tasks):
        _drive(_InProcess(job), job, tasks, finish, where)
        return
    size = min(workers, len(tasks)) if isinstance(tasks, Sized) else workers
    pool = worker_processes(size, initializer=_init_worker, initargs=(job,))
    try:
        _drive(_Pool(pool, workers), job, tasks, finish, where)
    except ConversionError as err:
        if pool.imports_main and isinstance(err.__cause__, BrokenProcessPool):
            raise ConversionError(f"{err}; {MAIN_GUARD_HINT}") from err.__cause__
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _has_tasks(tasks: Iterable[Any]) -> bool:
    """False for an empty sequence (no pool, no dask job); a stream may always have some."""
    return not isinstance(tasks, Sized) or len(tasks) > 0


def _start_here(
    job: Job[T, R], tasks: list[T], finish: Callable[[T, R], None], where: _Where | None
) -> list[T]:
    """Run tasks here until the rest is estimated worth a pool; return the rest."""
    seconds = 0.0
    for k, task in enumerate(tasks):
        started = time.perf_counter()
        _drive(_InProcess(job), job, [task], finish, where)
        seconds += time.perf_counter() - started
        rest = tasks[k + 1 :]
        if rest and pool_pays(Work(seconds=seconds / (k + 1) * len(rest))):
            return rest
    return []


def _drive(
    runner: _Runner[T],
    job: Job[T, R],
    tasks: Iterable[T],
    finish: Callable[[T, R], None],
    where: _Where | None,
) -> None:
    pending: dict[Any, T] = {}
    queue = iter(tasks)
    error: BaseException | None = None
    while True:
        while error is None and len(pending) < runner.max_in_flight:
            task = next(queue, None)
            if task is None:
                break
            try:
                pending[runner.submit(task)] = task
            except Exception as err:
                error = _wrap(err, task, where)
        if not pending:
            break
        for fut in runner.wait(pending):
            task = pending.pop(fut)
            try:
                result = fut.result()
            except Exception as err:
                error = error or _wrap(err, task, where)
                continue
            # After a failure, still record what workers wrote, but write no more here.
            if error is None or job.written(result):
                try:
                    finish(task, result)
                except Exception as err:  # e.g. ENOSPC while writing here
                    error = error or _wrap(err, task, where)
        if error is not None:
            for fut in [f for f in pending if runner.cancel(f)]:
                del pending[fut]
    if error is not None:
        raise error


@dataclass(frozen=True)
class _Where:
    """What a failure message names: the destination, and what a rerun keeps (or "")."""

    destination: str
    kept: str


def _wrap(err: BaseException, task: Task, where: _Where | None) -> BaseException:
    if where is None:
        return err
    at = f"{where.destination}: {task.describe()}"  # a full disk or a dead worker: say where
    kept = f"; {where.kept}" if where.kept else ""
    if isinstance(err, SourceError):
        try:
            wrapped: ConversionError = type(err)(f"{at}: {err}")
        except Exception:
            wrapped = SourceError(f"{at}: {err}")
    elif isinstance(err, BrokenProcessPool):
        wrapped = ConversionError(f"{at}: a worker process died ({err}){kept}")
    else:
        wrapped = ConversionError(f"{at}: {type(err).__name__}: {err}{kept}")
    wrapped.__cause__ = err
    return wrapped
