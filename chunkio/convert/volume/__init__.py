"""The steps of :func:`~chunkio.convert.volumes.convert_volumes`: files, values, tasks, results.

:mod:`.sources` (TIFF stacks, NIfTI, ``.npy``/``.npz``), :mod:`.values` (dtype choice,
narrowing, NaN handling), :mod:`.tasks` (decode and write one volume), :mod:`.results` (what
a finished volume leaves besides its chunks), and the OME-Zarr output: :mod:`.ome` (one volume
as an OME-Zarr 0.5 image) and :mod:`.ome_output` (the collection, staged and resumable).
Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.format`,
:mod:`chunkio.backends`, the vocabulary of :mod:`chunkio.convert`, :mod:`chunkio.convert.engine`
and :mod:`chunkio.convert.durability`.
"""

from __future__ import annotations
