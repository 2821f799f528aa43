"""Each field kind's writes: one module per kind (:mod:`.dense`, :mod:`.ragged`,
:mod:`.encoded`, :mod:`.sparse`), each one :class:`~.base.FieldWrites` class that checks what
a source gives for a field, plans where its samples go, creates its arrays and turns a block
into writes and syncs. :data:`WRITE_KINDS` is the write side's registry, beside the
definitions in :data:`chunkio.format.kinds.KINDS` and the readers in
:data:`chunkio.read.core.FIELD_KINDS`: a kind written by conversions is one module here and
one entry there. Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends`, :mod:`chunkio.sampling.order`, the vocabulary
of :mod:`chunkio.convert` and :mod:`chunkio.convert.durability`, never the entry points
themselves, the read side's datasets or diagnostics.
"""

from __future__ import annotations

from ....errors import SourceError
from ....format.layout import FieldInfo
from .base import FieldWrites, Initial, Write
from .dense import DenseWrites
from .encoded import EncodedWrites
from .ragged import RaggedWrites
from .sparse import SparseWrites

__all__ = ["WRITE_KINDS", "FieldWrites", "Initial", "Write", "write_kind"]

#: field kind -> how a field of it is written (window and column fields are read-only)
WRITE_KINDS: dict[str, type[FieldWrites]] = {
    k.kind: k for k in (DenseWrites, RaggedWrites, EncodedWrites, SparseWrites)
}


def write_kind(f: FieldInfo) -> type[FieldWrites]:
    """How field ``f`` is written; a :class:`~chunkio.errors.SourceError` for a kind that is
    read only (a window, a dataframe column)."""
    try:
        return WRITE_KINDS[f.kind]
    except KeyError:
        raise SourceError(
            f"field {f.name!r} is {f.kind}, which a dataset does not store; a source gives "
            f"fields of the kinds {list(WRITE_KINDS)}"
        ) from None
