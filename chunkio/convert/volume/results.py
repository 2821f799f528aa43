"""What a finished volume leaves besides its chunks - value scaling and label index rows -
kept in the staging directory so that a resumed conversion writes the same dataset.

``<staging>/volumes/<v>.npz`` is written (and fsync'd) before the manifest records volume
``v``. On resume a volume counts as done only if its record, its ``.npz`` and its chunks all
read back; anything else is converted again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...backends import open_reader
from ...util.fsync import fsync_path
from ..durability.staging import Destination
from .tasks import VolumeResult, VolumeTask

__all__ = ["load_results", "save_result"]


def _folder(dest: Destination) -> str | None:
    staging = getattr(dest, "staging", None)
    return None if staging is None else os.path.join(str(staging), "volumes")


def save_result(dest: Destination, task: VolumeTask, result: VolumeResult) -> None:
    """Persist a finished volume's scaling and index (staged destinations only)."""
    folder = _folder(dest)
    if folder is None:
        return
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{result.volume}.npz")
    tmp = path + ".tmp.npz"
    with open(tmp, "wb") as fh:
        np.savez(
            fh,
            source=np.array(task.source_fingerprint()),
            rows=result.rows,
            points=result.points,
            scaling=np.array([result.slope, result.inter], np.float64),
        )
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(folder)


def load_results(
    dest: Destination,
    tasks: Sequence[VolumeTask],
    intact: Callable[[VolumeTask], bool] | None = None,
) -> dict[int, VolumeResult]:
    """Volumes an interrupted run finished whose chunks and saved results are intact
    (``intact``: how a volume's chunks are read back; default: its rows of the dataset's
    arrays)."""
    folder = _folder(dest)
    if folder is None or not dest.done_chunks:
        return {}
    results: dict[int, VolumeResult] = {}
    reader = open_reader(dest.data_location) if intact is None else None
    check = intact or (lambda task: _chunks_ok(reader, task))
    try:
        for task in tasks:
            if task.volume not in dest.done_chunks:
                continue
            result = _load(os.path.join(folder, f"{task.volume}.npz"), task)
            if result is not None and check(task):
                results[task.volume] = result
    finally:
        if reader is not None:
            reader.close()
    return results


def _load(path: str, task: VolumeTask) -> VolumeResult | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["source"]) != task.source_fingerprint():
                return None  # its files changed since: convert it again
            slope, inter = (float(x) for x in z["scaling"])
            return VolumeResult(task.volume, slope, inter, z["rows"], z["points"])
    except (OSError, ValueError, KeyError):
        return None


def _chunks_ok(reader: Any, task: VolumeTask) -> bool:
    """Read the volume back: every chunk present and passing its checksum."""
    for array, vf, dtype in (
        (task.image_array, task.image, task.image_dtype),
        (task.label_array, task.label, task.label_dtype),
    ):
        if array is None or vf is None:
            continue
        name, row = array
        region = (slice(row, row + 1), *(slice(0, n) for n in vf.shape))
        out = np.empty((1, *vf.shape), dtype)
        try:
            reader.read_region(name, region, out)
        except Exception:  # missing, torn or corrupt: convert this volume again
            return False
    return True
