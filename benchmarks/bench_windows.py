"""Windows in time on an ERA5-like store written by xarray: chunkio vs the loaders users write.

Three variables ``(time, 64, 128)`` float32 over 2,920 six-hourly steps, stored with one step
per chunk and with 24; each sample is the window ``t-1, t`` of the 3 variables plus the target
``t+1`` (9 rows), batch 32, 2 workers. Loaders: chunkio (``Field`` windows, the ring), a
per-sample zarr-python window Dataset in a DataLoader, xbatcher (``input_overlap``, no lead
targets: a 3-step window stands in for input and target) and insitubatch 0.2 (shifted
geometries, in a Python 3.12 venv at ``INSITUBATCH_PYTHON`` or ``/work/venv312``; skipped with
a note when absent). insitubatch keeps the decoded chunks of its first epoch in its pool and
serves later epochs from it; so do chunkio's readers at their defaults when the decoded data
fits ``Workers(hold_bytes)`` (1 GiB for all the readers; the store is 287 MB), so both are
shown after their first epoch, in their first epoch, and chunkio with ``hold_bytes=0`` (the
mixing pool only: every chunk decoded once per epoch) and *beyond memory*: a budget below the
store's decoded size (``--hold-bytes``, default half of it), the path every store larger than
the budget takes (real ERA5 stores: terabytes), streamed, each chunk decoded once per pass.
Reports samples/s, samples per CPU-second (every process of the loader: user + system time),
GB/s delivered, read amplification (chunks decoded per stored chunk in an epoch) and the std
of anchor times per batch against a uniform shuffle's.

``--ab`` adds the beyond-memory row as the streamed path read before 2026-11-29 (caches as
large as the order asks whatever the budget, an admit per field, no chunk held), in the same
run; with ``--scale``, the larger store also streamed whole (no chunk held past the budget).
``--scale N`` also measures the defaults and ``hold_bytes=0`` on a store of ``N`` steps
(the last ``--per-chunk``), e.g. 100,000: past the default budget, so the defaults hold its
first chunks and stream the rest; checked against the defaults at ``--steps`` (held). Its
later epochs are timed after ``--scale-warm-epochs K`` untimed epochs past the first (default
3): the held part is written within each worker's credit, as it serves
(:mod:`chunkio.read.windows.held`), full at 100,000 steps in the fourth epoch, so the default
times it full (the later epochs of a training run), ``K`` 1 while it fills (before
2026-11-30 the part was written whole in the first epoch and ``K`` was 1).
``--store-dir D`` keeps the stores in ``D`` and reuses them (a 100k-step store takes minutes).

Every store's files are read once before the first timed row, so that every row finds them in
the page cache (a 100k-step store is 2.2 GB: read cold by its first row only, it made that row
look several times slower than the next). ``--rounds R`` measures everything ``R`` times,
chunkio's rows and the stores in the opposite order every other round (the other loaders run
after chunkio's rows in every round), and reports each figure's median and range over the
rounds where it was measured (a row skipped in some rounds, e.g. insitubatch failing once, is
the median of the others and says over how many); each target is checked on the median of its
per-round ratios, shown with their range. The table's "x chunkio" column divides two medians;
the PASS / FAIL lines are medians of the per-round ratios: the two can differ.

    python -m benchmarks.bench_windows [--quick] [--budget S] [--per-chunk 1 24]
        [--steps N] [--shape H W] [--hold-bytes B] [--ab] [--scale N] [--store-dir D]
        [--rounds R] [--scale-warm-epochs K] [--loaders chunkio,insitubatch,xbatcher,zarr]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
import xarray as xr
import zarr
from torch.utils.data import DataLoader, Dataset

import chunkio
import chunkio.read.windows as windows_read
import chunkio.read.windows.stream as windows_stream
from benchmarks.bench_loaders import _batch_len
from benchmarks.report import check, check_lines
from chunkio import ChunkDataset, Field

VARS = ("t2m", "u10", "v10")
BATCH, WORKERS = 32, 2
SHAPE = (64, 128)
ROW_BYTES = SHAPE[0] * SHAPE[1] * 4
SAMPLE_BYTES = 9 * ROW_BYTES
INSITU = Path(os.environ.get("INSITUBATCH_PYTHON", "/work/venv312/bin/python"))
#: what ``--loaders`` may name (chunkio, always measured: at the defaults and hold_bytes=0)
LOADERS = frozenset({"chunkio", "zarr", "xbatcher", "insitubatch"})
#: ``--ab``: the beyond-memory row as the streamed path read before 2026-11-29
BEFORE = "chunkio, beyond memory (before 2026-11-29)"
#: ``--ab --scale N``: the defaults on the larger store with no chunk held past the budget
#: (the whole stack streamed, as before the held part)
BEFORE_SCALE = "chunkio, streamed whole"


def set_shape(height: int, width: int) -> None:
    """Measure ``(height, width)`` fields instead of 64x128 (e.g. ``--shape 32 64``)."""
    global SHAPE, ROW_BYTES, SAMPLE_BYTES
    SHAPE = (height, width)
    ROW_BYTES = height * width * 4
    SAMPLE_BYTES = 9 * ROW_BYTES


def era_store(root: Path, steps: int, per_chunk: int) -> Path:
    """The store as xarray writes it (smooth fields plus noise, zstd through zarr's default);
    one written before in ``root`` (``--store-dir``) is reused. Written beside its name and
    renamed once whole, so a run stopped mid-write leaves nothing that would be reused."""
    path = root / f"era_{steps}x{SHAPE[0]}x{SHAPE[1]}_{per_chunk}.zarr"
    if (path / "zarr.json").exists():
        return path
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    rng = np.random.default_rng(0)
    lat, lon = np.meshgrid(np.linspace(-1, 1, SHAPE[0]), np.linspace(-3, 3, SHAPE[1]),
                           indexing="ij")  # fmt: skip
    t = np.arange(steps)[:, None, None] / 4.0
    data = {
        v: (np.sin(lon + t * (k + 1) / 7) * np.cos(lat) * 10 + 280 * (k == 0)
            + rng.standard_normal((steps, *SHAPE)) * 0.5).astype(np.float32)
        for k, v in enumerate(VARS)
    }  # fmt: skip
    ds = xr.Dataset({v: (("time", "lat", "lon"), a) for v, a in data.items()},
                    coords={"time": np.arange(steps, dtype=np.int64)})  # fmt: skip
    encoding = {v: {"chunks": (per_chunk, *SHAPE)} for v in VARS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(partial, mode="w", encoding=encoding, zarr_format=3)
    shutil.rmtree(path, ignore_errors=True)  # an unfinished store of an earlier run, if any
    partial.rename(path)
    return path


class PerSampleWindows(Dataset[Any]):
    """What a user writes today: zarr-python indexing ``t-1, t, t+1`` per sample."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.group: Any = None
        self.n = zarr.open_group(path, mode="r")["t2m"].shape[0] - 2

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.group is None:
            self.group = zarr.open_group(self.path, mode="r")
        t = i + 1
        x = np.stack([np.stack([self.group[v][t + s] for v in VARS]) for s in (-1, 0)])
        y = np.stack([self.group[v][t + 1] for v in VARS])[None]
        return torch.from_numpy(x), torch.from_numpy(y), t


class XbatcherWindows(Dataset[Any]):
    """xbatcher's 3-step windows (``input_overlap``), one per sample."""

    def __init__(self, path: str) -> None:
        import xbatcher

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = xr.open_zarr(path)[list(VARS)]
        self.gen = xbatcher.BatchGenerator(
            ds, input_dims={"time": 3, "lat": SHAPE[0], "lon": SHAPE[1]},
            input_overlap={"time": 2},
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.gen)

    def __getitem__(self, i: int) -> torch.Tensor:
        w = self.gen[i]
        return torch.from_numpy(np.stack([w[v].values for v in VARS], axis=1))


def _chunkio(path: Path) -> ChunkDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ChunkDataset(path, fields=[Field(list(VARS), steps=range(-1, 1)),
                                          Field(list(VARS), steps=[1]), "time"])  # fmt: skip


def warm(path: Path) -> int:
    """Every file of the store at ``path`` read once (into the page cache); bytes read."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb", buffering=0) as f:
                while block := f.read(1 << 22):
                    total += len(block)
    return total


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and its live descendants (the workers)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def timed(batches: Any, *, budget_s: float, warmup: int) -> tuple[float, float]:
    """``(samples/s, samples per CPU-second)`` after ``warmup`` batches, over ``budget_s``
    seconds (at least two timed batches); passes are repeated as needed."""
    n = timed_batches = 0
    start = cpu = 0.0
    while True:
        for batch in batches:
            if warmup:
                warmup -= 1
                if not warmup:
                    start, cpu = time.perf_counter(), _tree_cpu()
                continue
            n += _batch_len(batch)
            timed_batches += 1
            if time.perf_counter() - start > budget_s and timed_batches >= 2:
                return n / (time.perf_counter() - start), n / (_tree_cpu() - cpu)


def _first_epoch(loader: Any) -> tuple[float, float]:
    """``(samples/s, samples per CPU-second)`` of a loader's first epoch, workers' start-up
    included."""
    start, cpu = time.perf_counter(), _tree_cpu()
    n = sum(_batch_len(b) for b in loader)
    return n / (time.perf_counter() - start), n / (_tree_cpu() - cpu)


def _before(on: bool) -> None:
    """The streamed path as it read before 2026-11-29 (``--ab``), or as it reads now."""
    windows_read._ORDER_CACHE = on
    windows_stream._ADMIT_PER_FIELD = on


def _chunkio_epoch(path: Path, per_chunk: int, hold_bytes: int = 0) -> dict[str, float]:
    """One epoch in this process: chunks decoded per stored chunk when streamed (``hold_bytes``
    below the store: at the defaults the arrays are read whole once, amplification 1 over
    all epochs together), and time spread."""
    loader = chunkio.make_loader(_chunkio(path), BATCH, num_workers=0, seed=1,
                                 workers=chunkio.Workers(hold_bytes=hold_bytes))  # fmt: skip
    spreads = [float(np.std(np.asarray(t, dtype=float))) for _, _, t in loader]
    stats = loader.dataset.read_stats()
    loader.close()
    chunks = sum(stats.per_field.get(f"v_{v}", 0) for v in VARS)
    if not stats.per_field:  # a stack within the pool, read whole once: no per-field counts
        chunks = stats.chunks_read
    steps = zarr.open_group(path, mode="r")["t2m"].shape[0]
    return {
        "amplification": chunks / (len(VARS) * -(-steps // per_chunk)),
        "time_std": float(np.mean(spreads)),
    }


def _insitubatch(path: Path, budget_s: float) -> dict[str, Any]:
    if not INSITU.exists():
        return {"skipped": f"no Python 3.12 venv with insitubatch at {INSITU}"}
    script = Path(__file__).with_name("insitubatch_windows.py")
    done = subprocess.run([str(INSITU), str(script), str(path), str(BATCH), str(budget_s)],
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    if done.returncode:
        return {"skipped": f"insitubatch failed: {done.stderr.strip().splitlines()[-1:]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _uniform_std(n: int) -> float:
    rng = np.random.default_rng(0)
    return float(np.mean([np.std(rng.choice(n, BATCH, replace=False)) for _ in range(200)]))


def measure(
    path: Path,
    per_chunk: int,
    budget_s: float,
    loaders: frozenset[str] = LOADERS,
    hold_bytes: int | None = None,
    ab: bool = False,
    reverse: bool = False,
) -> dict[str, Any]:
    """Every loader's row on the store at ``path`` (chunkio's rows in reverse order when
    ``reverse``: ``--rounds`` alternates them)."""
    steps = zarr.open_group(path, mode="r")["t2m"].shape[0]
    rates: dict[str, float] = {}
    per_cpu: dict[str, float] = {}
    epoch_batches = (steps - 2) // BATCH
    held = _chunkio(path).held_nbytes()
    beyond = held // 2 if hold_bytes is None else hold_bytes
    # at the defaults the store fits hold_bytes: the workers read it whole before their first
    # batches and serve every later batch from memory; past the budget (and with
    # hold_bytes=0) they stream it, each chunk decoded once per pass (later epochs timed apart)
    runs = {"chunkio": chunkio.Workers(), "chunkio, hold_bytes=0": chunkio.Workers(hold_bytes=0),
            "chunkio, beyond memory": chunkio.Workers(hold_bytes=beyond)}  # fmt: skip
    if ab:
        runs[BEFORE] = chunkio.Workers(hold_bytes=beyond)
    for name, workers in _ordered(runs, reverse):
        _before(name == BEFORE)  # the workers fork with it
        loader = chunkio.make_loader(_chunkio(path), BATCH, num_workers=WORKERS, seed=0,
                                     workers=workers)  # fmt: skip
        first = _first_epoch(loader)
        rates[f"{name}, first epoch"], per_cpu[f"{name}, first epoch"] = first
        rates[name], per_cpu[name] = timed(loader, budget_s=budget_s, warmup=epoch_batches)
        loader.close()
        _before(False)
    name = "per-sample zarr-python"
    if "zarr" in loaders:
        naive = DataLoader(PerSampleWindows(str(path)), batch_size=BATCH, shuffle=True,
                           num_workers=WORKERS, persistent_workers=True)  # fmt: skip
        rates[name], per_cpu[name] = timed(naive, budget_s=budget_s, warmup=2)
    if "xbatcher" in loaders:
        xb = DataLoader(XbatcherWindows(str(path)), batch_size=BATCH, shuffle=True,
                        num_workers=WORKERS, persistent_workers=True)  # fmt: skip
        rates["xbatcher"], per_cpu["xbatcher"] = timed(xb, budget_s=budget_s, warmup=2)
    insitu = (_insitubatch(path, budget_s) if "insitubatch" in loaders
              else {"skipped": "not asked for (--loaders)"})  # fmt: skip
    if "samples_per_s" in insitu:
        rates["insitubatch"] = insitu["samples_per_s"]
        rates["insitubatch, first epoch"] = insitu["first_epoch_samples_per_s"]
        per_cpu["insitubatch"] = insitu["samples_per_cpu_s"]
        per_cpu["insitubatch, first epoch"] = insitu["first_epoch_samples_per_cpu_s"]
    ours = _chunkio_epoch(path, per_chunk)
    streamed = _chunkio_epoch(path, per_chunk, beyond)["amplification"]
    if ab:
        _before(True)
        before = _chunkio_epoch(path, per_chunk, beyond)["amplification"]
        _before(False)
    # a per-sample reader decodes the chunk of each of its 9 rows: 3 per step, per_chunk x
    # as many as the epoch needs
    amplification = {"chunkio, hold_bytes=0": ours["amplification"],
                     "chunkio, beyond memory": streamed,
                     "per-sample zarr-python": 3.0 * per_chunk,
                     "xbatcher": 3.0 * per_chunk}  # fmt: skip
    if ab:
        amplification[BEFORE] = before
    amplification = {k: v for k, v in amplification.items() if k in rates}
    spread = {"chunkio": ours["time_std"], "uniform shuffle": _uniform_std(steps - 2)}
    if "time_std" in insitu:
        spread["insitubatch"] = insitu["time_std"]
    return {
        "steps": steps,
        "steps_per_chunk": per_chunk,
        "held_bytes": held,
        "beyond_memory_hold_bytes": beyond,
        "samples_per_s": rates,
        "samples_per_cpu_s": per_cpu,
        "gb_per_s": {k: v * SAMPLE_BYTES / 1e9 for k, v in rates.items()},
        "amplification": amplification,
        "time_std": spread,
        "insitubatch": insitu,
    }


def _ordered(runs: dict[str, Any], reverse: bool) -> list[tuple[str, Any]]:
    """``runs``' rows in order, or reversed (every other round of ``--rounds``)."""
    items = list(runs.items())
    return items[::-1] if reverse else items


def at_scale(
    path: Path, budget_s: float, ab: bool = False, reverse: bool = False, warm_epochs: int = 3
) -> dict[str, Any]:
    """The defaults and ``hold_bytes=0`` on a larger store (``--scale``): first epoch and
    later epochs (after ``warm_epochs`` untimed ones), samples/s and samples per CPU-second;
    ``ab``: the defaults also with nothing held past the budget (the whole stack streamed, as
    before the held part); ``reverse``: the rows in reverse order."""
    steps = zarr.open_group(path, mode="r")["t2m"].shape[0]
    found: dict[str, Any] = {"steps": steps, "held_bytes": _chunkio(path).held_nbytes(),
                             "samples_per_s": {}, "samples_per_cpu_s": {}}  # fmt: skip
    runs = {"chunkio": chunkio.Workers(), "chunkio, hold_bytes=0": chunkio.Workers(hold_bytes=0)}
    if ab:
        runs[BEFORE_SCALE] = chunkio.Workers()
    for name, workers in _ordered(runs, reverse):
        windows_read._ORDER_CACHE = name == BEFORE_SCALE  # the workers fork with it
        loader = chunkio.make_loader(_chunkio(path), BATCH, num_workers=WORKERS, seed=0,
                                     workers=workers)  # fmt: skip
        for key, (rate, cpu) in [
            (f"{name}, first epoch", _first_epoch(loader)),
            (name, timed(loader, budget_s=budget_s, warmup=warm_epochs * ((steps - 2) // BATCH))),
        ]:
            found["samples_per_s"][key], found["samples_per_cpu_s"][key] = rate, cpu
        loader.close()
        windows_read._ORDER_CACHE = False
    return found


def run(
    *,
    steps: int = 2920,
    budget_s: float = 6.0,
    quick: bool = False,
    per_chunk: tuple[int, ...] = (1, 24),
    loaders: frozenset[str] = LOADERS,
    hold_bytes: int | None = None,
    ab: bool = False,
    scale: int | None = None,
    store_dir: Path | None = None,
    rounds: int = 1,
    scale_warm_epochs: int = 3,
) -> dict[str, Any]:
    """Every row ``rounds`` times (every other round in reverse order), after reading every
    store once; figures are the medians over the rounds (``"ranges"``: min and max, and each
    round's own under ``"rounds"``), targets checked on the median of their per-round ratios."""
    if quick:
        steps, budget_s = min(steps, 730), 2.0
    out: dict[str, Any] = {"steps": steps, "shape": list(SHAPE), "batch": BATCH,
                           "workers": WORKERS, "rounds": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if store_dir is None else store_dir
        paths = [(era_store(root, steps, k), k) for k in per_chunk]
        big = era_store(root, scale, per_chunk[-1]) if scale else None
        # the same page-cache state for every row: each store read once before any is timed
        stores = [p for p, _ in paths] + ([big] if big is not None else [])
        out["warmed_bytes"] = sum(warm(p) for p in stores)
        for r in range(max(1, rounds)):
            reverse = r % 2 == 1
            found: dict[str, Any] = {}
            if big is not None and reverse:
                found["scale"] = at_scale(big, budget_s, ab, True, scale_warm_epochs)
            found["stores"] = [
                measure(p, k, budget_s, loaders, hold_bytes, ab, reverse=reverse)
                for p, k in (paths[::-1] if reverse else paths)
            ][:: -1 if reverse else 1]
            if big is not None and not reverse:
                found["scale"] = at_scale(big, budget_s, ab, False, scale_warm_epochs)
            found["checks"] = checks(found["stores"], found.get("scale"))
            out["rounds"].append(found)
    done = out["rounds"]
    out["stores"] = [_medians([d["stores"][i] for d in done]) for i in range(len(paths))]
    if big is not None:
        out["scale"] = _medians([d["scale"] for d in done])
    out["checks"] = _median_checks([d["checks"] for d in done])
    return out


#: the figures ``--rounds`` reports as medians and ranges
_FIGURES = ("samples_per_s", "samples_per_cpu_s", "gb_per_s", "amplification")


def _medians(found: list[dict[str, Any]]) -> dict[str, Any]:
    """One store's results over the rounds: each figure's median, its ``[min, max]`` under
    ``"ranges"``; the rest as the first round found it."""
    out = dict(found[0])
    out["ranges"], out["counts"] = {}, {}
    for figure in _FIGURES:
        names = dict.fromkeys(k for f in found for k in f.get(figure, {}))
        if not names:
            continue
        # a row some rounds lack (a peer that failed once): the median of those that have it
        values = {k: [f[figure][k] for f in found if k in f.get(figure, {})] for k in names}
        out[figure] = {k: float(np.median(v)) for k, v in values.items()}
        out["ranges"][figure] = {k: [min(v), max(v)] for k, v in values.items()}
        out["counts"][figure] = {k: len(v) for k, v in values.items()}
    return out


def _median_checks(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each target checked on the median of its per-round measures (their range and count
    kept beside it)."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for found in rounds:  # by name: a round whose peer failed has fewer checks
        for c in found:
            by_target.setdefault(c["target"], []).append(c)
    merged = []
    for same in by_target.values():
        values = [c["measured"] for c in same]
        first = same[0]
        one = check(first["target"], float(np.median(values)), first["required"],
                    at_most=first["at_most"])  # fmt: skip
        one["range"] = [min(values), max(values)]
        one["rounds"] = values
        one["of"] = len(rounds)
        merged.append(one)
    return merged


def checks(
    stores: list[dict[str, Any]], scale: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    found = []
    if scale is not None:
        r, n = scale["samples_per_s"], scale["steps"]
        held = stores[-1]["samples_per_s"]["chunkio"]
        found.append(check(f"windows at {n:,} steps (defaults) / held at {stores[-1]['steps']:,}",
                           r["chunkio"] / held, 0.5))  # fmt: skip
        for when in ("", ", first epoch"):
            found.append(check(f"windows at {n:,} steps: defaults / hold_bytes=0{when}",
                               r[f"chunkio{when}"] / r[f"chunkio, hold_bytes=0{when}"],
                               1.0))  # fmt: skip
    for s in stores:
        r, k = s["samples_per_s"], s["steps_per_chunk"]
        if "insitubatch" in r:
            found.append(check(f"windows, {k}/chunk: chunkio / insitubatch (each at defaults)",
                               r["chunkio"] / r["insitubatch"], 2.0))  # fmt: skip
            c = s["samples_per_cpu_s"]
            found.append(check(f"windows, {k}/chunk: chunkio / insitubatch per CPU-second",
                               c["chunkio"] / c["insitubatch"], 2.0))  # fmt: skip
            found.append(check(f"windows, {k}/chunk: chunkio / insitubatch, first epochs",
                               r["chunkio, first epoch"] / r["insitubatch, first epoch"],
                               2.0))  # fmt: skip
            found.append(check(f"windows, {k}/chunk: beyond memory / insitubatch's first epoch",
                               r["chunkio, beyond memory"] / r["insitubatch, first epoch"],
                               2.0))  # fmt: skip
        # the default (held) path is never slower than turning holding off, epoch for epoch
        for when in ("", ", first epoch"):
            found.append(check(f"windows, {k}/chunk: defaults / hold_bytes=0{when}",
                               r[f"chunkio{when}"] / r[f"chunkio, hold_bytes=0{when}"],
                               1.0))  # fmt: skip
        found.append(check(f"windows, {k}/chunk: beyond memory / held (later epochs)",
                           r["chunkio, beyond memory"] / r["chunkio"], 0.5))  # fmt: skip
        found.append(check(f"windows, {k}/chunk: read amplification beyond memory",
                           s["amplification"]["chunkio, beyond memory"], 1.2,
                           at_most=True))  # fmt: skip
        if "per-sample zarr-python" in r:
            found.append(check(f"windows, {k}/chunk: chunkio / per-sample zarr-python",
                               r["chunkio"] / r["per-sample zarr-python"], 20.0))  # fmt: skip
        found.append(check(f"windows, {k}/chunk: chunkio read amplification (pool only)",
                           s["amplification"]["chunkio, hold_bytes=0"], 1.1,
                           at_most=True))  # fmt: skip
    return found


def table(result: dict[str, Any]) -> str:
    h, w = result.get("shape", SHAPE)
    total = len(result.get("rounds", [])) or 1
    lines = [
        f"ERA5-like store by xarray: 3 variables x {result['steps']} steps x {h}x{w} float32; "
        f"window t-1, t + target t+1; batch {BATCH}, {WORKERS} workers; beyond memory: "
        + ", ".join(
            f"hold_bytes {s['beyond_memory_hold_bytes'] / 2**20:,.0f} MiB < "
            f"{s['held_bytes'] / 2**20:,.0f} MiB decoded"
            for s in result["stores"][:1]
        ),
        "",
        "| steps/chunk | loader | samples/s | x chunkio | samples/CPU-s | GB/s delivered | "
        "read amplification |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in result["stores"]:
        ours = s["samples_per_s"]["chunkio"]
        for name, rate in s["samples_per_s"].items():
            amp = s["amplification"].get(name)
            shown = "" if amp is None else f"{amp:.2f}"
            cpu = s["samples_per_cpu_s"].get(name)
            per_s = _ranged(s, "samples_per_s", name, total)
            per_cpu = "" if cpu is None else _ranged(s, "samples_per_cpu_s", name, total)
            lines.append(f"| {s['steps_per_chunk']} | {name} | {per_s} | {rate / ours:.3f} | "
                         f"{per_cpu} | "
                         f"{s['gb_per_s'][name]:.2f} | {shown} |")  # fmt: skip
        spread = ", ".join(f"{k} {v:.0f}" for k, v in s["time_std"].items())
        k = s["steps_per_chunk"]
        lines.append(f"| {k} | std of anchor times per batch | {spread} | | | | |")
        if "skipped" in s["insitubatch"]:
            lines.append(
                f"| {s['steps_per_chunk']} | insitubatch | {s['insitubatch']['skipped']} | | | | |"
            )
    scale = result.get("scale")
    if scale is not None:
        held = result["stores"][-1]["samples_per_s"]["chunkio"]
        lines += [
            "",
            f"At {scale['steps']:,} steps ({scale['held_bytes'] / 2**20:,.0f} MiB "
            "decoded), the same loaders:",
            "",
            "| loader | samples/s | x held at --steps | samples/CPU-s |",
            "|---|---|---|---|",
        ]
        for name, rate in scale["samples_per_s"].items():
            per_s = _ranged(scale, "samples_per_s", name, total)
            per_cpu = _ranged(scale, "samples_per_cpu_s", name, total)
            lines.append(f"| {name} | {per_s} | {rate / held:.3f} | {per_cpu} |")
    rounds = len(result.get("rounds", [])) or 1
    if rounds > 1:
        lines += ["", f"Medians of {rounds} rounds (every other round in reverse order), "
                  "ranges in brackets; targets on the median of each per-round ratio:"]  # fmt: skip
    lines += ["", *check_lines(result["checks"])]
    return "\n".join(lines)


def _ranged(found: dict[str, Any], figure: str, name: str, rounds: int = 1) -> str:
    """A figure as ``median [min-max]`` over ``--rounds`` (alone for one round), and over how
    many where fewer than ``rounds`` measured it."""
    value = found[figure][name]
    span = found.get("ranges", {}).get(figure, {}).get(name)
    count = found.get("counts", {}).get(figure, {}).get(name, rounds)
    fewer = f" ({count} of {rounds} rounds)" if count < rounds else ""
    if span is None or span[0] == span[1]:
        return f"{value:,.0f}{fewer}"
    return f"{value:,.0f} [{span[0]:,.0f}-{span[1]:,.0f}]{fewer}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=2920)
    parser.add_argument("--budget", type=float, default=6.0)
    parser.add_argument(
        "--per-chunk", type=int, nargs="+", default=[1, 24],
        help="steps per chunk of the stores to measure (default: 1 24)",
    )  # fmt: skip
    parser.add_argument("--shape", type=int, nargs=2, default=list(SHAPE),
                        help="each variable's (lat, lon) size (default: 64 128)")  # fmt: skip
    parser.add_argument("--hold-bytes", type=int, default=None,
                        help="the beyond-memory row's Workers(hold_bytes), below the store's "
                        "decoded size (default: half of it)")  # fmt: skip
    parser.add_argument("--scale", type=int, default=None,
                        help="also the defaults and hold_bytes=0 on a store of this many "
                        "steps (e.g. 100000: past the default budget)")  # fmt: skip
    parser.add_argument("--store-dir", type=Path, default=None,
                        help="keep the stores here and reuse them (default: a temporary "
                        "directory)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every row this many times, every other round in "
                        "reverse order; report medians and ranges (default: 1)")  # fmt: skip
    parser.add_argument("--scale-warm-epochs", type=int, default=3,
                        help="untimed epochs past the first before --scale's later epochs "
                        "are timed (default: 3)")  # fmt: skip
    parser.add_argument("--ab", action="store_true",
                        help="also the beyond-memory row as read before 2026-11-29")  # fmt: skip
    parser.add_argument(
        "--loaders", default=",".join(sorted(LOADERS)),
        help=f"comma-separated: chunkio and any of {sorted(LOADERS)} (default: all)",
    )  # fmt: skip
    args = parser.parse_args()
    loaders = frozenset(args.loaders.split(","))
    if not loaders <= LOADERS or "chunkio" not in loaders:
        parser.error(f"--loaders: chunkio and any of {sorted(LOADERS)}; got {args.loaders}")
    if args.scale_warm_epochs < 1:
        parser.error(f"--scale-warm-epochs: at least 1; got {args.scale_warm_epochs}")
    set_shape(*args.shape)
    result = run(steps=args.steps, budget_s=args.budget, quick=args.quick,
                 per_chunk=tuple(args.per_chunk), loaders=loaders,
                 hold_bytes=args.hold_bytes, ab=args.ab, scale=args.scale,
                 store_dir=args.store_dir, rounds=args.rounds,
                 scale_warm_epochs=args.scale_warm_epochs)  # fmt: skip
    print(table(result))
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
