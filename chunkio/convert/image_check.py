"""The check pass of :func:`~chunkio.convert.images.convert_images`.

Every file is probed (:func:`chunkio.images.pillow.probe_image`: headers parsed, PNG CRCs
checked, JPEGs that lack their end marker decoded at 1/8 scale; or, ``thorough``, every JPEG
decoded at 1/8 scale) and stat'ed. The pass starts in this process and hands the rest of the
files to the conversion engine's process pool (:func:`chunkio.convert.engine.run_tasks`)
only once it is clear that the remaining work outweighs starting the pool
(:data:`POOL_MIN_SECONDS`). The default probe of a plain JPEG reads its headers without
Pillow (:mod:`chunkio.images.jpeg`) and costs 0.06 of a Pillow decode for 224-256 px
JPEGs, 0.12 for 64-128 px ones (``check_vs_decode`` in ``benchmarks/bench_convert.py``), so
only folders of hundreds of thousands of files ever pay for a pool here. With a
``dask.distributed`` client the cluster runs it all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from ..images.pillow import DecodePolicy, Probe, probe_image
from .engine import run_tasks
from .progress import advance

__all__ = ["POOL_MIN_SECONDS", "Checked", "check_all"]

#: Work estimated to take less than this in one process stays in this process. Starting a
#: pool of worker processes (each imports NumPy, Pillow, zarr and h5py) measured 0.4-0.8 s
#: on 2 cores, and two workers save at most half the work, so below about 2 s of work a
#: pool is a loss. Set it to ``0.0`` before converting to use the pools (check and write)
#: whenever ``workers > 1``.
POOL_MIN_SECONDS = 2.0

#: Files per batch at most: the unit of work, and how often the in-process part is timed.
_BATCH = 64


@dataclass(frozen=True)
class Checked:
    """One file's probe, and its size and mtime (for the conversion's fingerprint)."""

    probe: Probe
    size: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True)
class _Batch:
    """Files ``paths``, the ``index``-th batch of the listing: a task of the engine."""

    index: int
    paths: tuple[str, ...]

    def describe(self) -> str:
        return f"files {self.paths[0]} .. {self.paths[-1]}"


@dataclass(frozen=True)
class _CheckJob:
    """Probes the files of a batch; picklable, so it runs in pool workers too."""

    policy: DecodePolicy
    thorough: bool

    def run(self, batch: _Batch) -> list[Checked]:
        out = []
        for path in batch.paths:
            try:
                st = os.stat(path)
            except OSError as err:
                out.append(Checked(Probe(error=f"cannot stat: {err}")))
                continue
            probe = probe_image(path, self.policy, thorough=self.thorough)
            out.append(Checked(probe, st.st_size, st.st_mtime_ns))
        return out

    def written(self, result: Any) -> bool:
        return False  # nothing is written: after a failure, the rest is not needed


def _batches(paths: Sequence[str], workers: int) -> list[_Batch]:
    step = max(1, min(_BATCH, len(paths) // (4 * workers) or 1))
    return [_Batch(k, tuple(paths[i : i + step])) for k, i in enumerate(range(0, len(paths), step))]


def check_all(
    paths: Sequence[str],
    policy: DecodePolicy,
    *,
    workers: int,
    client: Any,
    progress: bool,
    thorough: bool = False,
) -> list[Checked]:
    """Probe every file of ``paths``; results in input order."""
    job = _CheckJob(policy, thorough)
    batches = _batches(paths, workers)
    results: list[list[Checked]] = [[] for _ in batches]
    bar = tqdm(
        total=len(paths), unit="image", desc="check", disable=not progress, dynamic_ncols=True
    )

    def finish(batch: _Batch, checked: list[Checked]) -> None:
        results[batch.index] = checked
        advance(bar, len(checked))

    with bar:
        rest = batches if client is not None else _in_process(job, batches, workers, finish)
        if rest:
            run_tasks(
                job,
                rest,
                workers=workers,
                client=client,
                finish=finish,
                destination="check pass",
                unit="batch",
                resumable=False,
            )
    return [c for part in results for c in part]


def _in_process(
    job: _CheckJob,
    batches: list[_Batch],
    workers: int,
    finish: Callable[[_Batch, list[Checked]], None],
) -> list[_Batch]:
    """Check batches here until the rest is worth a pool; return the rest."""
    done, seconds = 0, 0.0
    total = sum(len(b.paths) for b in batches)
    for k, batch in enumerate(batches):
        started = time.perf_counter()
        finish(batch, job.run(batch))
        seconds += time.perf_counter() - started
        done += len(batch.paths)
        rest = batches[k + 1 :]
        if workers > 1 and rest and seconds / done * (total - done) > POOL_MIN_SECONDS:
            return rest
    return []
