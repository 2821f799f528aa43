"""The steps of :func:`~chunkio.convert.images.convert_images`: scan, check, plan, read, encode,
write.

:mod:`.scan` (which files, in which order, with which label), :mod:`.check` (the check pass),
:mod:`.plan` (what is decided before writing), :mod:`.source` (checked files read as samples),
:mod:`.encoding` (how each image of an encoded field is stored) and :mod:`.write` (the write
pass planned: its options, chunks per block, estimated cost). Modules here may import
:mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.format`, :mod:`chunkio.backends`,
:mod:`chunkio.images` (the codecs), the vocabulary of :mod:`chunkio.convert`,
:mod:`chunkio.convert.engine`, :mod:`chunkio.convert.durability` and
:mod:`chunkio.convert.shuffle`.
"""

from __future__ import annotations
