"""The check pass of :func:`~chunkio.convert.images.convert_images`.

Every file is probed (:func:`chunkio.images.pillow.probe_image`: headers parsed, PNG CRCs
checked, JPEGs that lack their end marker decoded at 1/8 scale; or, ``thorough``, every JPEG
decoded at 1/8 scale) and stat'ed. The pass starts in this process and hands the rest of the
files to the conversion engine's process pool (:func:`chunkio.convert.engine.core.run_tasks`)
only once it is clear that the remaining work outweighs starting the pool
(:func:`chunkio.convert.engine.workers.pool_pays`). The default probe of a plain JPEG reads its
headers without Pillow (:mod:`chunkio.images.jpeg`) and costs 0.06 of a Pillow decode
for 224-256 px JPEGs, 0.12 for 64-128 px ones (``check_vs_decode`` in
``benchmarks/bench_convert.py``), so only folders of hundreds of thousands of files ever pay
for a pool here. With a ``dask.distributed`` client the cluster runs it all.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...images.pillow import DecodePolicy, Probe, probe_image
from ..engine import workers
from ..engine.core import progress_bar, run_tasks
from ..options import Execution, Progress
from ..progress import advance

__all__ = ["Checked", "check_all"]

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
    execution: Execution,
    progress: bool | None,
    thorough: bool = False,
) -> list[Checked]:
    """Probe every file of ``paths``; results in input order. Without a client, batches are
    checked here until the rest is worth the pool (:func:`~chunkio.convert.engine.core.run_tasks`
    with ``start_here``)."""
    job = _CheckJob(policy, thorough)
    batches = _batches(paths, execution.workers or 1)
    results: list[list[Checked]] = [[] for _ in batches]
    with progress_bar(Progress(len(paths), "image", "check", progress)) as bar:

        def finish(batch: _Batch, checked: list[Checked]) -> None:
            results[batch.index] = checked
            advance(bar, len(checked))

        run_tasks(
            job,
            batches,
            execution=execution,
            finish=finish,
            destination="check pass",
            unit="batch",
            resumable=False,
            start_here=True,
        )
    return [c for part in results for c in part]


class _Module(types.ModuleType):
    """``image_check.POOL_MIN_SECONDS``, where it was documented: now
    :data:`chunkio.convert.engine.workers.POOL_MIN_SECONDS`, read and set through this name too."""

    @property
    def POOL_MIN_SECONDS(self) -> float:
        return workers.POOL_MIN_SECONDS

    @POOL_MIN_SECONDS.setter
    def POOL_MIN_SECONDS(self, value: float) -> None:
        workers.POOL_MIN_SECONDS = value


sys.modules[__name__].__class__ = _Module
