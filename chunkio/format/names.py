"""Validation of names that become paths inside a dataset (fields, arrays)."""

from __future__ import annotations

import re

from ..errors import UnsafeInputError

__all__ = ["validate_field_name"]

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,127}")


def validate_field_name(name: object, *, where: str = "") -> str:
    """Return ``name`` if it is a safe field name, else raise :class:`UnsafeInputError`.

    Field names become array paths inside a Zarr group or HDF5 file, so anything that could
    escape the dataset root or name a nested path (``..``, ``/``, ``\\``, NUL, absolute
    paths) is refused, as is anything but a short identifier.

    >>> validate_field_name("image")
    'image'
    >>> validate_field_name("../etc")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chunkio.errors.UnsafeInputError: field name must match ...; got '../etc'
    """
    if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
        suffix = f" in {where}" if where else ""
        raise UnsafeInputError(
            f"field name must match [A-Za-z_][A-Za-z0-9_-]{{0,127}}; got {name!r}{suffix}"
        )
    return name
