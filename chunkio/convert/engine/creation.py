"""The arrays a conversion creates before any block: every ragged, sparse and encoded field's,
with those written whole at creation (offsets and shapes), and what must then be durable."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backends import Compression, Writer
from .encoded import EncodedPlan
from .ragged import RaggedPlan
from .sparse import SparsePlan
from .writing import Sync

__all__ = ["Initial", "create_encoded", "create_ragged", "create_sparse"]

#: the arrays written whole when a dataset is created, and what must then be made durable
Initial = tuple[list[tuple[str, int, Any]], list[Sync]]


def create_encoded(
    writer: Writer, plan: EncodedPlan, compression: Compression, shard_chunks: int
) -> Initial:
    """Create an encoded field's three arrays; the shapes are written whole, at creation (the
    bytes and spans by the blocks)."""
    data, spans, shapes = plan.names
    spc = plan.grid.samples_per_chunk
    n = plan.grid.num_samples
    writer.create_array(
        data,
        shape=(plan.num_bytes,),
        dtype=np.dtype(np.uint8),
        chunks=(plan.chunk_len,),
        compression=compression,
        shard_chunks=plan.shard_chunks,
    )
    writer.create_array(
        spans,
        shape=(n, 2),
        dtype=np.dtype(np.int64),
        chunks=(spc, 2),
        compression=compression,
        shard_chunks=shard_chunks,
    )
    writer.create_rows_like(shapes, plan.shapes, spc, compression, shard_chunks)
    return [(shapes, 0, plan.shapes)], [((shapes,), 0, plan.grid.num_chunks)]


def create_ragged(writer: Writer, plan: RaggedPlan, compression: Compression) -> Initial:
    """Create a ragged field's three arrays; offsets and shapes are written whole, at
    creation."""
    values, offsets, shapes = plan.names
    spc = plan.grid.samples_per_chunk
    writer.create_array(
        values,
        shape=(plan.num_values,),
        dtype=plan.field.dtype,
        chunks=(plan.chunk_len,),
        compression=compression,
        shard_chunks=plan.shard_chunks,
    )
    whole = [(offsets, 0, plan.offsets), (shapes, 0, plan.shapes)]
    for name, _, arr in whole:
        writer.create_rows_like(name, arr, spc, compression, plan.group)
    return list(whole), [((offsets, shapes), 0, plan.grid.num_chunks + 1)]


def create_sparse(writer: Writer, plan: SparsePlan, compression: Compression) -> Initial:
    """Create a sparse field's four arrays: those of a ragged field of its values, and its
    columns chunked alike."""
    initial = create_ragged(writer, plan.values, compression)
    values = plan.values
    writer.create_array(
        plan.names[1],
        shape=(values.num_values,),
        dtype=plan.index,
        chunks=(values.chunk_len,),
        compression=compression,
        shard_chunks=values.shard_chunks,
    )
    return initial
