"""The order samples are read in, and how well it mixes labels. :mod:`.order` (the canonical
order: one global batch sequence, whatever the worker count or world size; pure functions of
chunk sizes, seed and epoch), :mod:`.epoch_order` (that order generated block by block: an
epoch's first batch and a resume cost one pool's work, not the epoch's), :mod:`.file_order`
(the same order over many files: each file's chunks together, the pool a few files per lane),
:mod:`.sampler`
(:class:`ChunkBatchSampler`, per rank and resumable, and the read-amplification and
shuffle-quality metrics), :mod:`.label_metrics` (label mixing measured against a uniform
shuffle; the mixing *pool* that produces it is :mod:`.order`'s) and :mod:`.label_check` (the
one-time :class:`LabelMixingWarning` of a loader). Modules here may import :mod:`chunkio.util`,
:mod:`chunkio.errors`, :mod:`chunkio.format` and the backend protocol (:mod:`chunkio.backends`),
never the read side's
datasets, transport, conversion or diagnostics. Names are imported on first use (PEP 562), so
a converter that needs only :mod:`.order` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_names

if TYPE_CHECKING:
    from .epoch_order import rank_batches
    from .label_check import LabelMixingWarning
    from .label_metrics import label_mixing, stored_label_order
    from .sampler import (
        ChunkBatchSampler,
        describe_sampler,
        num_batches,
        read_amplification,
        shuffle_quality,
    )

_LAZY = {
    "ChunkBatchSampler": ".sampler",
    "LabelMixingWarning": ".label_check",
    "describe_sampler": ".sampler",
    "label_mixing": ".label_metrics",
    "num_batches": ".sampler",
    "rank_batches": ".epoch_order",
    "read_amplification": ".sampler",
    "shuffle_quality": ".sampler",
    "stored_label_order": ".label_metrics",
}

__all__ = [
    "ChunkBatchSampler",
    "LabelMixingWarning",
    "describe_sampler",
    "label_mixing",
    "num_batches",
    "rank_batches",
    "read_amplification",
    "shuffle_quality",
    "stored_label_order",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
