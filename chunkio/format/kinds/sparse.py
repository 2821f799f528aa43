"""``sparse``: rows of a CSR matrix (``sample_shape == (n_cols,)``; read as dense rows).

Stored natively as a ragged field of each row's values with their columns beside them:
``<name>__values``, ``<name>__indices`` (the column of each value, chunked like the values),
``<name>__offsets`` (N + 1: where each row's values start) and ``<name>__shapes`` (N x 1: each
row's number of values). A CSR group read in place (:class:`chunkio.format.sparse.SparseInfo`
with a ``group``) has the same roles in its ``data``, ``indices`` and ``indptr`` arrays.
"""

from __future__ import annotations

from ...errors import FormatError
from .base import ArrayRoles, Arrays, FieldLike, Kind

__all__ = ["SPARSE", "SparseKind", "sparse_array_names"]


def sparse_array_names(name: str) -> tuple[str, str, str, str]:
    """Arrays that store sparse field ``name`` natively: values, indices (their columns),
    offsets, shapes (values per row)."""
    return f"{name}__values", f"{name}__indices", f"{name}__offsets", f"{name}__shapes"


class SparseKind(Kind):
    name = "sparse"
    flat = True
    sized_by_arrays = True

    def roles(self, info: FieldLike) -> ArrayRoles:
        group = str(getattr(info, "group", "") or "")  # a CSR group read in place
        if group:
            data, indices, indptr = (f"{group}/{a}" for a in ("data", "indices", "indptr"))
            return ArrayRoles(info.name, self.name, values=data, indices=indices, offsets=indptr)
        values, indices, offsets, shapes = sparse_array_names(info.name)
        return ArrayRoles(
            info.name, self.name, values=values, indices=indices, offsets=offsets, shapes=shapes
        )

    def check_stored(self, name: str, sample_shape: tuple[int, ...] | None, encoding: str) -> None:
        if sample_shape is None or len(sample_shape) != 1:
            shape = None if sample_shape is None else list(sample_shape)
            raise FormatError(
                f"field {name!r}: a sparse field's sample_shape is [n_cols]; got {shape}"
            )

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        roles = self.roles(info)
        values, indices = roles.values, roles.indices
        for name, shape in ((roles.offsets, (n + 1,)), (roles.shapes, (n, 1))):
            if tuple(arrays[name][0]) != shape or arrays[name][1].kind not in "iu":
                raise FormatError(
                    f"{where}: array {name!r} of sparse field {info.name!r} must be {shape} "
                    f"integers; got {tuple(arrays[name][0])} {arrays[name][1]}"
                )
        (vshape, vdtype, vchunks), (ishape, idtype, ichunks) = arrays[values], arrays[indices]
        if vdtype != info.dtype or idtype.kind not in "iu":
            raise FormatError(
                f"{where}: sparse field {info.name!r}: {values!r} must hold {info.dtype} and "
                f"{indices!r} integers; got {vdtype} and {idtype}"
            )
        if len(vshape) != 1 or tuple(vshape) != tuple(ishape) or tuple(vchunks) != tuple(ichunks):
            raise FormatError(
                f"{where}: sparse field {info.name!r}: {values!r} and {indices!r} must be 1-D "
                f"arrays of one length and chunking; got {tuple(vshape)} / {tuple(ishape)}, "
                f"chunks {tuple(vchunks)} / {tuple(ichunks)}"
            )


SPARSE = SparseKind()
