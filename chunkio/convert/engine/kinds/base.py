"""What every field kind's writes answer: :class:`FieldWrites`, made once per field per
conversion (planned from the samples' shapes before any block) and pickled to the workers."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ....backends import Compression, Writer
from ....errors import SourceError
from ....format.grid import SampleGrid
from ....format.layout import FieldInfo
from ...source import BlockSource
from ..creation import Initial
from ..writing import Sync

__all__ = ["FieldWrites", "Initial", "Write", "check_shapes_given", "mean_chunk_nbytes"]

#: ``(array, start, values)``: one write of a block (or of the creation)
Write = tuple[str, int, Any]


class FieldWrites:
    """How one field of a kind is written: checked blocks, their writes and syncs, the arrays
    created up front. Subclasses (one module of this package per kind) set ``kind`` and
    override what differs."""

    kind: ClassVar[str]
    field: FieldInfo

    @classmethod
    def check_source(cls, f: FieldInfo, source: BlockSource) -> None:
        """Raise a :class:`~chunkio.errors.SourceError` unless ``source`` can give field ``f``."""
        raise NotImplementedError

    @classmethod
    def chunk_nbytes(cls, f: FieldInfo, source: BlockSource, spc: int) -> int:
        """Bytes one sample chunk of field ``f`` decodes to (on average): whether its arrays
        are large enough to be written as shards."""
        raise NotImplementedError

    @classmethod
    def joined(cls, f: FieldInfo, parts: list[Any]) -> Any:
        """Field ``f``'s values of consecutive pieces of a block (read from several files),
        as one block's."""
        return [sample for part in parts for sample in part]  # a list per sample

    @classmethod
    def plan(
        cls, f: FieldInfo, source: BlockSource, grid: SampleGrid, shard_chunks: int
    ) -> FieldWrites:
        """Where field ``f``'s samples go, planned before any block is read."""
        raise NotImplementedError

    def placement(self) -> tuple[str, int, bytes] | None:
        """What a resumed conversion must agree on besides the source (where values were
        placed): the digest it goes in (``"ragged"`` or ``"encoded"``), its rank there (the
        digests hash ragged fields, then sparse ones, as they always have: a rerun of a
        conversion an earlier version started agrees) and the bytes; ``None``: nothing."""
        return None

    def create(
        self, writer: Writer, num_samples: int, compression: Compression, shard_chunks: int
    ) -> Initial:
        """Create the field's arrays; those written whole now, and what must be durable."""
        raise NotImplementedError

    def checked(self, value: Any, rows: int) -> Any:
        """The field's ``value`` from a source block of ``rows`` samples, checked as far as
        it can be before it is packed."""
        raise NotImplementedError

    def writes(self, start: int, chunks: tuple[int, int], value: Any) -> list[Write]:
        """The writes of a checked block of samples from ``start``, sample chunks
        ``[first, stop)``."""
        raise NotImplementedError

    def aligned(self) -> tuple[str, ...]:
        """The arrays a block writes chunk for chunk with the sample axis (synced with the
        block's sample chunks)."""
        return ()

    def syncs(self, chunks: tuple[int, int]) -> list[Sync]:
        """What else a block of sample chunks ``[first, stop)`` must make durable."""
        return []


def mean_chunk_nbytes(f: FieldInfo, source: BlockSource, spc: int) -> int:
    """Average decoded bytes of a sample chunk of a field of samples of several shapes
    (``ragged_shapes``: an encoded image counts its pixels, a sparse row its values)."""
    shapes = np.asarray(source.ragged_shapes(f.name), np.int64)  # type: ignore[attr-defined]
    mean = float(np.prod(shapes, axis=1).mean()) if len(shapes) else 0.0
    return int(mean * f.dtype.itemsize * spc)


def check_shapes_given(f: FieldInfo, source: BlockSource) -> None:
    """A field of samples of several shapes: the source tells them before any block."""
    if not callable(getattr(source, "ragged_shapes", None)):
        raise SourceError(
            f"field {f.name!r} is {f.kind}: the source must provide "
            "ragged_shapes(name) -> (N, ndim) ints"
        )
