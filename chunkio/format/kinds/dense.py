"""``dense``: one array named like the field, shape ``(N, *sample_shape)``, a row per sample."""

from __future__ import annotations

from ...errors import FormatError
from .base import ArrayRoles, Arrays, FieldLike, Kind

__all__ = ["DENSE", "DenseKind"]


class DenseKind(Kind):
    name = "dense"
    one_row = True
    plain_arrays = True
    one_array_batches = True
    window_source = True

    def roles(self, info: FieldLike) -> ArrayRoles:
        return ArrayRoles(info.name, self.name, values=info.array or info.name)

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        name = info.array or info.name
        shape, dtype, chunks = arrays[name]
        expected = (n, *(info.sample_shape or ()))
        if tuple(shape) != expected or dtype != info.dtype:
            raise FormatError(
                f"{where}: array {name!r} should be {expected} {info.dtype}; "
                f"got {tuple(shape)} {dtype}"
            )
        if n and chunks[0] != spc:
            raise FormatError(
                f"{where}: array {name!r} must hold {spc} samples per chunk; got {chunks[0]}"
            )


DENSE = DenseKind()
