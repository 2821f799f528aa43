"""Arrays chunked by rows: every chunk a run of rows along axis 0, whole along the others."""

from __future__ import annotations

from typing import Any

import numpy as np

from .backends import Compression, Writer

__all__ = ["create_row_chunked"]


def create_row_chunked(
    writer: Writer,
    name: str,
    like: np.ndarray[Any, Any],
    rows: int,
    compression: Compression,
    shard_chunks: int | None = None,
) -> None:
    """Create array ``name`` through ``writer`` with the shape and dtype of ``like``, chunked
    every ``rows`` rows along axis 0 (``shard_chunks``: as :meth:`Writer.create_array`)."""
    writer.create_array(
        name,
        shape=like.shape,
        dtype=like.dtype,
        chunks=(rows, *like.shape[1:]),
        compression=compression,
        shard_chunks=shard_chunks,
    )
