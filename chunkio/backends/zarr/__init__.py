"""The Zarr v3 backend (private: use it through :mod:`chunkio.backends`).

:mod:`.backend` (:class:`ZarrReader`, :class:`ZarrWriter`), :mod:`.engine` (the one read engine:
a byte source x a chunk index x the chunk codec), :mod:`.sources` (local files or object-store
ranges), :mod:`.documents` (remote metadata documents), :mod:`.chunks`, :mod:`.shard_format`,
:mod:`.shard` and :mod:`.shard_index` (chunk keys, the shard format, a sharded array's layout,
its shards' indexes), :mod:`.writing` and :mod:`.pack` (chunks and shards written directly,
small files packed before publishing). Modules here may
import :mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.format`, :mod:`chunkio.remote`
(fsspec stores) and the rest of :mod:`chunkio.backends`, never the HDF5 backend, the read side,
sampling or conversion.
"""

from __future__ import annotations
