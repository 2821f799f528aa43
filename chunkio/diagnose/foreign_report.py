"""``chunkio info`` and ``chunkio verify`` on stores chunkio did not write.

Any HDF5 file or Zarr store (v2 or v3, sharded or not) is described array by array; ``fields``
(as :class:`~chunkio.ChunkDataset` takes it) adds what a dataset over those arrays would read.
``verify`` decodes every chunk of the arrays, one chunk at a time, and names each failure by
array path and chunk grid coordinates. A chunk never written is not a failure there: it reads
as the array's fill value, which is how Zarr (and HDF5) define it, so such chunks are listed as
information. Nothing is written to the store.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..backends import ArrayInfo, Reader, detect_format
from ..format.foreign import batchable, order_field
from ..format.grid import SampleGrid
from ..format.sparse import SparseInfo
from ..format.store_layout import StoreLayout
from ..util.numeric import ceil_div
from .describe import describe_array, size_on_disk
from .verify_report import MissingChunks, Problem, VerifyReport

__all__ = ["FIELDS_HINT", "MISSING_SHOWN", "foreign_info", "verify_foreign"]

#: never-written chunks listed by coordinates, per array (the rest are counted)
MISSING_SHOWN = 5

#: how to read a store chunkio did not write: what ``info`` says without ``fields``
FIELDS_HINT = (
    "not a chunkio dataset: name the arrays to read with --fields NAME=PATH ... (or bare "
    "array paths), e.g. --fields image=train/images label=train/labels; in Python "
    "ChunkDataset(path, fields={'image': 'train/images', 'label': 'train/labels'})"
)


def foreign_info(
    reader: Reader, path: Any, found: StoreLayout, preload_bytes: int
) -> dict[str, Any]:
    """Describe a store chunkio did not write as a JSON-ready dict (``found``: its layout,
    as :func:`~chunkio.format.store_layout.open_layout` read it with ``preload_bytes``).

    Keys: ``path``, ``format``, ``chunkio_dataset`` (false), ``arrays`` (path -> as
    :func:`~chunkio.diagnose.describe.describe_array`, plus ``compression_ratio``),
    ``unreadable``
    (path -> why chunkio cannot open it), ``nbytes``, ``stored_nbytes``, ``compression_ratio``,
    ``size_on_disk`` and ``hint``. With ``fields``: ``num_samples``, ``samples_per_chunk`` and
    ``num_chunks`` of the chunk-aware order, ``order_field`` (the field it follows) and
    ``fields`` (name -> array, dtype, sample shape, chunks, samples and bytes per chunk);
    without, those are ``None``.
    """
    arrays: dict[str, Any] = {}
    unreadable: dict[str, str] = {}
    for name in reader.array_names():
        try:
            a = describe_array(reader, name)
        except Exception as err:  # a refused codec or link: say so, describe the rest
            unreadable[name] = f"{type(err).__name__}: {' '.join(str(err).split())}"
            continue
        a["compression_ratio"] = _ratio(a["nbytes"], a["stored_nbytes"])
        arrays[name] = a
    nbytes = sum(a["nbytes"] for a in arrays.values())
    stored = sum(a["stored_nbytes"] or 0 for a in arrays.values())
    out: dict[str, Any] = {
        "path": reader.location,
        "format": detect_format(path),
        "chunkio_dataset": False,
        "arrays": arrays,
        "unreadable": unreadable,
        "nbytes": nbytes,
        "stored_nbytes": stored,
        "compression_ratio": _ratio(nbytes, stored),
        "size_on_disk": size_on_disk(path),
        "hint": None if found.layout is not None else FIELDS_HINT,
    }
    return {**out, **_fields_info(found, preload_bytes)}


def _ratio(nbytes: int, stored: int | None) -> float | None:
    return round(nbytes / stored, 3) if stored else None


def _fields_info(found: StoreLayout, preload_bytes: int) -> dict[str, Any]:
    """The fields a dataset over the named arrays reads, and the order it follows."""
    layout, infos = found.layout, found.arrays
    if layout is None:
        return dict.fromkeys(
            ("num_samples", "samples_per_chunk", "num_chunks", "order_field", "fields")
        )
    described = {}
    sparse = [f for f in layout.fields if isinstance(f, SparseInfo)]
    for f in sparse:  # rows of a CSR group: no array of its own
        described[f.name] = {
            "array": f.group,
            "dtype": str(f.dtype),
            "sample_shape": [f.n_cols],
            "chunks": [f.data_chunk],  # values per chunk of data and indices
            "samples_per_chunk": layout.samples_per_chunk,  # on average: rows vary in length
            "chunk_nbytes": f.data_chunk * f.dtype.itemsize,
            "compression": None,
            "sparse": "csr",
            "nnz": f.nnz,
        }
    for info in layout.fields:
        if info.name in described:
            continue
        a = infos[info.name]
        described[info.name] = {
            "array": a.name,
            "dtype": str(a.dtype),
            "sample_shape": list(a.shape[1:]),
            "chunks": list(a.chunks),
            "samples_per_chunk": int(a.chunks[0]),
            "chunk_nbytes": _chunk_nbytes(a),
            "compression": None if a.compression is None else str(a.compression),
        }
    return {
        "num_samples": layout.num_samples,
        "samples_per_chunk": layout.samples_per_chunk,
        "num_chunks": len(layout.order_sizes)
        if layout.order_sizes is not None
        else SampleGrid(layout.num_samples, layout.samples_per_chunk).num_chunks,
        "order_field": sparse[0].name
        if sparse
        else order_field(infos, preload_bytes=preload_bytes),
        "fields": {f.name: described[f.name] for f in layout.fields},
    }


def _chunk_nbytes(a: ArrayInfo) -> int:
    return int(np.prod(a.chunks, dtype=np.int64)) * a.dtype.itemsize


def verify_foreign(
    reader: Reader,
    found: StoreLayout,
    report: VerifyReport,
    on_chunk: Callable[[], None] | None,
) -> None:
    """Read every chunk of the arrays ``found`` names (its layout, when ``fields`` named
    arrays; without, every numeric array of at least one axis) into ``report``. The dataset's
    own checks came first, in :func:`~chunkio.format.store_layout.open_layout` (a missing array is a
    :class:`~chunkio.errors.MissingFieldError` listing the arrays)."""
    if found.layout is not None:
        names = list(dict.fromkeys(n for f in found.layout.fields for n in f.array_names()))
    else:
        names = list(_checkable(reader, report))
    for name in names:
        _verify_array(reader, name, report, on_chunk)


def _checkable(reader: Reader, report: VerifyReport) -> Iterator[str]:
    """Every array verify can read; the others noted (or, when refused, a problem)."""
    for name in reader.array_names():
        try:
            a = reader.array_info(name)
        except Exception as err:  # an unsafe codec or link: chunkio will not read it
            report.problems.append(Problem(f"cannot be opened: {err}", name))
            continue
        if not a.shape or not batchable(a.dtype):
            report.notes.append(f"array {name!r} not read ({a.dtype}, shape {a.shape})")
            continue
        yield name


def _verify_array(
    reader: Reader, name: str, report: VerifyReport, on_chunk: Callable[[], None] | None
) -> None:
    """Every chunk of one array: stored ones decoded, never-written ones counted."""
    a = reader.array_info(name)
    report.arrays += 1
    grid = [ceil_div(n, c) if c else 0 for n, c in zip(a.shape, a.chunks, strict=True)]
    missing: list[tuple[int, ...]] = []
    total = 0
    for coords in itertools.product(*map(range, grid)):
        total += 1
        box = tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(coords, a.chunks, a.shape, strict=True)
        )
        try:
            if not reader.chunk_exists(name, coords):
                missing.append(coords)
                continue
            report.chunks += 1
            reader.read_region(name, box, np.empty([s.stop - s.start for s in box], a.dtype))
        except Exception as err:  # verify reports whatever a read raises, then goes on
            report.problems.append(Problem(f"{type(err).__name__}: {err}", name, coords))
        finally:
            if on_chunk is not None:
                on_chunk()
    if missing:
        first = tuple(missing[:MISSING_SHOWN])
        report.missing.append(MissingChunks(name, len(missing), total, first))
