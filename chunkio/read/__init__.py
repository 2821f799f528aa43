"""The read side's core, one module per field kind.

:mod:`.core` (:class:`ReadCore`, one per process) maps each field to the reader of its kind:
:mod:`.dense`, :mod:`.ragged`, :mod:`.encoded`, :mod:`.windows`, :mod:`.sparse` (rows of CSR
matrices scattered into dense batches); :mod:`.patches` serves
:class:`chunkio.patches.PatchDataset`. Every read is plan (pure, :mod:`chunkio.read.planning`) ->
read (the backend's :class:`~chunkio.backends.Reader`) -> scatter into the batch, through a
:class:`DecodedChunkCache` per field (:mod:`.cache`).

One name per concept: a *reader* is a backend handle on the store's files
(:class:`~chunkio.backends.Reader`, opened as :class:`~chunkio.backends.ReaderOptions` say); a
process's *read core* (:class:`ReadCore`) holds one reader and serves each field through that
field's reads (:class:`~.base.FieldReads`), each batch as a :class:`~.base.ReadRequest` asks;
a dataset's *handle* in a process is its read core
(:class:`chunkio.util.handles.PerProcessHandle`).

Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends`, :mod:`chunkio.images` (decoders) and
:mod:`chunkio.transforms`, never sampling, transport, conversion or diagnostics.
"""

from .base import PatchReadStats, ReadStats, read_whole
from .cache import DecodedChunkCache
from .core import ReadCore
from .patches import PadMode

__all__ = ["DecodedChunkCache", "PadMode", "PatchReadStats", "ReadCore", "ReadStats", "read_whole"]
