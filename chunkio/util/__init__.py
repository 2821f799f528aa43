"""Foundations every other package may import, and that import nothing else from chunkio.

:mod:`.numeric` (the integer arithmetic of chunk grids), :mod:`.lazy` (names of a package
imported on first use), :mod:`.atomic` (files written whole or not at all) and :mod:`.fsync`
(what "durably written" means), :mod:`.deprecated` (keywords moved into option objects, still
accepted for one release with a warning at the caller's line), :mod:`.messages` (lists capped
in error messages, and the options they advise spelled as the command's flags), :mod:`.shm` (named
shared-memory segments) and :mod:`.shared_stack` (arrays in shared memory that several
processes decode together, block by block). Internal: not part of the public
API. Modules here may import only the standard library, NumPy and :mod:`chunkio.errors` (the
other foundation), never another chunkio package.
"""

from __future__ import annotations
