"""The write-time shuffle: the order in which a conversion stores its source's samples.

:mod:`.order` (the stored order, served a slice at a time, and the ``source_index`` field),
:mod:`.keyed` (the seeded bijection large orders use, pure numpy) and :mod:`.spill` (the
external two-pass shuffle of sources larger than memory; each field kind's part of a spill
file: :mod:`.spill_kinds`). Modules here may import
:mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.format`, :mod:`chunkio.backends`,
the vocabulary of :mod:`chunkio.convert`, :mod:`chunkio.convert.engine` and
:mod:`chunkio.convert.durability`.
"""

from __future__ import annotations
