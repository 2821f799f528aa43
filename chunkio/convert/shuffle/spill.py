"""The external (two-pass) write-time shuffle of sources larger than memory.

A shuffled conversion stores source sample ``perm[i]`` at row ``i``
(:mod:`chunkio.convert.shuffle.order`). Building each destination block by reading its rows from
a chunked, compressed source would decode most source chunks for every block: work
``O(source^2 / block)``. :class:`ExternalShuffle` does it in two passes instead, with a few
blocks in memory whatever the source's size:

1. *Spill* (:class:`SpillJob`, parallel, one task per source block): read the source in its
   own order, ``[a, b)`` at a time (aligned to its chunks, so each chunk is decoded once),
   sort the rows by their destination row ``inv[s]`` (``inv`` the inverse of ``perm``) and
   write them to one spill file per source block, ``spill/<k>.rows``::

       offsets   int64 x (buckets + 1)   where each destination bucket's rows start
       field 0   rows sorted by destination row, (b - a) x sample bytes
       field 1   ...

   A sparse field (CSR rows, :mod:`chunkio.convert.engine.sparse`) takes, in its place:
   ``int64 x (buckets + 1)`` where each bucket's values start, ``int64 x (b - a)`` values
   per row, then the rows' values and their columns, each flat, sorted by destination row.
   Each kind's part is written and read back by its class in :mod:`.spill_kinds`.

   A destination bucket is :attr:`SpillPlan.bucket` consecutive rows: one block of pass 2.
   The file is written beside itself and renamed into place once synced, so a spill file that
   exists is complete: a rerun skips it.
2. *Gather* (:class:`SpilledSource`, the blocks of the normal conversion): destination block
   ``[i, j)`` takes from each spill file the piece of its bucket (one ``pread`` per field),
   and scatters it to the rows whose source lies in that file's source block. The block
   manifest of the conversion records finished blocks as for any conversion.

The spill lives in the destination's staging directory (``<staging>/spill``, never beside the
source), or, for destinations written in place (URLs, memory), in the temporary directory under
a name made from the source, the destination and the plan (:func:`spill_folder`), so that a
rerun finds it there too. It is removed once every block is written; an interrupted
conversion leaves it for its rerun. It holds the source's decoded size on disk while the
conversion runs.

Memory, per process, whatever the source's size: a pass-1 task holds its source block twice
(decoded, then one field sorted at a time) and its rows' destinations (8 bytes a row); a
pass-2 task holds its destination block, one piece, and its rows' sources (8 bytes a row).
Each takes its slice of the order from :class:`~chunkio.convert.shuffle.order.StoredOrder`:
computed for the slice (above :data:`~chunkio.convert.shuffle.order.WHOLE_ORDER_MAX` samples),
else numpy's permutation and its inverse held whole (16 bytes a sample, 64 MiB at most). The
plan (kept by every process) holds 8 bytes per source block and, per sparse field, 8 more;
each spill file starts with 8 bytes per destination bucket. On disk the spill holds the
source's decoded size (sparse fields: their values and columns, and 8 bytes a row).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...format.layout import FieldInfo
from ...util.fsync import fsync_path
from ..durability.staging import Destination, StagedDestination
from ..engine.blocks import Block
from ..engine.core import drive
from ..options import ConversionOptions, Progress
from .order import SOURCE_INDEX, ShuffledSource, StoredOrder
from .spill_kinds import spill_kind

__all__ = [
    "ExternalShuffle",
    "SpillJob",
    "SpillPlan",
    "SpilledSource",
    "spill_folder",
    "staged_source",
]

_SUFFIX = ".rows"


@dataclass(frozen=True)
class SpillPlan:
    """How pass 1 cuts the source (``bounds``: source block ``k`` is ``[bounds[k],
    bounds[k+1])``) and pass 2 the destination (buckets of ``bucket`` rows)."""

    num_samples: int
    seed: int
    bounds: tuple[int, ...]
    bucket: int
    row_bytes: tuple[int, ...]
    #: per sparse field (in field order): its stored values in each source block
    values: tuple[tuple[int, ...], ...] = ()
    #: per sparse field: bytes of one stored value and its column
    value_bytes: tuple[int, ...] = ()
    #: the order's method (:class:`~chunkio.convert.shuffle.order.StoredOrder`), decided once
    method: str = "numpy"

    def order(self) -> StoredOrder:
        return StoredOrder(self.num_samples, self.seed, method=self.method)

    @property
    def buckets(self) -> int:
        return max(1, -(-self.num_samples // self.bucket))

    def to_json(self) -> dict[str, Any]:
        return {
            "num_samples": self.num_samples,
            "seed": self.seed,
            # a spill sorted in numpy's order is not one sorted in the keyed order
            "order": self.method,
            "bounds": list(self.bounds),
            "bucket": self.bucket,
            "row_bytes": list(self.row_bytes),
            "values": [list(v) for v in self.values],
            "value_bytes": list(self.value_bytes),
        }


@dataclass(frozen=True)
class SourceBlock:
    """Pass-1 task: source samples ``[start, stop)``, spilled to file ``index``."""

    index: int
    start: int
    stop: int

    def describe(self) -> str:
        return f"shuffle pass, source samples {self.start}..{self.stop - 1}"


def _spill_path(folder: str, index: int) -> str:
    return os.path.join(folder, f"{index}{_SUFFIX}")


def _spill_size(plan: SpillPlan, index: int) -> int:
    rows = plan.bounds[index + 1] - plan.bounds[index]
    size = 8 * (plan.buckets + 1) + rows * sum(plan.row_bytes)
    for values, nbytes in zip(plan.values, plan.value_bytes, strict=True):
        size += 8 * (plan.buckets + 1) + values[index] * nbytes
    return size


class SpillJob:
    """Pass 1: a worker reads a source block in order and spills it sorted by destination."""

    def __init__(self, source: Any, fields: Sequence[FieldInfo], plan: SpillPlan, folder: str):
        self.source, self.fields, self.plan, self.folder = source, tuple(fields), plan, folder
        self.order = plan.order()

    def run(self, task: SourceBlock) -> int:
        data = self.source.read_block(task.start, task.stop)
        dest = self.order.positions(task.start, task.stop)
        order = np.argsort(dest, kind="stable")
        edges = np.arange(self.plan.buckets + 1, dtype=np.int64) * self.plan.bucket
        offsets = np.searchsorted(dest[order], edges).astype(np.int64)
        final = _spill_path(self.folder, task.index)
        tmp = f"{final}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(offsets.tobytes())
            for f in self.fields:  # one field at a time: its sorted copy, then the next's
                spill_kind(f).write(fh, f, data.pop(f.name), order, offsets)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        return task.stop - task.start

    def written(self, result: Any) -> bool:
        return True  # the worker wrote its spill file itself


class _SpillSink:
    def write(self, task: SourceBlock, result: int) -> None:  # never called: see written
        raise RuntimeError(f"{task.describe()}: spill files are written by the workers")

    def done(self, task: SourceBlock, result: int) -> int:
        return result


class SpilledSource:
    """Pass 2: the shuffled samples, read back from the spill (a picklable block source)."""

    def __init__(self, shuffle: ExternalShuffle, plan: SpillPlan, folder: str) -> None:
        self.num_samples = shuffle.num_samples
        self.fields = shuffle.fields
        self._fingerprint = shuffle.fingerprint()
        self.stored = shuffle.source.fields
        self.plan, self.folder = plan, folder
        self.order = plan.order()
        self._bounds = np.asarray(plan.bounds, dtype=np.int64)

    def fingerprint(self) -> str:
        return self._fingerprint

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        gathers = {f.name: spill_kind(f).gather(f, stop - start) for f in self.stored}
        bucket = self.plan.bucket
        sources = []  # the source samples of each bucket's rows, in stored order
        for b in range(start // bucket, (stop - 1) // bucket + 1):
            lo, hi = b * bucket, min((b + 1) * bucket, self.num_samples)
            sources.append(self.order.rows(lo, hi))
            blocks = np.searchsorted(self._bounds, sources[-1], side="right") - 1
            order = np.argsort(blocks, kind="stable")  # rows of each source block, increasing
            cuts = np.searchsorted(blocks[order], np.arange(len(self._bounds)))
            for k in np.unique(blocks).tolist():
                rows = lo + order[cuts[k] : cuts[k + 1]]
                keep = (rows >= start) & (rows < stop)
                for name, piece in self._piece(k, b).items():
                    gathers[name].put(rows[keep] - start, keep, piece)
        out = {name: gather.result() for name, gather in gathers.items()}
        first = start // bucket * bucket
        out[SOURCE_INDEX] = np.concatenate(sources)[start - first : stop - first]
        return out

    def _piece(self, index: int, bucket: int) -> dict[str, Any]:
        """The rows of spill file ``index`` that go to destination bucket ``bucket``."""
        plan = self.plan
        count = plan.bounds[index + 1] - plan.bounds[index]
        fd = os.open(_spill_path(self.folder, index), os.O_RDONLY)
        try:
            lo, hi = np.frombuffer(os.pread(fd, 16, 8 * bucket), dtype=np.int64).tolist()
            base = 8 * (plan.buckets + 1)
            out: dict[str, Any] = {}
            with_values = 0  # the fields whose values are counted (plan.values)
            for f, size in zip(self.stored, plan.row_bytes, strict=True):
                kind = spill_kind(f)
                nnz = vbytes = 0
                if kind.has_values:
                    nnz, vbytes = plan.values[with_values][index], plan.value_bytes[with_values]
                    with_values += 1
                sizes = (count, nnz, plan.buckets, size)
                out[f.name] = kind.piece(fd, f, base, sizes, (lo, hi, bucket))
                base += kind.part_bytes(count, nnz, vbytes, plan.buckets, size)
            return out
        finally:
            os.close(fd)


class ExternalShuffle(ShuffledSource):
    """A :class:`~chunkio.convert.shuffle.order.ShuffledSource` converted in two passes.

    Same order, fields and fingerprint; the conversion pipeline runs pass 1 through
    :func:`staged_source` and writes its blocks from the :class:`SpilledSource` it returns
    (``read_block`` here still reads rows directly: fine for a few rows, slow for blocks).
    ``source`` reads blocks in its own order (``read_block``); ``read_samples``: samples per
    source block of pass 1 (whole chunks of the source); ``spill_samples``: samples per
    destination bucket of pass 2 (the conversion's blocks).
    """

    def __init__(self, source: Any, seed: int, *, read_samples: int, spill_samples: int) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"ExternalShuffle needs an int seed (a shuffled order); got {seed!r}")
        super().__init__(source, seed)
        self.spill_seed = seed
        self.read_samples, self.spill_samples = int(read_samples), int(spill_samples)

    def spill_plan(self) -> SpillPlan:
        n = self.num_samples
        bounds = (*range(0, n, self.read_samples), n) if n else (0, 0)
        row_bytes = tuple(spill_kind(f).row_bytes(f) for f in self.source.fields)
        values, value_bytes = [], []
        for f in self.source.fields:
            kind = spill_kind(f)
            if kind.has_values:  # its values in each source block, from its rows' counts
                counts, nbytes = kind.values(f, self.source, bounds)
                values.append(counts)
                value_bytes.append(nbytes)
        return SpillPlan(
            n,
            self.spill_seed,
            bounds,
            self.spill_samples,
            row_bytes,
            tuple(values),
            tuple(value_bytes),
            self.order.method,
        )


@contextlib.contextmanager
def staged_source(
    source: Any, dest: Destination, todo: Sequence[Block], options: ConversionOptions
) -> Iterator[Any]:
    """The source the blocks ``todo`` are read from: ``source`` itself, or, for an
    :class:`ExternalShuffle`, the spill that pass 1 (run here, resumably) leaves; the spill
    is removed once the caller's writes succeed."""
    if not isinstance(source, ExternalShuffle) or not todo:
        yield source
        return
    plan = source.spill_plan()
    folder = spill_folder(source, dest, plan)
    _open_spill(folder, plan)
    _spill(source, plan, folder, dest, options)
    yield SpilledSource(source, plan, folder)
    shutil.rmtree(folder, ignore_errors=True)  # kept when the writes fail: a rerun resumes


def spill_folder(source: ExternalShuffle, dest: Destination, plan: SpillPlan) -> str:
    """Where pass 1 spills: the destination's staging folder; for a destination written in
    place (a URL, ``memory://``), a folder in the temporary directory named by the source,
    the destination and the plan, so that a rerun of an interrupted conversion finds it (and
    removes it when done) instead of leaving one spill per attempt."""
    if isinstance(dest, StagedDestination):
        return os.path.join(dest.staging, "spill")
    key = json.dumps([source.fingerprint(), repr(dest.location), plan.to_json()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"chunkio-spill-{digest}")


def _open_spill(folder: str, plan: SpillPlan) -> None:
    """Keep a spill of the same plan (a resumed conversion), else start it afresh."""
    record = os.path.join(folder, "spill.json")
    try:
        with open(record, encoding="utf-8") as fh:
            if json.load(fh) == plan.to_json():
                for name in os.listdir(folder):  # a killed pass 1's partial files
                    if name.endswith(".tmp"):
                        os.remove(os.path.join(folder, name))
                return
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(record + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(plan.to_json(), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(record + ".tmp", record)
    fsync_path(folder)


def _spill(
    source: ExternalShuffle,
    plan: SpillPlan,
    folder: str,
    dest: Destination,
    options: ConversionOptions,
) -> None:
    tasks = []
    done = 0
    for k in range(len(plan.bounds) - 1):
        path = _spill_path(folder, k)
        a, b = plan.bounds[k], plan.bounds[k + 1]
        if os.path.isfile(path) and os.path.getsize(path) == _spill_size(plan, k):
            done += b - a
        else:
            tasks.append(SourceBlock(k, a, b))
    progress = Progress(
        total=plan.num_samples,
        unit="sample",
        label=f"{os.path.basename(dest.display.rstrip('/')) or dest.display}: shuffle pass",
        show=options.execution.progress,
        done=done,
        scale=True,
    )
    job = SpillJob(source.source, source.source.fields, plan, folder)
    drive(
        job,
        tasks,
        execution=options.execution,
        sink=_SpillSink(),
        progress=progress,
        destination=dest.display,
    )
    fsync_path(folder)
