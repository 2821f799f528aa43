"""``window``: steps of dense arrays around each anchor
(:class:`chunkio.format.windows.WindowInfo`, which lists the arrays it reads); made when a
dataset is opened with :class:`chunkio.Field` steps, never stored."""

from __future__ import annotations

from .base import ArrayRoles, Arrays, FieldLike, Kind

__all__ = ["WINDOW", "WindowKind"]


class WindowKind(Kind):
    name = "window"
    stored = False
    plain_arrays = True
    one_array_batches = True

    def roles(self, info: FieldLike) -> ArrayRoles:
        # a window reads several dense arrays (WindowInfo.arrays): none has one role
        return ArrayRoles(info.name, self.name)

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        return None  # never stored: its dense arrays are checked as their own fields


WINDOW = WindowKind()
