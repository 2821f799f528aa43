"""``chunkio doctor``: how fast can this dataset be read here, and is training data-bound?

:func:`run_doctor` reads a fixed number of batches through :func:`chunkio.make_loader` for
each worker count (0, 1, ..., cores) and batch size, so its runtime is bounded whatever the
dataset's size. Given the model's step time it says whether training would wait for data and
recommends ``num_workers``, ``batch_size`` and a mixing pool (``pool_bytes``), showing for each
pool what it costs and what training sees: read amplification, chunk mixing and, with an integer
``label`` field, distinct labels per batch against a uniform shuffle
(:func:`chunkio.sampling.sampler.describe_sampler`). :func:`main_doctor` renders
the report as text (the ``chunkio doctor`` command prints it), ending with which compiled
accelerations are active (:func:`compiled_parts_section`).

On a store chunkio did not write (``fields`` names its arrays) it also judges the store's
chunking and measures what a rewrite would gain (:mod:`chunkio.diagnose.doctor_chunking`).

The step time is taken to scale with the batch size (a constant number of samples per second
for the model), which holds for compute-bound steps of the batch sizes measured here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..dataset import DEFAULT_PRELOAD_BYTES, ChunkDataset
from ..format.foreign import FieldSelection
from ..loader import DEFAULT_POOL_BYTES, Ordering, default_num_workers, make_loader, pool_samples
from ..sampling.label_check import labels_of
from ..sampling.sampler import describe_sampler
from .doctor_chunking import ChunkingAdvice, advise_chunking
from .doctor_data import dataset_codecs, sample_nbytes

__all__ = ["DoctorReport", "Measurement", "PoolOption", "main_doctor", "run_doctor"]

DEFAULT_BATCH_SIZES = (64, 256)
#: a setting must deliver this much more than the model consumes to count as "not data-bound":
#: throughput measured over a few batches is optimistic and the training process needs CPU too
HEADROOM = 1.2
#: with 0 workers reading adds to every step: it must be this much faster than the model
SERIAL_FACTOR = 20.0
#: a pool is acceptable if its read amplification stays at or below this
MAX_AMPLIFICATION = 1.1
#: decoded chunks a recommended pool may keep, over all readers
MAX_POOL_BYTES = 512 * 2**20
#: pools compared, as multiples of the default
POOL_FACTORS = (0.25, 1, 4)


@dataclass(frozen=True)
class Measurement:
    """Throughput of one (workers, batch size) setting over ``batches`` timed batches."""

    num_workers: int
    batch_size: int
    batches: int
    seconds: float
    samples_per_s: float
    mb_per_s: float
    #: seconds from a fresh loader to its first batch (worker start-up and cold chunk reads)
    first_batch_s: float = 0.0


@dataclass(frozen=True)
class PoolOption:
    """Read amplification and mixing of one mixing pool; ``label_ratio`` is distinct labels
    per batch against a uniform shuffle (``None`` without an integer ``label`` field)."""

    pool_bytes: int
    read_amplification: float
    chunk_diversity: float
    label_ratio: float | None


@dataclass(frozen=True)
class DoctorReport:
    """What :func:`run_doctor` measured and recommends; :meth:`render` gives the text report."""

    path: str
    format: str
    num_samples: int
    samples_per_chunk: int
    sample_nbytes: int
    cores: int
    measurements: tuple[Measurement, ...]
    pools: tuple[PoolOption, ...]
    step_time: float | None
    step_batch_size: int
    required_samples_per_s: float | None
    data_bound: bool | None
    recommended_workers: int
    recommended_batch_size: int
    recommended_pool_bytes: int
    notes: tuple[str, ...]
    #: a store chunkio did not write whose chunking slows reads: measured, with the rewrite
    chunking: ChunkingAdvice | None = None

    def best(self, batch_size: int | None = None) -> Measurement:
        """The fastest measurement (at ``batch_size`` if given)."""
        candidates = [m for m in self.measurements if batch_size in (None, m.batch_size)]
        return max(candidates or self.measurements, key=lambda m: m.samples_per_s)

    def render(self) -> str:
        """The report as plain text."""
        mb = self.sample_nbytes * self.samples_per_chunk / 2**20
        lines = [
            f"chunkio doctor: {self.path}",
            f"  {self.format}, {self.num_samples} samples, {self.samples_per_chunk} per chunk "
            f"({mb:.1f} MiB decoded per chunk), {self.sample_nbytes} bytes per sample; "
            f"{self.cores} cores",
            "",
            "  workers  batch   samples/s      MB/s  (batches timed)",
        ]
        pick = (self.recommended_workers, self.recommended_batch_size)
        for m in self.measurements:
            mark = "  <- recommended" if (m.num_workers, m.batch_size) == pick else ""
            lines.append(
                f"  {m.num_workers:7d} {m.batch_size:6d} {m.samples_per_s:11,.0f} "
                f"{m.mb_per_s:9,.1f}  ({m.batches}){mark}"
            )
        lines += [
            "",
            "  pool (MiB)  read amplification  chunk mixing  labels per batch vs uniform",
        ]
        for p in self.pools:
            labels = "-" if p.label_ratio is None else f"{p.label_ratio:.0%}"
            lines.append(
                f"  {p.pool_bytes / 2**20:10.0f} {p.read_amplification:19.3f} "
                f"{p.chunk_diversity:13.2f}  {labels:>27}"
            )
        lines += ["", *_verdict(self), *(f"  note: {n}" for n in self.notes)]
        if self.chunking is not None:
            lines += ["", *self.chunking.render()]
        return "\n".join(lines)


def _verdict(report: DoctorReport) -> list[str]:
    required = report.required_samples_per_s
    # without a step time the fastest row of the table, whatever its batch size
    best = report.best(None if required is None else report.step_batch_size)
    lines = []
    if required is None:
        lines.append(
            f"  fastest: {_rate(best.samples_per_s)} samples/s at batch {best.batch_size} with "
            f"{best.num_workers} workers (pass --step-time S to compare with your model)"
        )
    else:
        state = "not data-bound"
        if report.data_bound:
            short = best.samples_per_s < required
            state = "DATA-BOUND" if short else f"DATA-BOUND (less than {HEADROOM:g}x headroom)"
        lines.append(
            f"  model needs {_rate(required)} samples/s "
            f"(batch {report.step_batch_size} every {report.step_time:g} s); best loader "
            f"setting gives {_rate(best.samples_per_s)}: {state}"
        )
    lines.append(
        f"  recommended: make_loader(..., batch_size={report.recommended_batch_size}, "
        f"num_workers={report.recommended_workers}, "
        f"ordering=chunkio.Ordering(pool_bytes={report.recommended_pool_bytes}))"
    )
    return lines


def _check_counts(name: str, values: Sequence[int], minimum: int) -> tuple[int, ...]:
    out = tuple(values)
    bad = [v for v in out if isinstance(v, bool) or not isinstance(v, int) or v < minimum]
    if not out or bad:
        raise ValueError(
            f"{name} must be a non-empty sequence of ints >= {minimum}, got {values!r}"
        )
    return tuple(sorted(set(out)))


def _batch_len(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    elif isinstance(batch, tuple | list) and batch and not hasattr(batch, "shape"):
        batch = batch[0]
    return len(batch)


def _measure(
    ds: ChunkDataset,
    *,
    num_workers: int,
    batch_size: int,
    batches: int,
    budget_s: float,
    nbytes: int,
    pool_bytes: int = DEFAULT_POOL_BYTES,
) -> Measurement:
    """Time ``batches`` batches (or ``budget_s``) after two untimed ones (worker start-up),
    and the first one apart. The pool holds at least one decoded chunk (make_loader's floor)."""
    pool = max(pool_bytes, ds.chunk_nbytes())
    ordering = Ordering(pool_bytes=pool)
    with make_loader(ds, batch_size, num_workers=num_workers, seed=0, ordering=ordering) as loader:
        it = _endless(loader)
        start = time.perf_counter()
        next(it)
        first = time.perf_counter() - start
        next(it)
        n = done = 0
        start = time.perf_counter()
        while done < batches and time.perf_counter() - start < budget_s:
            n += _batch_len(next(it))
            done += 1
        seconds = max(time.perf_counter() - start, 1e-9)
        it.close()
    rate = n / seconds
    return Measurement(num_workers, batch_size, done, seconds, rate, rate * nbytes / 1e6, first)


def _endless(loader: Any) -> Any:
    while True:
        yield from loader


def _pools(ds: ChunkDataset, batch_size: int, workers: int) -> tuple[PoolOption, ...]:
    sizes = ds.chunk_sizes()
    labels = labels_of(ds.label_source())
    chunk = sum(f.sample_nbytes for f in ds.layout.fields) * ds.samples_per_chunk
    candidates = sorted({max(chunk, int(DEFAULT_POOL_BYTES * f)) for f in POOL_FACTORS})
    out = []
    for pool_bytes in candidates:
        d = describe_sampler(
            sizes,
            batch_size,
            readers=max(1, workers),
            pool=pool_samples(ds, pool_bytes, batch_size),
            labels=labels,
        )
        out.append(
            PoolOption(
                pool_bytes=pool_bytes,
                read_amplification=d["read_amplification"],
                chunk_diversity=d["chunk_diversity"],
                label_ratio=None if labels is None else d["distinct_labels_ratio"],
            )
        )
    return tuple(out)


def _pick_pool(pools: Sequence[PoolOption], *, data_bound: bool | None) -> int:
    """The pool that mixes best within the amplification and memory limits; when data-bound,
    the one that reads least."""
    if data_bound:
        return min(pools, key=lambda p: (p.read_amplification, p.pool_bytes)).pool_bytes
    ok = [
        p
        for p in pools
        if p.read_amplification <= MAX_AMPLIFICATION and p.pool_bytes <= MAX_POOL_BYTES
    ]
    if not ok:
        return pools[0].pool_bytes

    def mixing(p: PoolOption) -> tuple[float, int]:
        score = p.chunk_diversity if p.label_ratio is None else p.label_ratio
        return (round(score, 2), -p.pool_bytes)  # ties: the smaller pool

    return max(ok, key=mixing).pool_bytes


def _keeps_up(m: Measurement, required: float) -> bool:
    # Without workers, reading is not overlapped with the model's step: it only "keeps up" if
    # it adds at most 1/SERIAL_FACTOR to each step.
    factor = SERIAL_FACTOR if m.num_workers == 0 else HEADROOM
    return m.samples_per_s >= factor * required


def _recommend(
    measurements: Sequence[Measurement],
    required: float | None,
    step_batch_size: int,
    codecs: Sequence[str] = (),
) -> tuple[bool | None, int, int, list[str]]:
    """(data_bound, workers, batch_size, notes) from the measurements; ``codecs``: those of
    the arrays read (a faster codec is advised only where one is used)."""
    if required is None:  # no model to keep up with: the fastest row of the table
        overall = max(measurements, key=lambda m: m.samples_per_s)
        return None, overall.num_workers, overall.batch_size, []
    at_size = [m for m in measurements if m.batch_size == step_batch_size]
    fastest = max(at_size, key=lambda m: m.samples_per_s)
    enough = [m for m in at_size if _keeps_up(m, required)]
    if enough:
        # fewest workers that keep up: the other cores stay with the training process
        pick = min(enough, key=lambda m: (m.num_workers, -m.samples_per_s))
        return False, pick.num_workers, step_batch_size, []
    notes = [
        f"no setting at batch {step_batch_size} delivers {HEADROOM:g}x the "
        f"{_rate(required)} samples/s the model consumes (0 workers: {SERIAL_FACTOR:g}x, "
        "since reading then adds to every step)"
    ]
    overall = max(measurements, key=lambda m: m.samples_per_s)
    if overall.batch_size != step_batch_size and overall.samples_per_s > fastest.samples_per_s:
        notes.append(
            f"batch {overall.batch_size} reads faster ({_rate(overall.samples_per_s)} samples/s); "
            "a larger batch changes optimisation, so retune the learning rate if you switch"
        )
    notes.append(_ceiling_note(codecs))
    return True, fastest.num_workers, step_batch_size, notes


#: codecs that decode about as fast as memory copies: no faster one to advise
FAST_CODECS = frozenset({"lz4", "blosc-lz4", "none"})


def _ceiling_note(codecs: Sequence[str]) -> str:
    """What raises the read ceiling: a faster codec only where a slower one is used."""
    slow = sorted(set(codecs) - FAST_CODECS)
    codec = f", a faster codec (lz4, not {', '.join(slow)})" if slow else ""
    return (
        f"more cores{codec} or larger chunks raise the ceiling; compare them with "
        "benchmarks/bench_codecs.py"
    )


def _pace(m: Measurement) -> tuple[float, float]:
    """(seconds to the first batch, then seconds per batch) of a measurement."""
    return m.first_batch_s, m.batch_size / max(m.samples_per_s, 1e-12)


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def run_doctor(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    step_time: float | None = None,
    step_batch_size: int | None = None,
    worker_counts: Sequence[int] | None = None,
    batch_sizes: Sequence[int] | None = None,
    batches_per_setting: int = 20,
    budget_s_per_setting: float = 3.0,
    fields: FieldSelection | None = None,
    preload_bytes: int = DEFAULT_PRELOAD_BYTES,
    pool_bytes: int = DEFAULT_POOL_BYTES,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> DoctorReport:
    """Measure read throughput of the dataset at ``path`` and judge it against ``step_time``.

    Parameters
    ----------
    path
        A chunkio dataset (``.zarr`` directory or ``.h5`` file, or a Zarr URL such as
        ``s3://bucket/train.zarr``), or any HDF5 file or Zarr store with ``fields``.
    step_time
        The model's seconds per training step at ``step_batch_size``; ``None``: no verdict.
    step_batch_size
        Batch size ``step_time`` refers to; default the largest of ``batch_sizes``.
    worker_counts
        Default ``0, 1, ..., cores`` (at most 8).
    batch_sizes
        Default ``(64, 256)``.
    batches_per_setting, budget_s_per_setting
        Each setting times this many batches, stopping early after this many seconds (plus
        the loader's start-up and two untimed batches), which bounds the runtime.
    fields
        The fields to read, as :class:`~chunkio.ChunkDataset` takes them (default: every
        field); required for a store chunkio did not write, whose chunking is then judged.
    preload_bytes
        As for :class:`~chunkio.ChunkDataset`: fields at most this large are read once per
        process (their chunking is not judged).
    pool_bytes
        The mixing pool throughput is measured with (:func:`~chunkio.make_loader`'s); a
        chunk larger than a reader's share of it is decoded again for every batch.
    storage_options, trust_codecs
        As for :class:`~chunkio.ChunkDataset`: fsspec options for a URL; allow codecs,
        filters and links chunkio does not consider safe.

    Returns
    -------
    DoctorReport

    Raises
    ------
    ValueError
        A non-positive ``step_time`` or bad worker counts / batch sizes.
    chunkio.errors.ChunkioError
        The dataset cannot be opened (missing, incomplete, unsupported).
    """
    if step_time is not None and not step_time > 0:
        raise ValueError(f"step_time must be a positive number of seconds, got {step_time!r}")
    cores = default_num_workers()
    workers = _check_counts("worker_counts", worker_counts or range(cores + 1), 0)
    sizes = _check_counts("batch_sizes", batch_sizes or DEFAULT_BATCH_SIZES, 1)
    ref = max(sizes) if step_batch_size is None else step_batch_size
    if ref not in sizes:
        raise ValueError(f"step_batch_size must be one of batch_sizes {sizes}, got {ref!r}")
    many = isinstance(path, list | tuple)  # several files read as one dataset
    paths: list[Any] = list(path) if isinstance(path, list | tuple) else [path]
    location: Any = [os.fspath(p) for p in paths] if many else os.fspath(paths[0])
    ds = ChunkDataset(
        location,
        fields=fields,
        preload_bytes=preload_bytes,
        storage_options=storage_options,
        trust_codecs=trust_codecs,
    )
    nbytes = sample_nbytes(ds)

    def measure(dataset: ChunkDataset, w: int, b: int) -> Measurement:
        return _measure(
            dataset,
            num_workers=w,
            batch_size=b,
            batches=batches_per_setting,
            budget_s=budget_s_per_setting,
            nbytes=nbytes,
            pool_bytes=pool_bytes,
        )

    measurements = tuple(measure(ds, w, b) for b in sizes for w in workers)
    required = None if step_time is None else ref / step_time
    codecs = dataset_codecs(ds)
    data_bound, rec_workers, rec_batch, notes = _recommend(measurements, required, ref, codecs)
    if any(ds.layout.field(f).sample_shape is None for f in ds.fields):
        notes.append(
            "fields of samples of several shapes (ragged, images of several sizes) are not "
            "counted in MB/s and cache sizes"
        )
    if ds.chunk_nbytes() > pool_bytes:
        notes.append(
            f"one decoded chunk ({ds.chunk_nbytes() / 2**20:.1f} MiB) is larger than pool_bytes "
            f"({pool_bytes / 2**20:.1f} MiB): make_loader needs pool_bytes >= one chunk, and it "
            "was measured so"
        )
    pools = _pools(ds, rec_batch, rec_workers)
    chunking = None
    if ds.layout.foreign and fields is not None and not many:  # per store: one file
        serial = [m for m in measurements if (m.num_workers, m.batch_size) == (0, ref)]
        chunking = advise_chunking(
            ds,
            fields,
            batch_size=ref,
            samples_read=ref * (batches_per_setting + 2),
            measure=lambda dataset: _pace(measure(dataset, 0, ref)),
            source=_pace(serial[0]) if serial else None,
            preload_bytes=preload_bytes,
            storage_options=storage_options,
        )
    return DoctorReport(
        path=" + ".join(location) if many else location,
        format=ds.format,
        num_samples=len(ds),
        samples_per_chunk=ds.samples_per_chunk,
        sample_nbytes=nbytes,
        cores=cores,
        measurements=measurements,
        pools=pools,
        step_time=step_time,
        step_batch_size=ref,
        required_samples_per_s=required,
        data_bound=data_bound,
        recommended_workers=rec_workers,
        recommended_batch_size=rec_batch,
        recommended_pool_bytes=_pick_pool(pools, data_bound=data_bound),
        notes=tuple(notes),
        chunking=chunking,
    )


def main_doctor(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    step_time: float | None = None,
    worker_counts: Sequence[int] | None = None,
    batch_sizes: Sequence[int] | None = None,
    fields: FieldSelection | None = None,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> str:
    """Run :func:`run_doctor` with its defaults and return the rendered text report."""
    report = run_doctor(
        path,
        step_time=step_time,
        worker_counts=worker_counts,
        batch_sizes=batch_sizes,
        fields=fields,
        storage_options=storage_options,
        trust_codecs=trust_codecs,
    )
    return f"{report.render()}\n\n{compiled_parts_section()}"


def compiled_parts_section() -> str:
    """The report's last section: each compiled acceleration active, or missing (chunkio then
    computes the same values, slower) with the fix (:func:`chunkio.testing.compiled.report`)."""
    from ..testing.compiled import report

    return "\n".join(["  compiled parts:", *(f"    {line}" for line in report())])
