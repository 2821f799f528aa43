"""Deprecated: ``convert_arrays`` and its block sizes moved to :mod:`chunkio.convert.arrays`
(beside ``write_arrays``). Importing them from here still works for one release, with a
``DeprecationWarning`` at the importing line."""

from __future__ import annotations

from ..util.deprecated import moved_names

__all__: list[str] = []

__getattr__ = moved_names(
    __name__,
    dict.fromkeys(
        ("convert_arrays", "STORE_BLOCK_BYTES", "STORE_READ_BYTES"), "chunkio.convert.arrays"
    ),
)
