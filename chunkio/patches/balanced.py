"""Label-balanced patch sampling from the coarse per-chunk label index.

A fraction ``foreground`` of each epoch's patches is placed on a labelled voxel: a class is
drawn (by ``classes`` weights, or "any foreground" in proportion to voxel counts), then a
(volume, chunk) holding it in proportion to its voxels there, then one of the voxel positions
the index stored for it; the patch is centred on that voxel, shifted inside the volume where
needed (so it always contains the voxel). The other patches are uniformly random (centred in
the dataset's mask, when it has one; foreground patches follow the labels, not the mask). Only the
index (read once, kilobytes) is used: no label volume is scanned at training time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import FormatError
from ..format.label_index import LabelIndex
from ..util.messages import listing
from ..util.numeric import IntArray
from .samplers import _CountedSampler, locality_order

__all__ = ["LabelBalancedSampler"]


class LabelBalancedSampler(_CountedSampler):
    """Patches of which a fraction is centred on foreground (or on chosen classes).

    Parameters
    ----------
    num_patches
        As for :class:`~chunkio.patches.RandomPatchSampler`.
    foreground
        Fraction of patches centred on a labelled voxel (exactly ``round(foreground * n)``).
    classes
        ``None``: any value other than ``background`` is foreground (voxel-weighted). A
        sequence of label values: foreground patches are shared equally among them. A mapping
        ``value -> weight``: shared in proportion to the weights.
    background
        The label value that is not foreground.

    Examples
    --------
    >>> s = LabelBalancedSampler(64, foreground=0.5, classes=[1, 2], seed=0)
    """

    kind = "label_balanced"

    def __init__(
        self,
        num_patches: int | None = None,
        *,
        foreground: float = 0.5,
        classes: Sequence[int] | Mapping[int, float] | None = None,
        background: int = 0,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(num_patches, seed=seed, rank=rank, world_size=world_size)
        if not isinstance(foreground, int | float) or not 0.0 <= float(foreground) <= 1.0:
            raise ValueError(f"foreground must be a fraction in [0, 1]; got {foreground!r}")
        self.foreground = float(foreground)
        self.background = int(background)
        self.class_weights = _normalize_classes(classes)

    @property
    def label_index(self) -> LabelIndex:
        index = self._label_index
        if index is None:
            raise FormatError(
                "label-balanced sampling needs the per-chunk label index, and this dataset "
                "has none: convert it with labels (convert_volumes(..., labels=...))"
            )
        return index

    def _check_bound(self) -> None:
        index = self.label_index
        present = set(np.unique(index.value).tolist())
        wanted = (
            set(self.class_weights)
            if self.class_weights is not None
            else present - {self.background}
        )
        missing = sorted(wanted - present)
        if missing:
            raise ValueError(
                f"classes {listing(missing)} occur in no label volume; values present: "
                f"{listing(sorted(present))}"
            )
        if self.foreground > 0 and not wanted:
            raise ValueError(
                f"foreground={self.foreground} but the labels hold only the background value "
                f"{self.background}; set foreground=0 or check the labels"
            )

    def global_keys(self, epoch: int) -> IntArray:
        rng = np.random.default_rng([self.seed, epoch])
        n = self.num_patches
        n_fg = round(self.foreground * n)
        keys = np.concatenate(
            [
                self._foreground_keys(n_fg, rng),
                self._uniform(n - n_fg, rng),
            ]
        )
        return keys[locality_order(keys, self.patch_size, self.volumes, rng)]

    def _foreground_keys(self, n: int, rng: np.random.Generator) -> IntArray:
        index = self.label_index
        if self.class_weights is None:
            rows = np.flatnonzero(index.value != self.background)
            picked = _weighted(rows, index.voxels[rows], n, rng)
        else:
            values = np.array(list(self.class_weights), np.int64)
            p = np.array(list(self.class_weights.values()), np.float64)
            cls = rng.choice(len(values), size=n, p=p / p.sum())
            picked = np.empty(n, np.int64)
            for i, value in enumerate(values.tolist()):
                mask = cls == i
                rows = np.flatnonzero(index.value == value)
                picked[mask] = _weighted(rows, index.voxels[rows], int(mask.sum()), rng)
        point = index.points[picked, rng.integers(0, index.points.shape[1], size=n)]
        volume = index.volume[picked]
        shapes = np.asarray(self.volumes.shapes, np.int64)[volume]
        size = np.asarray(self.patch_size, np.int64)
        origin = np.clip(point - size // 2, 0, np.maximum(shapes - size, 0))
        return np.column_stack([volume, origin]).astype(np.int64)

    def config(self) -> dict[str, Any]:
        classes = None
        if self.class_weights is not None:
            classes = [[k, v] for k, v in self.class_weights.items()]
        return {
            **super().config(),
            "foreground": self.foreground,
            "classes": classes,
            "background": self.background,
        }


def _weighted(rows: IntArray, weights: IntArray, n: int, rng: np.random.Generator) -> IntArray:
    if n == 0:
        return np.zeros(0, np.int64)
    p = weights.astype(np.float64)
    out: IntArray = rows[rng.choice(len(rows), size=n, p=p / p.sum())]
    return out


def _normalize_classes(
    classes: Sequence[int] | Mapping[int, float] | None,
) -> dict[int, float] | None:
    if classes is None:
        return None
    if isinstance(classes, Mapping):
        weights = {int(k): float(v) for k, v in classes.items()}
    else:
        weights = {int(c): 1.0 for c in classes}
    if not weights or any(not np.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError(f"classes must name label values with weights >= 0; got {classes!r}")
    if sum(weights.values()) <= 0:
        raise ValueError(f"class weights must not all be zero; got {classes!r}")
    return weights
