"""The check pass of :func:`~chunkio.convert.images.convert_images`, run in parallel.

Every file is probed (:func:`chunkio.convert.decode.probe_image`: opened, decoded cheaply,
oriented) and stat'ed. The pass starts in this process and moves the rest of the files to a
process pool only once it is clear that the remaining work outweighs starting the pool: each
worker process imports NumPy, Pillow and chunkio (with torch), which takes seconds, so
small folders never pay for it. With a ``dask.distributed`` client the cluster runs it all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from ..errors import ConversionError
from .decode import DecodePolicy, Probe, probe_image
from .procpool import process_pool
from .progress import advance

__all__ = ["POOL_MIN_SECONDS", "Checked", "Timing", "check_all"]

#: Work estimated to take less than this in one process stays in this process: starting
#: worker processes (each imports NumPy, Pillow, zarr, h5py and torch) costs seconds. Set it
#: to ``0.0`` before converting to use the pools (check and write) whenever ``workers > 1``.
POOL_MIN_SECONDS = 5.0


@dataclass(frozen=True)
class Checked:
    """One file's probe, and its size and mtime (for the conversion's fingerprint)."""

    probe: Probe
    size: int = 0
    mtime_ns: int = 0


def _check_batch(paths: Sequence[str], policy: DecodePolicy) -> list[Checked]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as err:
            out.append(Checked(Probe(error=f"cannot stat: {err}")))
            continue
        out.append(Checked(probe_image(path, policy), st.st_size, st.st_mtime_ns))
    return out


def _batches(paths: Sequence[str], workers: int) -> list[Sequence[str]]:
    step = max(1, min(64, len(paths) // (4 * workers) or 1))
    return [paths[i : i + step] for i in range(0, len(paths), step)]


@dataclass
class Timing:
    """Seconds per file of the check pass, measured on the part run in this process."""

    files: int = 0
    seconds: float = 0.0

    @property
    def per_file(self) -> float:
        return self.seconds / self.files if self.files else 0.0


def check_all(
    paths: Sequence[str], policy: DecodePolicy, *, workers: int, client: Any, progress: bool
) -> tuple[list[Checked], Timing]:
    """Probe every file of ``paths``; results in input order, and the in-process timing."""
    batches = _batches(paths, workers)
    results: list[list[Checked]] = [[] for _ in batches]
    timing = Timing()
    bar = tqdm(
        total=len(paths), unit="image", desc="check", disable=not progress, dynamic_ncols=True
    )
    with bar:
        for i, checked in _run_batches(batches, policy, workers, client, timing):
            results[i] = checked
            advance(bar, len(checked))
    return [c for part in results for c in part], timing


def _run_batches(
    batches: list[Sequence[str]], policy: DecodePolicy, workers: int, client: Any, timing: Timing
) -> Iterator[tuple[int, list[Checked]]]:
    """Batches in this process until the rest is worth a process pool, then in the pool."""
    if client is not None:
        yield from _dask_batches(client, list(enumerate(batches)), policy)
        return
    total = sum(len(b) for b in batches)
    todo = list(enumerate(batches))
    while todo:
        i, batch = todo.pop(0)
        started = time.perf_counter()
        yield i, _check_batch(batch, policy)
        timing.files += len(batch)
        timing.seconds += time.perf_counter() - started
        if workers > 1 and todo and timing.per_file * (total - timing.files) > POOL_MIN_SECONDS:
            yield from _pool_batches(todo, policy, workers)
            return


def _pool_batches(
    todo: list[tuple[int, Sequence[str]]], policy: DecodePolicy, workers: int
) -> Iterator[tuple[int, list[Checked]]]:
    with process_pool(min(workers, len(todo))) as pool:
        pending = {pool.submit(_check_batch, b, policy): i for i, b in todo}
        try:
            for fut in as_completed(pending):
                yield pending[fut], fut.result()
        except BrokenProcessPool as err:
            raise ConversionError(f"a worker process of the check pass died: {err}") from err


def _dask_batches(
    client: Any, todo: list[tuple[int, Sequence[str]]], policy: DecodePolicy
) -> Iterator[tuple[int, list[Checked]]]:
    from distributed import as_completed as dask_completed

    futures = {client.submit(_check_batch, b, policy, pure=False): i for i, b in todo}
    for fut in dask_completed(futures):  # type: ignore[no-untyped-call,unused-ignore]
        yield futures[fut], fut.result()
