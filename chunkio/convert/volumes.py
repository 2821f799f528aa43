"""Convert 3-D volumes - TIFF stacks, NIfTI (``.nii``/``.nii.gz``), ``.npy``/``.npz`` - into a
chunkio *volume dataset*, chunked along every spatial axis for patch reads.

Layout (details in :mod:`chunkio.format.volume_layout`): when every volume has the same shape they
are *stacked* - field ``image`` of shape ``(N, [C,] D, H, W)`` chunked ``(1, [C,] 64, 64,
64)`` and field ``label`` ``(N, D, H, W)``, one volume per sample - otherwise each volume is
its own field (``image_000``, ``label_000``, ...) of shape ``(1, [C,] D_k, H_k, W_k)``.
``extra["volumes"]`` records shapes, chunking, each volume's source files, voxel spacing,
affine and orientation (NIfTI ``affine``, ``aff2axcodes``; TIFF resolution and ImageJ
spacing), per-volume value ``scaling`` and the label index. With labels, a coarse per-chunk
label index (:mod:`chunkio.format.label_index`) is computed while converting and stored as
arrays ``label_index``/``label_points`` for label-balanced patch sampling.

Values: see :mod:`chunkio.convert.volume.values` - narrowing never wraps (``on_overflow``
``"error"``, ``"clip"`` or ``"scale"``) and NaN/Inf are handled by an explicit
``nan_policy``; labels must be integers and match their image's shape.

Execution: one task per volume (:mod:`chunkio.convert.volume.tasks`) on the conversion
engine (:mod:`chunkio.convert.engine.core`); a task owns every chunk of that volume, so parallel
writers never share a chunk. A task holds its volume (and label) in memory - NIfTI ``.gz``
must be decompressed whole anyway - so peak memory is about two volumes per worker; a single
volume larger than memory is not supported (split it first).
Local destinations are atomic, exclusive and resumable through the staging of
:mod:`chunkio.convert.durability.staging`: the manifest lists finished volumes, and each finished
volume's scaling and label index are kept next to it, so a rerun converts only the rest and
produces the same dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Compression, Format, Writer, detect_format, storage_for
from ..errors import SourceError
from ..format.label_index import LabelIndex, write_label_index
from ..format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, FieldInfo
from ..format.volume_layout import VOLUMES_KEY, VolumeSet
from ..util.deprecated import moved_keywords
from .durability.plan import ConversionPlan
from .durability.rerun import REQUEST_KEY, Request, compression_option, display, reuse_complete
from .durability.staging import Destination, open_destination
from .engine.core import drive
from .engine.writing import start_writer, write_here, write_target
from .options import DEFAULT_EXECUTION, DEFAULT_OUTPUT, Execution, Output, Progress, moved
from .source import ConversionResult
from .volume.ome_output import OmeRequest, convert_ome
from .volume.results import load_results, save_result
from .volume.sources import VolumeFile, match_labels, probe_volume, volume_files
from .volume.tasks import VolumeJob, VolumeResult, VolumeTask, pool_execution
from .volume.values import NanPolicy, OnOverflow, choose_dtype

__all__ = ["DEFAULT_VOLUME_CHUNKS", "convert_volumes", "volume_chunks"]

#: spatial chunk shape: 64^3 voxels (256 KiB of uint8, 1 MiB of float32) per chunk; what
#: :func:`volume_chunks` gives for the default chunk_bytes
DEFAULT_VOLUME_CHUNKS = (64, 64, 64)
Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


#: convert_volumes' keywords that moved into the option objects (``chunks``, the spatial
#: chunk shape, keeps its name in Output)
_MOVED = moved("format", "chunks", "compression", "workers", "client", "progress", "overwrite")


@moved_keywords("convert_volumes", _MOVED)
def convert_volumes(
    src: Paths,
    dst: Any,
    *,
    labels: Paths | None = None,
    dtype: npt.DTypeLike | None = None,
    label_dtype: npt.DTypeLike | None = None,
    on_overflow: OnOverflow = "error",
    nan_policy: NanPolicy = "error",
    class_names: Sequence[str] | None = None,
    output: Output | None = None,
    execution: Execution | None = None,
) -> ConversionResult:
    """Convert volume files into a chunkio volume dataset; resume an interrupted run.

    The keywords that moved into :class:`~chunkio.Output` (``format``, ``chunks``,
    ``compression``) and :class:`~chunkio.Execution` (``workers``, ``client``,
    ``progress``, ``overwrite``) are still accepted for one release, with a
    ``DeprecationWarning``.

    Parameters
    ----------
    src
        A folder (its volume files, sorted by name; hidden files ignored) or a list of files.
    dst
        A ``.zarr`` directory or ``.h5`` file (atomic and resumable), ``memory://NAME``, a
        URL zarr understands or a zarr store.
    labels
        Label volumes: a list aligned with the images, or a folder matched by file name.
    dtype, label_dtype
        Stored dtypes; default: one that holds every source (float labels: int16).
    on_overflow, nan_policy
        Value policies, see :mod:`chunkio.convert.volume.values`.
    class_names
        Names of the label values 0, 1, ... (stored in the layout).
    output
        :class:`~chunkio.Output`: ``chunks`` is the spatial chunk shape (an int or three;
        default 64^3, the largest power-of-two cube of at most ``chunk_bytes`` of float32
        voxels), clipped to the largest volume; one volume per chunk. Format, and the codec,
        level and checksum of every chunk. No ``extra``: the converter writes its own.
        ``ome_zarr``: write one OME-Zarr image per volume instead (levels, label image,
        stored label index; see :mod:`chunkio.convert.volume.ome_output`).
    execution
        :class:`~chunkio.Execution`: processes converting volumes in parallel (default: up
        to :data:`~chunkio.convert.engine.workers.VOLUME_WORKERS`, never more than volumes left,
        and none for less than 256 MiB of images: see :mod:`chunkio.convert.engine.workers`), or a
        ``dask.distributed.Client``; a progress bar (volumes); overwriting.
    Returns
    -------
    ConversionResult
        ``resumed_blocks``/``written_blocks`` count volumes. ``unchanged`` when ``dst``
        already holds this very conversion (the same files by path, size and modification
        time, the same options): returned without reading a voxel. With ``ome_zarr``, an
        :class:`~chunkio.convert.volume.ome_output.OmeConversionResult` whose ``images``
        are the paths of the images.

    Raises
    ------
    SourceError
        A file is unreadable, an image and its label differ in shape (both files are named),
        or values break the dtype or NaN policy.
    """
    output = DEFAULT_OUTPUT if output is None else output
    execution = DEFAULT_EXECUTION if execution is None else execution
    output.no_extra("convert_volumes")
    ome, levels = _ome_levels(output.ome_zarr)
    compression = output.compression_codec()
    overwrite = execution.overwrite
    started = time.perf_counter()
    chunks = output.chunks if output.chunks is not None else volume_chunks(output.chunk_bytes)
    values = VoxelOptions(chunks, dtype, label_dtype, on_overflow, nan_policy)
    job = _plan(src, labels, values)
    if class_names is not None:
        job = replace(job, class_names=tuple(str(c) for c in class_names))
    fmt: Format = output.format or detect_format(dst)
    storage_for(fmt)  # a ValueError naming the formats for any other
    if ome:
        request = job.request(fmt, compression)
        options = {**request.options, "ome_zarr": levels}
        asked = OmeRequest(
            job.volumes,
            replace(request, options=options),
            hashlib.sha256(f"{job.fingerprint()}:ome:{levels}".encode()).hexdigest(),
            compression,
            levels,
            job.class_names,
        )
        return convert_ome(dst, fmt, job.tasks, asked, execution, started)
    plan = ConversionPlan(fmt, (), job.volumes.count, 1, compression, job.fingerprint())
    request = job.request(fmt, compression)
    done_before = reuse_complete(dst, fmt, request, overwrite=overwrite)
    if done_before is not None:
        return ConversionResult(
            path=display(dst),
            format=fmt,
            num_samples=done_before.num_samples,
            samples_per_chunk=1,
            fields=done_before.fields,
            resumed_blocks=job.volumes.count,
            written_blocks=0,
            seconds=time.perf_counter() - started,
            unchanged=True,
        )
    with open_destination(dst, plan, overwrite=overwrite) as dest:
        done = load_results(dest, job.tasks) if dest.resumed else {}
        writer = start_writer(
            dest,
            job.layout(_blank(job), None).to_attrs(),
            lambda w: _create_arrays(w, job, compression),
            reuse=bool(done),
        )
        if not dest.resumed:
            done.clear()
        try:
            todo = [t for t in job.tasks if t.volume not in done]
            _execute(dest, writer, todo, done, execution)
            ordered = [done[v] for v in range(job.volumes.count)]
            index = None
            if job.volumes.label is not None:
                parts = [(r.rows, r.points) for r in ordered]
                index = write_label_index(
                    writer, LabelIndex.concat(parts, job.volumes.ndim), compression
                )
            layout = job.layout(ordered, index)
            writer.set_attrs({ATTR_KEY: layout.to_attrs(), REQUEST_KEY: request.record(layout)})
            writer.flush()
            writer.set_attrs({COMPLETE_KEY: True})  # strictly last
        finally:
            writer.close()
        dest.commit()
    return ConversionResult(
        path=dest.display,
        format=fmt,
        num_samples=layout.num_samples,
        samples_per_chunk=1,
        fields=layout.fields,
        resumed_blocks=job.volumes.count - len(todo),
        written_blocks=len(todo),
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class _Job:
    volumes: VolumeSet
    tasks: tuple[VolumeTask, ...]
    image_dtype: np.dtype[Any]
    label_dtype: np.dtype[Any] | None
    policy: dict[str, str]
    class_names: tuple[str, ...] | None = None

    def fields(self) -> tuple[FieldInfo, ...]:
        vs, out = self.volumes, []
        for kind, dtype in (("image", self.image_dtype), ("label", self.label_dtype)):
            if dtype is None:
                continue
            for v, name in enumerate(vs.field_names(kind)):
                shape = vs.item_shape(kind, vs.shapes[v])
                out.append(FieldInfo(name, np.dtype(dtype), shape))
        return tuple(out)

    def array_chunks(self, kind: str) -> tuple[int, ...]:
        return (1, *self.volumes.item_shape(kind, self.volumes.chunks))

    def layout(
        self, results: Sequence[VolumeResult], index: dict[str, Any] | None
    ) -> DatasetLayout:
        sources = []
        for t in self.tasks:
            entry = {"image": t.image.path, **_json_meta(t.image.meta)}
            if t.label is not None:
                entry["label"] = t.label.path
            sources.append(entry)
        meta = {
            **self.volumes.to_json(),
            "label_index": index,
            "sources": sources,
            "scaling": [{"slope": r.slope, "inter": r.inter} for r in results],
            "policy": self.policy,
        }
        n = self.volumes.count if self.volumes.stacked else 1
        return DatasetLayout(
            n, 1, self.fields(), class_names=self.class_names, extra={VOLUMES_KEY: meta}
        )

    def request(self, fmt: Format, compression: Compression) -> Request:
        """What a rerun compares: each volume's files (path, size, mtime) and the options."""
        listing = "\n".join(t.source_fingerprint() for t in self.tasks)
        options = {
            "format": fmt,
            "chunks": list(self.volumes.chunks),
            "dtype": str(self.image_dtype),
            "label_dtype": None if self.label_dtype is None else str(self.label_dtype),
            **self.policy,
            "class_names": None if self.class_names is None else list(self.class_names),
            "compression": compression_option(compression),
        }
        return Request("volumes", hashlib.sha256(listing.encode()).hexdigest(), options)

    def fingerprint(self) -> str:
        """What the arrays look like; each volume's files are checked on resume on their own
        (see :mod:`chunkio.convert.volume.results`), so fixing one bad file keeps the rest."""
        files = [[f.path for f in (t.image, t.label) if f is not None] for t in self.tasks]
        state = {
            "files": files,
            "volumes": self.volumes.to_json(),
            "policy": self.policy,
            "dtypes": [str(self.image_dtype), str(self.label_dtype)],
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def volume_chunks(chunk_bytes: int) -> tuple[int, int, int]:
    """The default spatial chunk shape for ``Output(chunk_bytes=...)``: the largest cube of
    power-of-two side holding at most ``chunk_bytes`` of float32 voxels (at least 1).

    Counted in float32 whatever the stored dtype, so that the default stays the 64^3 cube
    that a 64^3 patch reads whole (256 KiB of uint8, 1 MiB of float32).

    >>> volume_chunks(1 << 20), volume_chunks(8 << 20), volume_chunks(1)
    ((64, 64, 64), (128, 128, 128), (1, 1, 1))
    """
    side = 1
    while (2 * side) ** 3 * 4 <= chunk_bytes:
        side *= 2
    return (side, side, side)


def _ome_levels(ome_zarr: bool | int) -> tuple[bool, int | None]:
    """``ome_zarr`` as (whether, levels): levels ``None`` chooses them.

    >>> _ome_levels(False), _ome_levels(True), _ome_levels(3)
    ((False, None), (True, None), (True, 3))
    """
    if isinstance(ome_zarr, bool):
        return ome_zarr, None
    return True, ome_zarr  # checked by Output


def _json_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k in ("affine", "spacing", "axcodes", "unit", "axes")}


@dataclass(frozen=True)
class VoxelOptions:
    """How voxels are stored (see :func:`convert_volumes`): the spatial chunk shape asked for,
    the dtypes, and the value policies; checked when made."""

    chunks: int | Sequence[int] | None = None
    dtype: npt.DTypeLike | None = None
    label_dtype: npt.DTypeLike | None = None
    on_overflow: OnOverflow = "error"
    nan_policy: NanPolicy = "error"

    def __post_init__(self) -> None:
        if self.on_overflow not in ("error", "clip", "scale"):
            raise ValueError(
                f"on_overflow must be 'error', 'clip' or 'scale'; got {self.on_overflow!r}"
            )
        if self.nan_policy not in ("error", "zero", "keep"):
            raise ValueError(
                f"nan_policy must be 'error', 'zero' or 'keep'; got {self.nan_policy!r}"
            )


def _plan(src: Paths, labels: Paths | None, values: VoxelOptions) -> _Job:
    on_overflow, nan_policy = values.on_overflow, values.nan_policy
    images = [probe_volume(p) for p in volume_files(src)]
    label_files = (
        None
        if labels is None
        else [probe_volume(p) for p in match_labels([i.path for i in images], labels)]
    )
    if label_files is not None:
        label_files = [_check_label(i, lab) for i, lab in zip(images, label_files, strict=True)]
    channels = {i.channels for i in images}
    if len(channels) > 1:
        raise SourceError(
            f"volumes differ in channels {sorted(map(str, channels))}: e.g. "
            f"{images[0].path} has {images[0].channels}"
        )
    shapes = tuple(i.spatial for i in images)
    volumes = VolumeSet(
        shapes=shapes,
        chunks=_chunk_shape(values.chunks, shapes),
        stacked=len(set(shapes)) == 1,
        channels=images[0].channels,
        label=None if label_files is None else "label",
    )
    image_dtype = choose_dtype([i.dtype for i in images], values.dtype, label=False)
    lab_dtype = (
        None
        if label_files is None
        else choose_dtype([lab.dtype for lab in label_files], values.label_dtype, label=True)
    )
    tasks = tuple(
        VolumeTask(
            volume=v,
            image=img,
            label=None if label_files is None else label_files[v],
            image_dtype=image_dtype,
            label_dtype=np.dtype(np.uint8) if lab_dtype is None else lab_dtype,
            chunks=volumes.chunks,
            on_overflow=on_overflow,
            nan_policy=nan_policy,
            image_array=volumes.array("image", v),
            label_array=None if label_files is None else volumes.array("label", v),
        )
        for v, img in enumerate(images)
    )
    policy: dict[str, str] = {"on_overflow": on_overflow, "nan_policy": nan_policy}
    return _Job(volumes, tasks, image_dtype, lab_dtype, policy)


def _check_label(image: VolumeFile, label: VolumeFile) -> VolumeFile:
    if label.channels == 1:  # a singleton channel axis carries no information
        label = VolumeFile(label.path, label.kind, label.spatial, None, label.dtype, label.meta)
    if label.channels is not None or label.spatial != image.spatial:
        raise SourceError(
            f"label {label.path} has shape {label.shape} but image {image.path} has spatial "
            f"shape {image.spatial}; a label volume must match its image voxel for voxel"
        )
    return label


def _chunk_shape(
    chunks: int | Sequence[int] | None, shapes: Sequence[tuple[int, ...]]
) -> tuple[int, ...]:
    wanted = DEFAULT_VOLUME_CHUNKS if chunks is None else chunks
    values = [wanted] * 3 if isinstance(wanted, int | np.integer) else list(wanted)
    if len(values) != 3 or any(isinstance(c, bool) or int(c) < 1 for c in values):
        raise ValueError(f"chunks must be a positive int or three; got {chunks!r}")
    largest = np.max(np.asarray(shapes), axis=0)
    return tuple(int(min(c, n)) for c, n in zip(values, largest.tolist(), strict=True))


def _create_arrays(writer: Writer, job: _Job, compression: Compression) -> None:
    for f in job.fields():
        kind = "label" if f.name.startswith("label") else "image"
        rows = job.volumes.count if job.volumes.stacked else 1
        writer.create_array(
            f.name,
            shape=(rows, *(f.sample_shape or ())),
            dtype=f.dtype,
            chunks=job.array_chunks(kind),
            compression=compression,
        )


def _blank(job: _Job) -> list[VolumeResult]:
    empty = np.zeros((0, 0), np.int64)
    return [VolumeResult(t.volume, 1.0, 0.0, empty, empty) for t in job.tasks]


@dataclass
class _VolumeSink:
    """Volumes into a staged destination: written here when a worker returned them; each
    volume's scaling and label index kept next to it, then the volume recorded."""

    dest: Destination
    writer: Writer
    done_volumes: dict[int, VolumeResult]

    def write(self, task: VolumeTask, result: VolumeResult) -> None:
        write_here(self.dest, self.writer, result.writes(task), task.syncs())

    def done(self, task: VolumeTask, result: VolumeResult) -> int:
        result.image = result.label = None
        save_result(self.dest, task, result)  # scaling and index survive an interruption
        self.dest.record(task.volume, task.volume + 1)
        self.done_volumes[task.volume] = result
        return 1


def _execute(
    dest: Destination,
    writer: Writer,
    todo: list[VolumeTask],
    done: dict[int, VolumeResult],
    asked: Execution,
) -> None:
    execution = pool_execution(todo, asked)
    label = os.path.basename(dest.display.rstrip("/"))
    drive(
        VolumeJob(write_target(dest, parallel=execution.parallel)),
        todo,
        execution=execution,
        sink=_VolumeSink(dest, writer, done),
        progress=Progress(len(todo) + len(done), "volume", label, execution.progress, len(done)),
        destination=dest.display,
    )
