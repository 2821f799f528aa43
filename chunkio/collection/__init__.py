"""Many files or stores read as one dataset (``ChunkDataset([path1, path2, ...])``).

:mod:`.files` describes the files once, in the parent (their fields checked to match, their
categorical fields' categories united, their chunks end to end for the chunk-aware order;
many files in forked processes, one per core, :mod:`.describe`);
:mod:`.core` reads them in each process, opening each file on its first read and keeping a
bounded number open. Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.backends` (the protocol), :mod:`chunkio.format`, :mod:`chunkio.read` and
:mod:`chunkio.transforms` (the field transform's type), never sampling, transport,
conversion or diagnostics.
"""
