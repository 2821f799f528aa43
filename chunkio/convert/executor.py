"""Runs blocks in-process, in a process pool, or on a dask.distributed cluster.

:func:`execute` keeps a bounded number of blocks in flight (memory stays bounded) and records
each finished block in the manifest, in whatever order blocks finish.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

from ..backends import Writer
from ..errors import ConversionError, OptionalDependencyError, SourceError
from .procpool import MAIN_GUARD_HINT, ConversionPool, process_pool
from .progress import advance
from .ragged import RaggedPlan
from .staging import Destination
from .worker import (
    Block,
    WorkerSpec,
    block_syncs,
    block_writes,
    do_block,
    flush,
    init_worker,
    pool_task,
)

if TYPE_CHECKING:
    from tqdm import tqdm

    from .pipeline import BlockSource

__all__ = ["execute"]


class _Runner(Protocol):
    max_in_flight: int

    def submit(self, block: Block) -> Any: ...

    def wait(self, futures: Iterable[Any]) -> set[Any]: ...

    def cancel(self, future: Any) -> bool: ...


class _InProcess:
    max_in_flight = 1

    def __init__(self, source: BlockSource, spec: WorkerSpec) -> None:
        self.source, self.spec = source, spec

    def submit(self, block: Block) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            fut.set_result(do_block(self.source, self.spec, block))
        except Exception as err:
            fut.set_exception(err)
        return fut

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(futures)

    def cancel(self, future: Any) -> bool:
        return True


class _Pool:
    def __init__(self, pool: ConversionPool, workers: int) -> None:
        self.pool, self.max_in_flight = pool, 2 * workers

    def submit(self, block: Block) -> Future[Any]:
        return self.pool.submit(pool_task, block)

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(futures_wait(list(futures), return_when=FIRST_COMPLETED).done)

    def cancel(self, future: Any) -> bool:
        return bool(future.cancel())


class _Dask:
    def __init__(self, client: Any, source: BlockSource, spec: WorkerSpec) -> None:
        import distributed

        self.client = client
        self._distributed: Any = distributed  # untyped package
        # Sent once to every worker, not once per block (a spec with ragged plans is large).
        self.source = client.scatter(source, broadcast=True, hash=False)
        self.spec = client.scatter(spec, broadcast=True, hash=False)
        self.max_in_flight = 2 * max(1, sum(client.nthreads().values()))

    def submit(self, block: Block) -> Any:
        return self.client.submit(do_block, self.source, self.spec, block, pure=False)

    def wait(self, futures: Iterable[Any]) -> set[Any]:
        return set(self._distributed.wait(list(futures), return_when="FIRST_COMPLETED").done)

    def cancel(self, future: Any) -> bool:
        future.cancel()
        return True


def execute(
    source: BlockSource,
    dest: Destination,
    writer: Writer,
    todo: list[Block],
    *,
    workers: int,
    client: Any,
    bar: tqdm[Any],
    ragged: tuple[RaggedPlan, ...] = (),
) -> None:
    """Convert the blocks of ``todo`` into ``dest`` and record each in its manifest.

    ``workers > 1`` runs a process pool (see :mod:`~chunkio.convert.procpool`), ``client`` a
    dask cluster whose workers share this machine's filesystem (they open local staging
    paths); Zarr workers write their own blocks, others return them for ``writer`` to write
    here.
    Failures are raised as :class:`ConversionError` (or :class:`SourceError`) naming the block.
    """
    plan = dest.plan
    parallel = client is not None or workers > 1
    location = dest.worker_location if parallel and writer.supports_concurrent_writers else None
    spec = WorkerSpec(plan.fields, plan.format, location, dest.staged, os.urandom(8).hex(), ragged)

    def finish(block: Block, data: dict[str, Any] | None) -> None:
        if data is not None:  # not written by a worker: write it here
            for name, start, values in block_writes(spec, block, data):
                writer.write_block(name, start, values)
            flush(writer)
            for names, first, stop in block_syncs(spec, block):
                dest.sync(names, first, stop)
        # Only now, with the block's chunks durable, may the manifest claim it.
        dest.record(block.first_chunk, block.stop_chunk)
        advance(bar, block.stop - block.start)

    if not todo:
        return
    if client is not None:
        _require_distributed()
        _drive(_Dask(client, source, spec), todo, finish, dest.display)
        return
    if workers == 1:
        _drive(_InProcess(source, spec), todo, finish, dest.display)
        return
    # Workers never run the caller's __main__ and exit when this process dies: see procpool.
    pool = process_pool(workers, initializer=init_worker, initargs=(source, spec))
    try:
        _drive(_Pool(pool, workers), todo, finish, dest.display)
    except ConversionError as err:
        if pool.imports_main and isinstance(err.__cause__, BrokenProcessPool):
            raise ConversionError(f"{err}; {MAIN_GUARD_HINT}") from err.__cause__
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _require_distributed() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError as err:
        raise OptionalDependencyError(
            "client= needs the 'distributed' package: pip install 'chunkio[distributed]'"
        ) from err


def _drive(
    runner: _Runner,
    todo: list[Block],
    finish: Callable[[Block, dict[str, npt.NDArray[Any]] | None], None],
    destination: str,
) -> None:
    """Keep at most ``runner.max_in_flight`` blocks running; record each as it finishes.

    On the first failure nothing new starts, queued blocks are cancelled, running ones are
    still recorded when they succeed (less to redo on resume), then the failure is raised.
    """
    pending: dict[Any, Block] = {}
    blocks = iter(todo)
    error: BaseException | None = None
    while True:
        while error is None and len(pending) < runner.max_in_flight:
            block = next(blocks, None)
            if block is None:
                break
            try:
                pending[runner.submit(block)] = block
            except Exception as err:
                error = _wrap(err, block, destination)
        if not pending:
            break
        for fut in runner.wait(pending):
            block = pending.pop(fut)
            try:
                data = fut.result()
            except Exception as err:
                error = error or _wrap(err, block, destination)
                continue
            # After a failure, still record blocks that workers wrote, but write no more here.
            if error is None or data is None:
                try:
                    finish(block, data)
                except Exception as err:  # e.g. ENOSPC while writing here
                    error = error or _wrap(err, block, destination)
        if error is not None:
            for fut in [f for f in pending if runner.cancel(f)]:
                del pending[fut]
    if error is not None:
        raise error


def _wrap(err: BaseException, block: Block, destination: str) -> ConversionError:
    where = f"{destination}: {block.describe()}"  # a full disk or dead worker: say where
    if isinstance(err, SourceError):
        try:
            wrapped: ConversionError = type(err)(f"{where}: {err}")
        except Exception:
            wrapped = SourceError(f"{where}: {err}")
    elif isinstance(err, BrokenProcessPool):
        wrapped = ConversionError(
            f"{where}: a worker process died ({err}); finished blocks are kept: rerun to resume"
        )
    else:
        wrapped = ConversionError(
            f"{where}: {type(err).__name__}: {err}; finished blocks are kept: rerun to resume"
        )
    wrapped.__cause__ = err
    return wrapped
