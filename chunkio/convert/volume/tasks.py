"""Volumes: the tasks of volume conversions (:mod:`..engine`) - decode, apply the value
policies, index the labels, write.

A task owns every chunk of its volume (the volume's rows of the image and label arrays), so
parallel writers never share a chunk. Where its :class:`~..engine.writing.WriteTarget` lets it, the
worker writes and syncs its own volume and returns only the index; otherwise it returns the
arrays and the calling process writes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ...format.label_index import index_label_volume
from ..engine.workers import VOLUME_WORKERS, Work, worker_count
from ..engine.writing import Sync, WriteTarget
from ..options import Execution
from .sources import VolumeFile, load_volume
from .values import NanPolicy, OnOverflow, prepare_image, prepare_label

__all__ = [
    "VolumeJob",
    "VolumeResult",
    "VolumeTask",
    "pool_execution",
    "prepare_volume",
]


@dataclass(frozen=True)
class VolumeTask:
    """Everything needed to convert volume ``volume``; picklable."""

    volume: int
    image: VolumeFile
    label: VolumeFile | None
    image_dtype: np.dtype[Any]
    label_dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    on_overflow: OnOverflow
    nan_policy: NanPolicy
    image_array: tuple[str, int]
    label_array: tuple[str, int] | None

    def source_fingerprint(self) -> str:
        """The files' paths, sizes and modification times: a changed file is converted again."""
        parts = []
        for vf in (self.image, self.label):
            if vf is not None:
                st = os.stat(vf.path)
                parts.append(f"{os.path.abspath(vf.path)}:{st.st_size}:{st.st_mtime_ns}")
        return "|".join(parts)

    def describe(self) -> str:
        label = f" with label {self.label.path}" if self.label else ""
        return f"volume {self.volume} ({self.image.path}{label})"

    def syncs(self) -> list[Sync]:
        """What a written volume must make durable: its row of each of its arrays."""
        names = tuple(a[0] for a in (self.image_array, self.label_array) if a is not None)
        row = self.image_array[1]
        return [(names, row, row + 1)]


@dataclass
class VolumeResult:
    volume: int
    slope: float
    inter: float
    rows: npt.NDArray[np.int64]
    points: npt.NDArray[np.int64]
    image: npt.NDArray[Any] | None = None
    label: npt.NDArray[Any] | None = None

    def writes(self, task: VolumeTask) -> list[tuple[str, int, npt.NDArray[Any]]]:
        """``(array, row, values)``: the volume as one row of each of its arrays."""
        name, row = task.image_array
        out = [(name, row, np.asarray(self.image)[None])]
        if task.label_array is not None:
            name, row = task.label_array
            out.append((name, row, np.asarray(self.label)[None]))
        return out


@dataclass(frozen=True)
class VolumeJob:
    """What a worker needs to convert volumes: where to write (tasks carry the rest)."""

    target: WriteTarget

    def run(self, task: VolumeTask) -> VolumeResult:
        """Convert one volume; write it too when this worker may write."""
        result = prepare_volume(task)
        if self.target.location is None:
            return result
        self.target.write(result.writes(task), task.syncs())
        result.image = result.label = None  # written: nothing to send back but the index
        return result

    def written(self, result: VolumeResult) -> bool:
        return result.image is None


def prepare_volume(task: VolumeTask) -> VolumeResult:
    """Decode a task's volume (and label), apply the value policies, index the label."""
    image, slope, inter = prepare_image(
        load_volume(task.image),
        task.image_dtype,
        on_overflow=task.on_overflow,
        nan_policy=task.nan_policy,
        where=task.image.path,
    )
    label = None
    ndim = len(task.chunks)
    rows, points = np.zeros((0, ndim + 3), np.int64), np.zeros((0, 0, ndim), np.int64)
    if task.label is not None:
        label = prepare_label(load_volume(task.label), task.label_dtype, where=task.label.path)
        rows, points = index_label_volume(label, task.volume, task.chunks)
    return VolumeResult(task.volume, slope, inter, rows, points, image, label)


def pool_execution(todo: list[VolumeTask], asked: Execution) -> Execution:
    """``asked`` with the worker count volume tasks run with: an explicit count as it is, else
    sized by the volumes' bytes, at most :data:`VOLUME_WORKERS` and one per volume left."""

    def work() -> Work:  # an explicit worker count is used as it is
        if asked.workers is not None:
            return Work()
        return Work(nbytes=sum(int(np.prod(t.image.shape)) * t.image_dtype.itemsize for t in todo))

    cap = min(VOLUME_WORKERS, len(todo))
    count = worker_count(asked.workers, client=asked.client, work=work, cap=cap)
    return replace(asked, workers=count)
