"""Foundations every other package may import, and that import nothing else from chunkio.

:mod:`.numeric` (the integer arithmetic of chunk grids), :mod:`.lazy` (names of a package
imported on first use), :mod:`.atomic` (files written whole or not at all) and :mod:`.fsync`
(what "durably written" means). Internal: not part of the public API. Modules here may import only
the standard library and NumPy, never another chunkio package.
"""

from __future__ import annotations
