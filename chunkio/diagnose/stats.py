"""``chunkio stats``: per-field, per-channel mean and std of a dataset in one streaming pass
over its chunks (:class:`chunkio.Stats`; see :mod:`chunkio.transforms.stats` for the rules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader
from ..errors import WindowError
from ..format.grid import SampleGrid
from ..transforms.stats import Stats

__all__ = ["compute_stats"]


class _Moments:
    """Count, mean and sum of squared deviations, per channel, merged chunk by chunk; NaN
    (values CF decoding masked) are left out, so counts may differ per channel."""

    def __init__(self) -> None:
        self.n: Any = 0
        self.mean: npt.NDArray[np.float64] | None = None
        self.m2: npt.NDArray[np.float64] | None = None

    def add(self, block: npt.NDArray[Any], axes: tuple[int, ...]) -> None:
        x = block.astype(np.float64, copy=False)
        if not x.size:
            return
        valid = ~np.isnan(x)
        n = valid.sum(axis=axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, np.where(valid, x, 0).sum(axis=axes) / np.maximum(n, 1), 0)
        m2 = np.where(valid, (x - np.expand_dims(mean, axes)) ** 2, 0).sum(axis=axes)
        if self.mean is None or self.m2 is None:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        total = np.maximum(self.n + n, 1)
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.n * n / total)
        self.n = self.n + n


def _array_moments(
    reader: Reader, array: str, rows_per_chunk: int, diff: bool, coding: Any = None
) -> tuple[_Moments, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``coding``: the array's CF coding (``decode_cf``), applied to each block first."""
    info = reader.array_info(array)
    shape = tuple(int(n) for n in info.shape)
    grid = SampleGrid(shape[0], rows_per_chunk)
    axes = (0, len(shape) - 2, len(shape) - 1) if len(shape) >= 3 else (0,)
    moments, last = _Moments(), None
    for c in range(grid.num_chunks):
        a, b = grid.bounds(c)
        block = np.empty((b - a, *shape[1:]), info.dtype)
        reader.read_into(array, [(a, b)], block)
        if coding is not None:
            decoded = np.empty(block.shape, coding.dtype)
            coding.decode(block, decoded)
            block = decoded
        if diff:
            joined = block if last is None else np.concatenate([last, block])
            last = block[-1:]
            block = np.diff(joined.astype(np.float64), axis=0)
        moments.add(block, axes)
    if moments.mean is None or moments.m2 is None:
        raise WindowError(f"{reader.location}: array {array!r} has no steps to compute stats of")
    return moments, moments.mean, np.sqrt(moments.m2 / np.maximum(moments.n, 1))


def compute_stats(dataset: Any, *, diff: bool = False) -> Stats:
    """Mean and std of every numeric field of ``dataset`` (a :class:`chunkio.ChunkDataset`),
    per channel, over all of its arrays' steps (not only the anchors), in one pass."""
    reader = dataset._metadata_reader()
    out: dict[str, dict[str, Any]] = {}
    try:
        for name in dataset.fields:
            info = dataset.layout.field(name)
            if not info.kind_def.plain_arrays or info.dtype.kind not in "iuf":
                continue
            arrays = info.array_names()
            rows = getattr(info, "rows", None) or (dataset.layout.rows_per_chunk(info),)
            codings = info.cf.codings if info.cf is not None else (None,) * len(arrays)
            found = [
                _array_moments(reader, a, rows[j] if j < len(rows) else rows[0], diff, codings[j])
                for j, a in enumerate(arrays)
            ]
            stacked = bool(getattr(info, "stacked", False))
            mean = np.stack([m for _, m, _ in found]) if stacked else found[0][1]
            std = np.stack([s for _, _, s in found]) if stacked else found[0][2]
            out[name] = {
                "arrays": list(arrays),
                "mean": mean.tolist(),
                "std": std.tolist(),
                "count": int(np.max(found[0][0].n)),
            }
    finally:
        reader.close()
    return Stats(fields=out, diff=diff)
