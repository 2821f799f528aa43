"""Look inside a dataset: :func:`info` describes it, :func:`verify` reads all of it.

Both also take stores chunkio did not write (any HDF5 file or Zarr store), whose arrays
``fields`` names as :class:`~chunkio.ChunkDataset` takes it
(:mod:`chunkio.diagnose.foreign_report`).

``verify`` is the check to run after copying a dataset or when a training job reports a bad
chunk: it decodes every chunk of every array through the same backend reader training uses
(so checksums are checked: crc32c in Zarr, fletcher32 in HDF5), one chunk at a time (memory is
one chunk), and lists every problem instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..backends import ArrayInfo, Reader, detect_format, open_reader
from ..errors import ChunkReadError
from ..format.grid import SampleGrid
from ..format.layout import COMPLETE_KEY, DatasetLayout, FieldInfo, check_arrays, label_field
from ..format.store_layout import DEFAULT_PRELOAD_BYTES, LayoutOptions, StoreLayout, open_layout
from ..util.numeric import ceil_div
from .describe import decoded_nbytes, describe_array, size_on_disk
from .verify_report import MissingChunks, Problem, VerifyReport

__all__ = ["MissingChunks", "Problem", "VerifyReport", "describe_array", "info", "verify"]


#: how the reports open a store: whatever is there is described (an incomplete dataset, a
#: user's store without ``fields``), with the dataset's default order (``preload_bytes``)
_DESCRIBE = LayoutOptions(preload_bytes=DEFAULT_PRELOAD_BYTES, strict=False)


def _open(
    path: Any,
    fields: Mapping[str, str] | Sequence[str] | None,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> tuple[Reader, StoreLayout]:
    reader = open_reader(path, storage_options=storage_options, trust_codecs=trust_codecs)
    try:
        return reader, open_layout(reader, fields, _DESCRIBE)
    except Exception:
        reader.close()
        raise


def info(
    path: Any,
    *,
    fields: Mapping[str, str] | Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> dict[str, Any]:
    """Describe the dataset at ``path`` as a JSON-ready dict (``storage_options``,
    ``trust_codecs``: as for :class:`~chunkio.ChunkDataset`).

    A store chunkio did not write (any HDF5 file or Zarr store) is described by
    :func:`chunkio.diagnose.foreign_report.foreign_info`: every array, and with ``fields`` (as
    :class:`~chunkio.ChunkDataset` takes it) the fields a dataset would read. On a chunkio
    dataset ``fields`` is not used: every field is described.

    Keys: ``path``, ``format``, ``complete``, ``num_samples``, ``samples_per_chunk``,
    ``num_chunks``, ``class_names``, ``fields`` (name -> dtype, sample shape, kind),
    ``arrays`` (name -> shape, dtype, chunks, ``compression``, codecs, checksum, bytes,
    stored bytes), ``compression`` (the distinct ``arrays[...]["compression"]["name"]``),
    ``nbytes`` (decoded: an encoded image field counts its pixels, not the region its encoded
    bytes are kept in), ``stored_nbytes`` (chunk bytes), ``compression_ratio``,
    ``size_on_disk`` (every file, metadata included; ``None`` when not local) and ``extra``.
    An incomplete dataset is described too (``complete`` is false).

    ``compression`` names codecs as :class:`~chunkio.backends.Compression` does: ``codec``
    (``"lz4"``, ``"zstd"``, ``"blosc-lz4"``, ``"blosc-zstd"``, ``"gzip"``, ``"none"``),
    ``level`` (``None`` where the format keeps none), ``checksum`` (``"crc32c"``,
    ``"fletcher32"`` or ``None``) and ``name``, e.g. ``"lz4(5)+crc32c"``; ``codecs`` keeps the
    backend's own description (Zarr codec JSON, HDF5 filter names).

    Examples
    --------
    >>> import numpy as np
    >>> from chunkio import Output, write_arrays
    >>> _ = write_arrays("memory://info-doc", {"x": np.zeros((8, 4), "u1")},
    ...                  output=Output(chunks=4))
    >>> d = info("memory://info-doc")
    >>> d["num_samples"], d["num_chunks"], d["arrays"]["x"]["chunks"], d["complete"]
    (8, 2, [4, 4], True)
    >>> d["arrays"]["x"]["compression"]["codec"]
    'lz4'
    """
    reader, found = _open(path, fields, storage_options, trust_codecs)
    try:
        if found.foreign:
            from .foreign_report import foreign_info

            return foreign_info(reader, path, found, _DESCRIBE.preload_bytes)
        layout = found.dataset_layout()  # attributes that do not parse: the error
        arrays = {name: describe_array(reader, name) for name in reader.array_names()}
        nbytes = decoded_nbytes(reader, layout, arrays)  # an encoded image: its pixels
        stored = sum(a["stored_nbytes"] or 0 for a in arrays.values())
        return {
            "path": reader.location,
            "format": detect_format(path),
            "chunkio_dataset": True,
            "complete": found.complete,
            "num_samples": layout.num_samples,
            "samples_per_chunk": layout.samples_per_chunk,
            "num_chunks": SampleGrid(layout.num_samples, layout.samples_per_chunk).num_chunks,
            "class_names": _class_names(layout),
            "fields": {f.name: f.to_json() for f in layout.fields},
            "arrays": arrays,
            "compression": sorted(
                {a["compression"]["name"] for a in arrays.values() if a["compression"]}
            ),
            "nbytes": nbytes,
            "stored_nbytes": stored,
            "compression_ratio": round(nbytes / stored, 3) if stored else None,
            "size_on_disk": size_on_disk(path),
            "extra": dict(layout.extra),
        }
    finally:
        reader.close()


def _class_names(layout: DatasetLayout) -> list[str] | None:
    """The dataset's class names, or its label field's categories (a dataset converted from
    a store with categorical labels records them there)."""
    if layout.class_names is not None:
        return list(layout.class_names)
    label = label_field(layout)
    return None if label is None or label.categories is None else list(label.categories)


def verify(
    path: Any,
    *,
    fields: Mapping[str, str] | Sequence[str] | None = None,
    on_chunk: Callable[[], None] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
) -> VerifyReport:
    """Read every chunk of every array of the dataset at ``path`` and report all problems.

    A store chunkio did not write is read by
    :func:`chunkio.diagnose.foreign_report.verify_foreign`: every chunk of the arrays ``fields``
    names
    (default: every numeric array), each decode error named by array and chunk coordinates;
    never-written chunks are listed in ``report.missing`` (they read as the fill value, which
    is valid there). On a chunkio dataset ``fields`` (a list of field names) restricts the
    check to those fields.

    Checks, in order: the format attributes parse; the completion marker is set; every
    declared array exists with the declared shape, dtype and chunking; every chunk is present
    (a missing chunk would otherwise read back as zeros) and decodes (checksums included);
    ragged offsets and shapes agree with each other and with the values; labels lie within
    the class names.

    Parameters
    ----------
    path
        The dataset (a ``.zarr`` directory, an ``.h5`` file, ...).
    fields
        The arrays (or fields) to read, as :class:`~chunkio.ChunkDataset` takes them.
    on_chunk
        Called after each chunk is read (for a progress bar).
    storage_options, trust_codecs
        As for :class:`~chunkio.ChunkDataset`.

    Returns
    -------
    VerifyReport
        ``report.ok`` is true when nothing is wrong; ``report.problems`` lists the rest.

    Raises
    ------
    DatasetNotFoundError
        Nothing exists at ``path``.
    MissingFieldError
        ``fields`` names an array or field that is not there (the message lists them).
    """
    reader, found = _open(path, fields, storage_options, trust_codecs)
    report = VerifyReport(reader.location)
    try:
        if found.foreign:
            from .foreign_report import verify_foreign

            verify_foreign(reader, found, report, on_chunk)
            return report
        layout = found.layout
        if layout is None:  # attributes that do not parse
            report.problems.append(Problem(str(found.error)))
            return report
        if not found.complete:
            report.problems.append(
                Problem(f"no {COMPLETE_KEY!r} marker: the conversion did not finish")
            )
        present = set(reader.array_names())
        chosen = layout.fields
        if fields is not None:
            chosen = tuple(layout.field(str(n), where=reader.location) for n in fields)
        for f in chosen:
            _verify_field(reader, layout, f, present, report, on_chunk)
    finally:
        reader.close()
    return report


def _verify_field(
    reader: Reader,
    layout: DatasetLayout,
    f: FieldInfo,
    present: set[str],
    report: VerifyReport,
    on_chunk: Callable[[], None] | None,
) -> None:
    missing = [name for name in f.array_names() if name not in present]
    for name in missing:
        report.problems.append(Problem(f"declared by field {f.name!r} but absent", name))
    if missing:
        return
    try:
        arrays = {n: _shape_dtype_chunks(reader.array_info(n)) for n in f.array_names()}
        single = DatasetLayout(layout.num_samples, layout.samples_per_chunk, (f,))
        check_arrays(single, arrays, where=reader.location)
    except Exception as err:  # a malformed array: report it, check the other fields
        report.problems.append(Problem(str(err), f.name))
        return
    roles = f.roles
    if roles.has("spans"):  # encoded images: spans into the bytes, and the decoded shapes
        _verify_encoded(reader, f, report, on_chunk)
        return
    whole = {name: _read_chunks(reader, name, report, on_chunk) for name in f.array_names()}

    if roles.has("offsets"):  # runs of flat values: a ragged field's, a sparse field's rows
        _check_ragged(f, whole, int(reader.array_info(roles.values).shape[0]), report)
        if roles.has("indices"):  # then a sparse field's columns
            _check_columns(f, whole, report)
    elif f.name == "label" and layout.class_names is not None and whole["label"] is not None:
        _check_labels(whole["label"], len(layout.class_names), report)


def _shape_dtype_chunks(a: ArrayInfo) -> tuple[tuple[int, ...], np.dtype[Any], tuple[int, ...]]:
    return a.shape, a.dtype, a.chunks


#: arrays at most this large are kept whole during verify for cross-checks (offsets, labels)
_KEEP_BYTES = 64 << 20


def _read_chunks(
    reader: Reader,
    name: str,
    report: VerifyReport,
    on_chunk: Callable[[], None] | None,
) -> np.ndarray[Any, Any] | None:
    """Read ``name`` chunk by chunk; return it whole when small and sound, else None."""
    a = reader.array_info(name)
    report.arrays += 1
    grid = SampleGrid(int(a.shape[0]), int(a.chunks[0]) if a.chunks else 1)
    keep = a.nbytes <= _KEEP_BYTES
    whole = np.empty(a.shape, a.dtype) if keep else None
    buf = np.empty((grid.samples_per_chunk, *a.shape[1:]), a.dtype)
    sound = True
    for chunk in range(grid.num_chunks):
        start, stop = grid.bounds(chunk)
        report.chunks += 1
        try:
            if not reader.chunk_exists(name, chunk):
                raise ChunkReadError("missing from the store (would read back as zeros)")
            reader.read_into(name, [(start, stop)], buf[: stop - start])
        except ChunkReadError as err:
            report.problems.append(Problem(str(err), name, chunk))
            sound = False
        except Exception as err:  # verify reports whatever a read raises, then goes on
            report.problems.append(Problem(f"{type(err).__name__}: {err}", name, chunk))
            sound = False
        else:
            if whole is not None:
                whole[start:stop] = buf[: stop - start]
        if on_chunk is not None:
            on_chunk()
    return whole if sound else None


def _check_ragged(
    f: FieldInfo,
    whole: dict[str, np.ndarray[Any, Any] | None],
    values_len: int,
    report: VerifyReport,
) -> None:
    offsets_name, shapes_name = f.roles.offsets, f.roles.shapes
    offsets, shapes = whole[offsets_name], whole[shapes_name]
    if offsets is None or shapes is None:
        return  # unreadable or too large to cross-check; read errors are already listed
    steps = np.diff(offsets)
    if (offsets.size and offsets[0] < 0) or np.any(steps < 0):
        report.problems.append(Problem("offsets do not increase from >= 0", offsets_name))
        return
    if offsets.size and offsets[-1] > values_len:
        report.problems.append(
            Problem(
                f"offsets end at {int(offsets[-1])}, past the {values_len} values", offsets_name
            )
        )
    sizes = np.prod(shapes, axis=1) if shapes.ndim == 2 else None
    if sizes is None or len(sizes) != len(steps):
        report.problems.append(Problem(f"shape {shapes.shape} does not match offsets", shapes_name))
        return
    # Offsets may leave padding after a sample (chunk alignment), never overlap the next one.
    _report_samples(
        report,
        np.flatnonzero(sizes > steps),
        "sample(s) larger than the room their offsets leave",
        lambda i: f"shape {shapes[i].tolist()} but {int(steps[i])} values",
        shapes_name,
    )


def _check_columns(
    f: FieldInfo, whole: dict[str, np.ndarray[Any, Any] | None], report: VerifyReport
) -> None:
    """A native sparse field's columns lie inside its matrix (padding holds zeros)."""
    indices_name, offsets_name = f.roles.indices, f.roles.offsets
    indices, offsets = whole[indices_name], whole[offsets_name]
    if indices is None or offsets is None or not offsets.size:
        return
    n_cols = int((f.sample_shape or (0,))[0])
    bad = np.flatnonzero((indices < 0) | (indices >= n_cols))
    rows = np.searchsorted(offsets[:-1], bad, side="right") - 1
    _report_samples(
        report,
        np.unique(rows),
        f"row(s) with a column outside the {n_cols} columns",
        lambda i: f"column {int(indices[bad[np.argmax(rows == i)]])}",
        indices_name,
    )


def _report_samples(
    report: VerifyReport,
    bad: np.ndarray[Any, Any],
    what: str,
    detail: Callable[[int], str],
    name: str,
) -> bool:
    """One problem for the samples ``bad`` of array ``name``: how many, and the first in detail.

    Returns whether there were any.
    """
    if not bad.size:
        return False
    i = int(bad[0])
    report.problems.append(Problem(f"{bad.size} {what}; first: sample {i}, {detail(i)}", name))
    return True


def _verify_encoded(
    reader: Reader, f: FieldInfo, report: VerifyReport, on_chunk: Callable[[], None] | None
) -> None:
    """An encoded field: spans and shapes whole; the bytes chunks the spans use (the unused
    rest of each region is never written); every image decoded to its recorded shape."""
    from ..images.decoders import image_decoder

    data_name, spans_name, shapes_name = f.roles.bytes, f.roles.spans, f.roles.shapes
    spans = _read_chunks(reader, spans_name, report, on_chunk)
    shapes = _read_chunks(reader, shapes_name, report, on_chunk)
    if spans is None or shapes is None:
        return
    data = reader.array_info(data_name)
    length, step = int(data.shape[0]), int(data.chunks[0])
    if _report_samples(
        report,
        np.flatnonzero((spans[:, 0] < 0) | (spans[:, 1] <= spans[:, 0]) | (spans[:, 1] > length)),
        f"span(s) outside the {length} bytes or empty",
        lambda i: f"{spans[i].tolist()}",
        spans_name,
    ):
        return
    order = np.argsort(spans[:, 0], kind="stable")
    if np.any(spans[order][1:, 0] < spans[order][:-1, 1]):
        report.problems.append(Problem("samples' byte spans overlap", spans_name))
    decoder = image_decoder(f.encoding)  # type: ignore[arg-type]
    grid = SampleGrid(length, step)
    used = sorted({c for a, b in spans.tolist() for c in range(a // step, ceil_div(b, step))})
    chunks: dict[int, np.ndarray[Any, Any]] = {}
    for chunk in used:
        report.chunks += 1
        a, b = grid.bounds(chunk)
        buf = np.empty(b - a, np.uint8)
        try:
            if not reader.chunk_exists(data_name, chunk):
                raise ChunkReadError("missing from the store (its images cannot be read)")
            reader.read_into(data_name, [(a, b)], buf)
            chunks[chunk] = buf
        except Exception as err:
            report.problems.append(Problem(f"{type(err).__name__}: {err}", data_name, chunk))
        if on_chunk is not None:
            on_chunk()
    report.arrays += 1
    undecodable = []
    for i, ((a, b), shape) in enumerate(zip(spans.tolist(), shapes.tolist(), strict=True)):
        needed = range(a // step, ceil_div(b, step))
        if any(c not in chunks for c in needed):
            continue  # its chunk's problem is listed already
        parts = [chunks[c] for c in needed]
        whole = np.concatenate(parts) if len(parts) > 1 else parts[0]
        base = (a // step) * step
        try:
            image = decoder.decode(whole[a - base : b - base])
            got = image.shape if image.ndim == 3 else (*image.shape, 1)
            want = (shape[1], shape[2], shape[0])
            if got != want:
                raise ValueError(f"decodes to {got[:2]} x {got[2]} channels, not {want}")
        except Exception as err:
            undecodable.append(f"sample {i}: {err}")
    if undecodable:
        report.problems.append(
            Problem(
                f"{len(undecodable)} image(s) do not decode to their recorded shape; first: "
                f"{undecodable[0]}",
                data_name,
            )
        )


def _check_labels(labels: np.ndarray[Any, Any], num_classes: int, report: VerifyReport) -> None:
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        report.problems.append(
            Problem(
                f"{bad.size} label(s) outside [0, {num_classes}) for {num_classes} class names; "
                f"first at sample {int(bad[0])}: {labels[bad[0]]}",
                "label",
            )
        )
