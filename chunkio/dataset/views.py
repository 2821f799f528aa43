"""What a dataset hands the layers below it, as values: a columns transform's
:class:`~chunkio.transforms.sample.Columns` (and, built by :class:`~chunkio.ChunkDataset`
itself, the label check's :class:`~chunkio.sampling.label_check.LabelSource`).

Those layers never receive the dataset itself (its layout, options and files stay its own):
the dataset builds what each needs, and hands it through one method each
(:meth:`~chunkio.ChunkDataset.batch_columns`, :meth:`~chunkio.ChunkDataset.label_source`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..format.layout import DatasetLayout, FieldInfo
from ..transforms.sample import Column, Columns

__all__ = ["batch_columns", "column"]


def column(info: FieldInfo) -> Column:
    """Field ``info`` as a columns transform checks it."""
    return Column(
        arrays=tuple(str(a) for a in info.array_names()),
        dtype=info.dtype,
        sample_shape=None if info.sample_shape is None else tuple(info.sample_shape),
        kind=info.kind,
        plain_arrays=info.kind_def.plain_arrays,
        one_array_batches=info.kind_def.one_array_batches,
        # a window's field (chunkio.format.windows): its steps axis, its variables stacked
        stepped=bool(getattr(info, "stepped", False)),
        stacked=bool(getattr(info, "stacked", False)),
    )


def batch_columns(location: object, layout: DatasetLayout, fields: Sequence[str]) -> Columns:
    """The selected ``fields`` of ``layout``, in batch order, as a columns transform checks
    them."""
    where = str(location)
    return Columns(location, {name: column(layout.field(name, where=where)) for name in fields})
