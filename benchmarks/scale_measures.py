"""The measures :mod:`benchmarks.bench_scale` runs, one size per fresh process.

``python -m benchmarks.scale_measures SECTION SPEC`` runs one measure in this process and prints
one JSON object as its last line: the section's figures (timed by the measure itself: the
interval it names, imports and data writing left out) and this process's own peak RSS
(``self_peak_rss``, its ``VmHWM`` at the end; not ``getrusage``'s ``ru_maxrss``, which keeps
the RSS of the process that started this one, from before the ``exec``) and, where the measure
holds the loader, its workers' (``workers_peak_rss``, read before they are joined). The parent
polls ``VmHWM`` as well (:func:`benchmarks.bench_scale.polled`); the larger is kept. Each
measure reuses its own benchmark's pieces (:mod:`benchmarks.bench_order`,
:mod:`benchmarks.bench_files`, :mod:`benchmarks.bench_windows`) rather than copying them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_memory import peak_rss, worker_pids

__all__ = ["MEASURES", "convert_once", "files_once", "order_once", "windows_once"]


def convert_once(spec: dict[str, Any]) -> dict[str, Any]:
    """``convert_arrays`` of ``spec["src"]`` into ``spec["dst"]`` with the worker pool at every
    size (the same processes at each), shuffled or not."""
    from chunkio import Execution, convert_arrays
    from chunkio.convert.engine import workers

    workers.POOL_MIN_SECONDS = 0.0
    wall = time.perf_counter()
    done = convert_arrays(
        spec["src"],
        spec["dst"],
        fields={"x": "x", "y": "y"},
        shuffle=spec["shuffle"],
        execution=Execution(workers=spec["workers"], progress=False),
    )
    return {"wall_s": time.perf_counter() - wall, "blocks": done.written_blocks}


def order_once(spec: dict[str, Any]) -> dict[str, Any]:
    """The epoch's order of ``spec["rows"]`` rows as a training job meets it: the loader's
    sampler (:class:`chunkio.sampling.sampler.ChunkBatchSampler`, batch 256, chunks of
    1000-4000 rows, one rank) to its first batch, through a pass (batches not kept) and to the
    first batch of a resume at 90%, timed in this process (wall and CPU); the order's own peak
    RSS above the RSS before the epoch. ``spec["mode"] == "eager"`` builds the whole epoch at
    once instead (the order chunkio used before, ``tests/sampling/reference_order.py``)."""
    from benchmarks import bench_order as bo
    from chunkio.sampling.sampler import ChunkBatchSampler

    rows = int(spec["rows"])
    sizes = bo.chunk_sizes(rows)
    sampler = ChunkBatchSampler(sizes, bo.BATCH)
    next(sampler.iter_arrays())  # imports and first-call allocations out of the measure
    before = bo._rss("VmHWM")
    base = bo._rss("VmRSS")
    bo._reset_peak()
    found: dict[str, Any] = {}
    if spec.get("mode") == "eager":
        _, wall, cpu = bo._timed(lambda: bo._eager(sizes, sampler))
        found.update(first_s=wall, first_cpu_s=cpu, pass_s=wall, pass_cpu_s=cpu, resume_s=wall)
    else:
        it = sampler.iter_arrays()
        _, found["first_s"], found["first_cpu_s"] = bo._timed(lambda: next(it))
        _, wall, cpu = bo._timed(lambda: sum(1 for _ in it))
        found["pass_s"], found["pass_cpu_s"] = found["first_s"] + wall, found["first_cpu_s"] + cpu

        def resume() -> Any:
            sampler.load_state_dict(sampler.state_at(int(0.9 * len(sampler))))
            return next(sampler.iter_arrays())

        _, found["resume_s"], _ = bo._timed(resume)
    after = bo._rss("VmHWM")
    found["order_rss"] = after - base
    found["self_peak_rss"] = max(before, after)  # the reset above cleared the kernel's peak
    found["pool"] = sampler.pool
    return found


def files_once(spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`benchmarks.bench_files.measure` of ``spec["files"]`` files as chunkio reads them
    (``after``): 2 ring workers (fork, joined at the end), batch 256, for ``spec["seconds"]``
    after the first batch."""
    from benchmarks import bench_files

    return bench_files.measure({**spec, "mode": "after"})


class _Paths(logging.Handler):
    """Keeps the windows path chunkio logs (:func:`chunkio.read.windows.window_path`)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.paths: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("chunkio windows: "):
            self.paths.append(text.removeprefix("chunkio windows: ").split(":")[0])


def windows_once(spec: dict[str, Any]) -> dict[str, Any]:
    """ERA5-like windows (:mod:`benchmarks.bench_windows`: ``t-1, t`` of 3 variables and the
    target ``t+1``) from the store ``spec["path"]``, batch 32, 2 workers, ``Workers(hold_bytes=
    spec["hold_bytes"])`` (the default when ``None``): the first epoch (workers' start
    included) and later epochs for ``spec["seconds"]``; samples/s and samples per CPU-second of
    every process of the loader; the path the loader took, as chunkio logs it."""
    import chunkio
    from benchmarks import bench_windows as bw

    log = logging.getLogger("chunkio")
    paths = _Paths()
    log.addHandler(paths)
    log.setLevel(logging.INFO)
    hold = spec.get("hold_bytes")
    workers = chunkio.Workers() if hold is None else chunkio.Workers(hold_bytes=int(hold))
    dataset = bw._chunkio(Path(spec["path"]))
    found: dict[str, Any] = {"held_bytes": dataset.held_nbytes()}
    loader = chunkio.make_loader(dataset, bw.BATCH, num_workers=bw.WORKERS, seed=0, workers=workers)
    found["first_per_s"], found["first_per_cpu_s"] = bw._first_epoch(loader)
    found["per_s"], found["per_cpu_s"] = bw.timed(loader, budget_s=spec["seconds"], warmup=2)
    found["workers_peak_rss"] = max((peak_rss(p) or 0 for p in worker_pids(loader)), default=0)
    loader.close()
    log.removeHandler(paths)
    found["path"] = paths.paths[-1] if paths.paths else "not logged"
    return found


#: section name -> measure(spec) -> figures, run in this process
MEASURES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "convert": convert_once,
    "files": files_once,
    "order": order_once,
    "windows": windows_once,
}


def main(argv: list[str]) -> None:
    found = MEASURES[argv[0]](json.loads(argv[1]))
    own = peak_rss(os.getpid()) or 0
    found["self_peak_rss"] = max(found.get("self_peak_rss", 0), own)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
