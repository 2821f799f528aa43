"""``ragged``: samples of varying shape, three arrays: ``<name>__values`` (all elements,
flat), ``<name>__offsets`` (N + 1 element offsets) and ``<name>__shapes`` (N x ndim)."""

from __future__ import annotations

from ...errors import FormatError
from .base import ArrayRoles, Arrays, FieldLike, Kind, check_flat

__all__ = ["RAGGED", "RaggedKind", "ragged_array_names"]


def ragged_array_names(name: str) -> tuple[str, str, str]:
    """Arrays that store ragged field ``name``: values, offsets, shapes."""
    return f"{name}__values", f"{name}__offsets", f"{name}__shapes"


class RaggedKind(Kind):
    name = "ragged"
    flat = True
    sample_shape = "none"

    def roles(self, info: FieldLike) -> ArrayRoles:
        values, offsets, shapes = ragged_array_names(info.name)
        return ArrayRoles(info.name, self.name, values=values, offsets=offsets, shapes=shapes)

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        roles = self.roles(info)
        offsets, shapes = roles.offsets, roles.shapes
        check_flat(arrays, roles.values, info, where)
        (oshape, otype, _), (sshape, stype, _) = arrays[offsets], arrays[shapes]
        if tuple(oshape) != (n + 1,) or otype.kind not in "iu":
            raise FormatError(
                f"{where}: array {offsets!r} must hold {n + 1} integer offsets; got "
                f"{tuple(oshape)} {otype}"
            )
        if len(sshape) != 2 or sshape[0] != n or sshape[1] < 1 or stype.kind not in "iu":
            raise FormatError(
                f"{where}: array {shapes!r} must be ({n}, ndim) integers; got "
                f"{tuple(sshape)} {stype}"
            )


RAGGED = RaggedKind()
