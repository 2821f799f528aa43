"""Volumes converted into a collection of OME-Zarr images, staged, resumable and rerun-safe:
``convert_volumes(..., ome_zarr=True)``.

The destination is a Zarr v3 group holding one OME-Zarr 0.5 image per volume,
``<stem>.ome.zarr`` after its source file (see :mod:`chunkio.convert.volume.ome`); its
attribute ``chunkio_ome`` lists them in source order, with the label image's name and the
class names. Each image opens on its own in any NGFF 0.5 reader (ome-zarr-py, napari,
:class:`chunkio.patches.PatchDataset`). The whole collection is written like every other
conversion (:mod:`chunkio.convert.durability.staging`): locked, built next to the
destination and renamed into place when complete; each finished volume (its image synced,
its scaling and label index kept in the staging) survives an interruption, and a rerun
converts only the rest; a complete collection made by the same request is returned as it is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...backends import Compression, Format, storage_for
from ...errors import DestinationExistsError, SourceError
from ...format.layout import COMPLETE_KEY
from ...format.volume_layout import VolumeSet
from ..durability.plan import ConversionPlan
from ..durability.rerun import REQUEST_KEY, REQUEST_VERSION, Request, display
from ..durability.staging import Destination, is_local, open_destination
from ..engine.core import drive
from ..options import Execution, Progress
from ..source import ConversionResult
from .ome import LABEL_NAME, OmeJob, image_intact
from .results import load_results, save_result
from .sources import volume_stem
from .tasks import VolumeResult, VolumeTask, pool_execution

__all__ = ["ROOT_KEY", "OmeConversionResult", "OmeRequest", "convert_ome", "image_names"]

#: the root attribute listing the images of a collection
ROOT_KEY = "chunkio_ome"
ROOT_VERSION = 1
_SUFFIX = ".ome.zarr"


@dataclass(frozen=True)
class OmeConversionResult(ConversionResult):
    """A :class:`~chunkio.convert.ConversionResult` of an OME-Zarr conversion; ``images``:
    the path of each volume's image, in source order (what
    :class:`~chunkio.patches.PatchDataset` and ome-zarr-py open)."""

    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class OmeRequest:
    """What :func:`convert_ome` is asked, besides the source tasks and ``dst``."""

    volumes: VolumeSet
    request: Request
    fingerprint: str
    compression: Compression
    levels: int | None
    class_names: tuple[str, ...] | None = None


def image_names(tasks: Sequence[VolumeTask]) -> tuple[str, ...]:
    """``<stem>.ome.zarr`` of each volume's image file; a name that is not a plain file
    name, or one two files share, is a :class:`~chunkio.errors.SourceError` naming them.

    >>> import numpy as np
    >>> from chunkio.convert.volume.sources import VolumeFile
    >>> f = VolumeFile("in/la_003.nii.gz", "nifti", (1, 1, 1), None, np.dtype("u1"))
    >>> t = VolumeTask(0, f, None, f.dtype, f.dtype, (1, 1, 1), "error", "error", ("i", 0), None)
    >>> image_names([t])
    ('la_003.ome.zarr',)
    """
    seen: dict[str, str] = {}
    for t in tasks:
        stem = volume_stem(t.image.path)
        # Zarr v3 node names: not empty, no "/", not only dots, no "__" prefix (reserved)
        if not stem or stem.startswith((".", "__")) or any(c in stem for c in "/\\\0"):
            raise SourceError(
                f"{t.image.path}: expected a file name that can name its OME-Zarr image (a "
                f"Zarr node: not starting with '.' or '__'); got {stem!r}"
            )
        name = stem + _SUFFIX
        if name in seen:
            raise SourceError(
                f"{seen[name]} and {t.image.path} would both be the image {name!r}; "
                "expected volume files with distinct names"
            )
        seen[name] = t.image.path
    return tuple(seen)


def convert_ome(
    dst: Any,
    fmt: Format,
    tasks: Sequence[VolumeTask],
    asked: OmeRequest,
    execution: Execution,
    started: float,
) -> OmeConversionResult:
    """Write ``tasks`` as a collection of OME-Zarr images at ``dst`` (see the module docs)."""
    import zarr

    storage = storage_for(fmt)
    if storage.in_memory or storage.local_only:  # chunkio's memory store, one HDF5 file
        raise ValueError(
            f"Output(ome_zarr=...) writes a Zarr v3 group (a '.zarr' directory, a URL or a "
            f"zarr store); got format {fmt!r} for {dst!r}"
        )
    names = image_names(tasks)
    request = asked.request
    count = len(tasks)
    earlier = _reuse(dst, request, overwrite=execution.overwrite)
    if earlier is not None:
        return _result(display(dst), earlier, count, 0, time.perf_counter() - started, True)
    plan = ConversionPlan(fmt, (), count, 1, asked.compression, asked.fingerprint)
    with open_destination(dst, plan, overwrite=execution.overwrite) as dest:
        root = dest.data_location
        done: dict[int, VolumeResult] = {}
        if dest.resumed:
            done = load_results(dest, tasks, lambda t: image_intact(root, names[t.volume]))
        else:
            group = zarr.open_group(store=root, mode="w", zarr_format=3)
            group.update_attributes({COMPLETE_KEY: False})
            dest.created()
        todo = [t for t in tasks if t.volume not in done]
        job = OmeJob(root, names, asked.levels, asked.compression, dest.staged, asked.class_names)
        _execute(dest, job, todo, done, execution)
        meta = {
            "version": ROOT_VERSION,
            "images": list(names),
            "label": LABEL_NAME if asked.volumes.label is not None else None,
            "class_names": None if asked.class_names is None else list(asked.class_names),
            "volumes": asked.volumes.to_json(),
        }
        record = {
            "version": REQUEST_VERSION,
            "kind": request.kind,
            "source": request.source,
            "options": dict(request.options),
        }
        group = zarr.open_group(store=root, mode="a", zarr_format=3)
        group.update_attributes({ROOT_KEY: meta, REQUEST_KEY: record})
        group.update_attributes({COMPLETE_KEY: True})  # strictly last
        dest.commit()
    seconds = time.perf_counter() - started
    return _result(dest.display, names, count - len(todo), len(todo), seconds, False)


def _result(
    where: str, names: Sequence[str], resumed: int, written: int, seconds: float, same: bool
) -> OmeConversionResult:
    return OmeConversionResult(
        path=where,
        format="zarr",
        num_samples=len(names),
        samples_per_chunk=1,
        fields=(),
        resumed_blocks=resumed,
        written_blocks=written,
        seconds=seconds,
        unchanged=same,
        images=tuple(f"{where.rstrip('/')}/{n}" for n in names),
    )


def _reuse(dst: Any, request: Request, *, overwrite: bool) -> tuple[str, ...] | None:
    """The images of the complete collection at local ``dst`` if ``request`` made it;
    ``None`` when there is nothing there (or ``overwrite``); else
    :class:`~chunkio.errors.DestinationExistsError` saying what differs."""
    import zarr

    path = is_local(dst)
    if overwrite or path is None or not os.path.exists(path):
        return None
    refuse = "; pass execution=chunkio.Execution(overwrite=True) to replace it"
    try:
        attrs = dict(zarr.open_group(store=path, mode="r", zarr_format=3).attrs)
    except Exception as err:  # not a Zarr v3 group: never reused
        raise DestinationExistsError(f"{path} already exists ({err}){refuse}") from err
    meta: Any = attrs.get(ROOT_KEY)
    earlier = Request.from_record(attrs.get(REQUEST_KEY))
    if attrs.get(COMPLETE_KEY) is not True or not isinstance(meta, Mapping) or earlier is None:
        raise DestinationExistsError(
            f"{path} already exists and is not a complete OME-Zarr conversion (expected "
            f"attributes {ROOT_KEY!r}, {REQUEST_KEY!r} and {COMPLETE_KEY!r}){refuse}"
        )
    changes = request.differences(earlier)
    if changes:
        raise DestinationExistsError(
            f"{path} already holds images made otherwise: {'; '.join(changes)}{refuse}"
        )
    return tuple(str(n) for n in meta.get("images", ()))


@dataclass
class _OmeSink:
    """Finished images recorded: each volume's scaling and index kept in the staging,
    then the volume listed in the manifest (its image was synced by whoever wrote it)."""

    dest: Destination
    done_volumes: dict[int, VolumeResult]

    def write(self, task: VolumeTask, result: VolumeResult) -> None:
        raise RuntimeError(f"{task.describe()}: an OME-Zarr image is written by its task")

    def done(self, task: VolumeTask, result: VolumeResult) -> int:
        save_result(self.dest, task, result)
        self.dest.record(task.volume, task.volume + 1)
        self.done_volumes[task.volume] = result
        return 1


def _execute(
    dest: Destination,
    job: OmeJob,
    todo: list[VolumeTask],
    done: dict[int, VolumeResult],
    asked: Execution,
) -> None:
    if isinstance(job.root, str):
        execution = pool_execution(todo, asked)
    else:  # a store object lives in this process
        execution = replace(asked, workers=1, client=None)
    label = os.path.basename(dest.display.rstrip("/"))
    drive(
        job,
        todo,
        execution=execution,
        sink=_OmeSink(dest, done),
        progress=Progress(len(todo) + len(done), "volume", label, execution.progress, len(done)),
        destination=dest.display,
    )
