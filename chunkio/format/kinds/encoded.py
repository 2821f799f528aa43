"""``encoded``: images stored as JPEG, PNG, WebP or YUV 4:2:0 bytes (its ``encoding`` says
which): ``<name>__bytes`` (uint8), ``<name>__spans`` (N x 2: each sample's ``[start, stop)``
in the bytes) and ``<name>__shapes`` (N x 3: each decoded shape, channels first)."""

from __future__ import annotations

import numpy as np

from ...errors import FormatError
from ..grid import image_rule, image_shapes_ok
from .base import ArrayRoles, Arrays, FieldLike, Kind, check_flat, check_per_sample

__all__ = ["ENCODED", "FIELD_ENCODINGS", "EncodedKind", "encoded_array_names"]

#: what an encoded field may hold (see :mod:`chunkio.images.encoding`)
FIELD_ENCODINGS = ("jpeg", "png", "webp", "yuv420")


def encoded_array_names(name: str) -> tuple[str, str, str]:
    """Arrays that store encoded field ``name``: bytes, spans, shapes."""
    return f"{name}__bytes", f"{name}__spans", f"{name}__shapes"


class EncodedKind(Kind):
    name = "encoded"
    flat = True
    sample_shape = "any"  # one when every image has it: it sizes every batch of the field

    def roles(self, info: FieldLike) -> ArrayRoles:
        data, spans, shapes = encoded_array_names(info.name)
        return ArrayRoles(info.name, self.name, bytes=data, spans=spans, shapes=shapes)

    def check(self, info: FieldLike) -> None:
        if info.encoding is None:
            raise FormatError(
                f"field {info.name!r}: an encoding goes with kind 'encoded' only; got kind "
                f"{self.name!r} and encoding None"
            )
        if info.encoding not in FIELD_ENCODINGS:
            raise FormatError(
                f"field {info.name!r}: encoding must be one of {list(FIELD_ENCODINGS)}; "
                f"got {info.encoding!r}"
            )

    def check_stored(self, name: str, sample_shape: tuple[int, ...] | None, encoding: str) -> None:
        shape = sample_shape
        if shape is None:
            return
        declared = np.array([shape], dtype=np.int64)
        if len(shape) != 3 or not image_shapes_ok(declared, encoding)[0]:
            raise FormatError(
                f"field {name!r}: sample_shape {list(shape)} is no image shape: "
                f"expected {image_rule(encoding)}"
            )

    def check_arrays(self, info: FieldLike, arrays: Arrays, n: int, spc: int, where: str) -> None:
        roles = self.roles(info)
        check_flat(arrays, roles.bytes, info, where)
        check_per_sample(arrays, roles.spans, 2, n, spc, where)
        check_per_sample(arrays, roles.shapes, 3, n, spc, where)


ENCODED = EncodedKind()
