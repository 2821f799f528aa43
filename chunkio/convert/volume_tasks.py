"""One task per volume: decode, apply the value policies, index the labels, write.

A task owns every chunk of its volume (the volume's rows of the image and label arrays), so
parallel writers never share a chunk. Zarr workers write and fsync their own volume; for
HDF5, memory and zarr Store objects the worker returns the arrays and the calling process
writes them. Tasks run in this process, a process pool (:mod:`~chunkio.convert.procpool`:
never fork, never the caller's ``__main__``) or on a ``dask.distributed`` client.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Format, Writer, open_writer
from ..errors import ConversionError, OptionalDependencyError, SourceError
from ..patches.label_index import index_label_volume
from ._fsync import sync_chunks
from .procpool import process_pool
from .volume_sources import VolumeFile, load_volume
from .volume_values import NanPolicy, OnOverflow, prepare_image, prepare_label

__all__ = [
    "VolumeResult",
    "VolumeTask",
    "WriteSpec",
    "convert_volume",
    "flush_writer",
    "run_tasks",
    "write_result",
]


@dataclass(frozen=True)
class VolumeTask:
    """Everything needed to convert volume ``volume``; picklable."""

    volume: int
    image: VolumeFile
    label: VolumeFile | None
    image_dtype: np.dtype[Any]
    label_dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    on_overflow: OnOverflow
    nan_policy: NanPolicy
    image_array: tuple[str, int]
    label_array: tuple[str, int] | None

    def source_fingerprint(self) -> str:
        """The files' paths, sizes and modification times: a changed file is converted again."""
        parts = []
        for vf in (self.image, self.label):
            if vf is not None:
                st = os.stat(vf.path)
                parts.append(f"{os.path.abspath(vf.path)}:{st.st_size}:{st.st_mtime_ns}")
        return "|".join(parts)

    def describe(self) -> str:
        label = f" with label {self.label.path}" if self.label else ""
        return f"volume {self.volume} ({self.image.path}{label})"


@dataclass(frozen=True)
class WriteSpec:
    """Where workers write (``location`` None: they return the arrays instead)."""

    format: Format
    location: str | None
    durable: bool
    run_id: str


@dataclass
class VolumeResult:
    volume: int
    slope: float
    inter: float
    rows: npt.NDArray[np.int64]
    points: npt.NDArray[np.int64]
    image: npt.NDArray[Any] | None = None
    label: npt.NDArray[Any] | None = None


_writers: dict[tuple[str, str], Writer] = {}
_writers_lock = threading.Lock()  # dask workers run tasks in threads


def convert_volume(task: VolumeTask, spec: WriteSpec) -> VolumeResult:
    """Worker side: convert one volume; write it when ``spec.location`` says so."""
    where = task.image.path
    image, slope, inter = prepare_image(
        load_volume(task.image),
        task.image_dtype,
        on_overflow=task.on_overflow,
        nan_policy=task.nan_policy,
        where=where,
    )
    label = None
    ndim = len(task.chunks)
    rows, points = np.zeros((0, ndim + 3), np.int64), np.zeros((0, 0, ndim), np.int64)
    if task.label is not None:
        raw = load_volume(task.label)
        label = prepare_label(raw, task.label_dtype, where=task.label.path)
        rows, points = index_label_volume(label, task.volume, task.chunks)
    result = VolumeResult(task.volume, slope, inter, rows, points, image, label)
    if spec.location is None:
        return result
    with _writers_lock:
        key = (spec.location, spec.run_id)
        if key not in _writers:
            _writers[key] = open_writer(spec.location, format=spec.format)
        writer = _writers[key]
    write_result(writer, task, result)
    if spec.durable:
        names = tuple(a[0] for a in (task.image_array, task.label_array) if a is not None)
        row = task.image_array[1]
        sync_chunks(spec.location, spec.format, names, row, row + 1)
    result.image = result.label = None  # written: nothing to send back but the index
    return result


def flush_writer(writer: Writer) -> None:
    """Push a writer's caches to the OS where it has any (HDF5 keeps chunks until flushed)."""
    method = getattr(writer, "flush", None)
    if callable(method):
        method()


def write_result(writer: Writer, task: VolumeTask, result: VolumeResult) -> None:
    """Write a volume's arrays (one row of each array)."""
    name, row = task.image_array
    writer.write_block(name, row, np.asarray(result.image)[None])
    if task.label_array is not None:
        name, row = task.label_array
        writer.write_block(name, row, np.asarray(result.label)[None])


def run_tasks(
    tasks: list[VolumeTask],
    spec: WriteSpec,
    *,
    workers: int,
    client: Any,
    finish: Callable[[VolumeTask, VolumeResult], None],
) -> None:
    """Run ``tasks``, calling ``finish`` (in this process) as each one completes.

    At most ``2 * workers`` volumes are in flight. On the first failure nothing new starts,
    queued tasks are cancelled, running ones are still finished when they succeed (less to
    redo on resume), then the failure is raised naming the volume and its files.
    """
    if not tasks:
        return
    if client is not None:
        submit, wait, limit = _dask(client, spec)
        _drive(tasks, submit, wait, limit, finish)
    elif workers <= 1:
        _drive(tasks, lambda t: _now(t, spec), lambda fs: set(fs), 1, finish)
    else:
        with process_pool(workers) as pool:
            try:
                _drive(
                    tasks,
                    lambda t: pool.submit(convert_volume, t, spec),
                    lambda fs: set(futures_wait(list(fs), return_when=FIRST_COMPLETED).done),
                    2 * workers,
                    finish,
                )
            finally:
                pool.shutdown(wait=True, cancel_futures=True)


def _now(task: VolumeTask, spec: WriteSpec) -> Future[Any]:
    fut: Future[Any] = Future()
    try:
        fut.set_result(convert_volume(task, spec))
    except Exception as err:
        fut.set_exception(err)
    return fut


def _dask(client: Any, spec: WriteSpec) -> tuple[Any, Any, int]:
    try:
        import distributed
    except ImportError as err:
        raise OptionalDependencyError(
            "client= needs the 'distributed' package: pip install 'chunkio[distributed]'"
        ) from err

    def submit(task: VolumeTask) -> Any:
        return client.submit(convert_volume, task, spec, pure=False)

    def wait(futures: Any) -> set[Any]:
        done = distributed.wait(list(futures), return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call]
        return set(done.done)

    return submit, wait, 2 * max(1, sum(client.nthreads().values()))


def _drive(
    tasks: list[VolumeTask],
    submit: Callable[[VolumeTask], Any],
    wait: Callable[[Any], set[Any]],
    limit: int,
    finish: Callable[[VolumeTask, VolumeResult], None],
) -> None:
    pending: dict[Any, VolumeTask] = {}
    queue = iter(tasks)
    error: BaseException | None = None
    while True:
        while error is None and len(pending) < limit:
            task = next(queue, None)
            if task is None:
                break
            pending[submit(task)] = task
        if not pending:
            break
        for fut in wait(pending):
            task = pending.pop(fut)
            try:
                result = fut.result()
                if error is None or result.image is None:  # after a failure: record, not write
                    finish(task, result)
            except Exception as err:
                error = error or _wrap(err, task)
        if error is not None:
            for fut in [f for f in pending if f.cancel() is not False]:
                del pending[fut]
    if error is not None:
        raise error


def _wrap(err: BaseException, task: VolumeTask) -> ConversionError:
    where = task.describe()
    if isinstance(err, SourceError):
        wrapped: ConversionError = SourceError(f"{where}: {err}")
    elif isinstance(err, BrokenProcessPool):
        wrapped = ConversionError(
            f"{where}: a worker process died ({err}); finished volumes are kept: rerun to resume"
        )
    else:
        wrapped = ConversionError(
            f"{where}: {type(err).__name__}: {err}; finished volumes are kept: rerun to resume"
        )
    wrapped.__cause__ = err
    return wrapped
