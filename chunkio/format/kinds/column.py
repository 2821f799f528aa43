"""``column``: a member of a compound dataset (:class:`chunkio.format.columns.ColumnInfo`),
read whole from its table ``array``; made when a store is opened, never stored."""

from __future__ import annotations

from .base import ArrayRoles, FieldLike
from .dense import DenseKind

__all__ = ["COLUMN", "ColumnKind"]


class ColumnKind(DenseKind):
    name = "column"
    stored = False
    plain_arrays = False  # a member of a table, read whole
    window_source = False
    read_whole = True

    def roles(self, info: FieldLike) -> ArrayRoles:
        return ArrayRoles(info.name, self.name, values=info.array or info.name)


COLUMN = ColumnKind()
