"""Per-field, per-channel mean and std (:class:`Stats`, computed by
:func:`chunkio.compute_stats` in one streaming pass over the chunks), and :class:`Normalize`,
which applies them to batches on any device.

Each array a dataset's fields read is streamed chunk by chunk along axis 0 (memory: one chunk),
its moments merged in float64 (Chan et al.'s pairwise update, as numerically stable as
Welford's). A sample ``(..., H, W)`` is reduced over time and its last two (spatial) axes, so
a ``(level, lat, lon)`` variable gets one mean per level; samples of fewer than two axes are
reduced over time only. A window field's stats are its variables' stacked: ``(V, *levels)``
for a stacked field, ``(*levels)`` otherwise; every step of a window uses the same ones.
``diff=True`` computes them of the differences between consecutive steps (``x[t+1] - x[t]``,
GraphCast's residual targets).

>>> import numpy as np, tempfile, os
>>> from chunkio import write_arrays, ChunkDataset, Field, Output, compute_stats
>>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
>>> x = np.arange(24, dtype="f4").reshape(6, 2, 1, 2)
>>> _ = write_arrays(path, {"x": x}, shuffle=False, output=Output(chunks=4))
>>> stats = compute_stats(ChunkDataset(path, fields=[Field("x", steps=[0, 1])]))
>>> stats.fields["x"]["mean"], np.allclose(stats.fields["x"]["std"], x.std(axis=(0, 2, 3)))
([10.5, 12.5], True)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import TransformError, WindowError
from ..util.messages import listing
from .sample import Columns, DescribesColumns

__all__ = ["Normalize", "Stats", "check_stats", "fit_stats"]

STATS_VERSION = 1


@dataclass(frozen=True)
class Stats:
    """Mean and std by field: ``{"mean": [...], "std": [...], "arrays": [...], "count": n}``
    (nested lists shaped ``(V?, *levels)``); ``diff``: of time differences."""

    fields: Mapping[str, Mapping[str, Any]]
    diff: bool = False

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the stats as a small JSON file."""
        doc = {"version": STATS_VERSION, "diff": self.diff, "fields": dict(self.fields)}
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Stats:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("version") != STATS_VERSION:
            raise WindowError(f"{path}: not a chunkio stats file of version {STATS_VERSION}")
        return cls(fields=doc["fields"], diff=bool(doc.get("diff", False)))


class Normalize:
    """``(x - mean) / std`` of each field that ``stats`` has, on the batch's device.

    ``fields``: the batch's field names in order when batches are tuples (``dataset.fields``);
    a ``dataset`` given instead is also checked against the stats (fields, arrays, channels):
    a :class:`~chunkio.errors.WindowError` otherwise; with a dataset, stats of single
    variables (``chunkio stats era5.zarr --fields t2m u10 v10``) also serve the fields that
    stack them (:func:`fit_stats`). Apply it to each batch, e.g. on the GPU
    after ``make_loader(..., device="cuda")``: ``x = norm(batch)`` (float tensors are
    normalised, integer scalars and vectors such as labels pass as they are, integer images
    and lists are a :class:`~chunkio.errors.TransformError`); or give it to the dataset
    (``ChunkDataset(..., transform=norm)``, ``make_loader(path, ..., transform=norm)``) to
    normalise batches in the reader processes as they are read, in place: float fields; integer
    scalars and vectors (labels, times) are left as they are, and a field it cannot normalise in
    place (integer images, samples of several shapes) is a
    :class:`~chunkio.errors.TransformError` when the dataset is made.
    """

    def __init__(
        self,
        stats: Stats | str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        dataset: DescribesColumns | None = None,
        eps: float = 1e-12,
    ) -> None:
        self.stats = stats if isinstance(stats, Stats) else Stats.load(stats)
        if dataset is not None:  # what its batches hold: Normalize reads no dataset itself
            columns = dataset.batch_columns()
            self.stats = fit_stats(self.stats, columns)
            check_stats(self.stats, columns)
            fields = fields or list(columns.fields)
        self.fields = None if fields is None else tuple(fields)
        self.eps = float(eps)
        self._cache: dict[tuple[str, str, Any], tuple[Any, Any]] = {}

    def _apply(self, name: str, x: Any) -> Any:
        found = self.stats.fields.get(name)
        if found is None:
            return x
        if not hasattr(x, "dtype") or (not x.dtype.is_floating_point and x.dim() >= 3):
            what = f"{x.dtype} of shape {tuple(x.shape)}" if hasattr(x, "dtype") else "a list"
            raise TransformError(
                f"Normalize: field {name!r} of the batch is {what}, which it cannot "
                "normalise: float tensors only (x.float(), or chunkio.transforms.normalize for "
                "uint8 (B, C, H, W) images); integer labels and times are left as they are"
            )
        if not x.dtype.is_floating_point:
            return x  # integer scalars and vectors: labels, times, codes
        key = (name, str(x.device), x.dtype)
        if key not in self._cache:
            import torch

            mean = torch.as_tensor(found["mean"], dtype=x.dtype, device=x.device)
            std = torch.as_tensor(found["std"], dtype=x.dtype, device=x.device)
            spatial = 2 if x.dim() - 1 - mean.dim() >= 2 else 0  # broadcast over (H, W)
            shape = (*mean.shape, *([1] * spatial))
            self._cache[key] = (mean.reshape(shape), std.clamp_min(self.eps).reshape(shape))
        mean, std = self._cache[key]
        return (x - mean) / std

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}}  # workers make their own (no device tensors)

    def apply_columns(self, columns: Mapping[str, Any]) -> None:
        """Normalise a batch's NumPy columns in place (float fields the stats have): what a
        reader does with it as a dataset's ``transform``, in each ring or DataLoader worker."""
        for name, x in columns.items():
            found = self.stats.fields.get(name)
            if found is None or getattr(x, "dtype", None) is None or x.dtype.kind != "f":
                continue
            key = (name, "numpy", x.dtype)
            if key not in self._cache:
                mean = np.asarray(found["mean"], dtype=x.dtype)
                std = np.maximum(np.asarray(found["std"], dtype=x.dtype), self.eps)
                spatial = 2 if x.ndim - 1 - mean.ndim >= 2 else 0  # broadcast over (H, W)
                shape = (*mean.shape, *([1] * spatial))
                self._cache[key] = (mean.reshape(shape), std.reshape(shape))
            mean, std = self._cache[key]
            np.subtract(x, mean, out=x)
            np.divide(x, std, out=x)

    def check_dataset(self, columns: Columns) -> None:
        """A :class:`~chunkio.errors.WindowError` unless the stats fit the dataset whose
        batches hold ``columns`` (its :meth:`~chunkio.ChunkDataset.batch_columns`), a
        :class:`~chunkio.errors.TransformError` for a field it would leave as it is (called by
        the dataset that has it as ``transform``, before any worker starts).

        In place, it normalises float arrays: a field of samples of several shapes (a list)
        or integer images (two axes or more: ``uint8`` pixels) cannot take it and is refused;
        integer scalars and vectors (labels, times, codes) are left as they are. Stats of
        single variables are fitted to the fields that stack them first (:func:`fit_stats`)."""
        self.stats = fit_stats(self.stats, columns)
        check_stats(self.stats, columns)
        for name in self.stats.fields:
            info = columns.fields[name]
            shape = info.sample_shape
            if shape is None or not info.one_array_batches:
                raise TransformError(
                    f"{columns.location}: Normalize cannot apply to field {name!r} in place: "
                    f"it is {info.kind}, of samples of several shapes (a list); normalise the "
                    "samples after reading, or drop the field from the stats"
                )
            if info.dtype.kind != "f" and len(shape) >= 2:
                raise TransformError(
                    f"{columns.location}: Normalize writes (x - mean) / std into the batch in "
                    f"place; field {name!r} is {info.dtype} of shape {tuple(shape)}, which "
                    "cannot hold it. Normalise those batches on the device instead "
                    "(chunkio.transforms.normalize(x) for uint8 (B, C, H, W) images, or "
                    "norm(batch) on float tensors), or drop the field from the stats"
                )

    def __call__(self, batch: Any) -> Any:
        if isinstance(batch, Mapping):
            return {k: self._apply(k, v) for k, v in batch.items()}
        if isinstance(batch, tuple | list):
            if self.fields is None:
                raise WindowError("Normalize: tuple batches need fields=dataset.fields")
            return type(batch)(self._apply(k, v) for k, v in zip(self.fields, batch, strict=True))
        if self.fields is None or len(self.fields) != 1:
            raise WindowError("Normalize: a single-field batch needs fields=[its name]")
        return self._apply(self.fields[0], batch)


def fit_stats(stats: Stats, columns: Columns) -> Stats:
    """``stats`` keyed by the fields of a dataset (``columns``: what its batches hold,
    :meth:`~chunkio.ChunkDataset.batch_columns`).

    An entry named as a field is that field's. A numeric field the stats do not name whose
    arrays each have an entry of their own (``chunkio stats era5.zarr --fields t2m u10 v10``
    for a window stacking the three) takes theirs, stacked in its order of variables; every
    field reading those arrays does (a window and its target). Entries neither named nor
    used so are kept, for :func:`check_stats` to refuse.
    """
    own = {str(e["arrays"][0]): n for n, e in stats.fields.items() if len(e.get("arrays", [])) == 1}
    out = {n: e for n, e in stats.fields.items() if n in columns.fields}
    used = set(out)
    for name, info in columns.fields.items():
        if name in out or not info.plain_arrays or info.dtype.kind not in "iuf":
            continue
        arrays = [str(a) for a in info.arrays]
        names = [own[a] for a in arrays if a in own]
        if not arrays or len(names) < len(arrays):
            continue
        entries = [stats.fields[n] for n in names]
        stacked = info.stacked
        out[name] = {
            "arrays": arrays,
            "mean": [e["mean"] for e in entries] if stacked else entries[0]["mean"],
            "std": [e["std"] for e in entries] if stacked else entries[0]["std"],
            "count": min(int(e.get("count", 0)) for e in entries),
        }
        used.update(names)
    out.update({n: e for n, e in stats.fields.items() if n not in used})
    return Stats(fields=out, diff=stats.diff)


def check_stats(stats: Stats, columns: Columns) -> None:
    """Raise :class:`~chunkio.errors.WindowError` unless every field of ``stats`` is a field
    of the dataset whose batches hold ``columns``, reading the same arrays with as many
    channels."""
    where = columns.location
    for name, found in stats.fields.items():
        if name not in columns.fields:
            raise WindowError(
                f"{where}: the stats have field {name!r} (arrays {found.get('arrays')}); the "
                f"dataset's fields are {listing(list(columns.fields))}"
            )
        info = columns.fields[name]
        arrays = list(info.arrays)
        if list(found.get("arrays", [])) != arrays:
            raise WindowError(
                f"{where}: field {name!r} reads arrays {arrays}; the stats are of "
                f"{found.get('arrays')}"
            )
        channels = np.shape(found["mean"])
        sample = tuple(info.sample_shape or ())
        core = sample[int(info.stepped) :]
        stacked = info.stacked
        var = core[1:] if stacked else core
        want = (core[:1] if stacked else ()) + (var[:-2] if len(var) >= 2 else var)
        if tuple(channels) != tuple(want):
            raise WindowError(
                f"{where}: field {name!r}: stats of {channels} channels; its samples "
                f"{sample} need {want}"
            )
