"""The conversion pipeline: sources -> chunk-aligned blocks -> a chunkio dataset.

Every converter takes how the dataset is stored as one :class:`Output` and how the
conversion runs as one :class:`Execution`, with one set of defaults.

:func:`write_arrays` writes in-memory or lazy arrays; :func:`convert_arrays` streams the
arrays of an existing HDF5 file or Zarr store; :func:`run_conversion` drives any
:class:`BlockSource`. Local destinations are written atomically (built in a staging sibling,
renamed into place when complete), resumably (a rerun skips finished blocks) and exclusively
(a second converter fails fast); see :mod:`chunkio.convert.durability.staging`. ``write_arrays``,
``convert_images`` and ``append_arrays`` store samples in a seeded random order by default,
with a ``source_index`` field mapping rows back; see :mod:`chunkio.convert.shuffle.order`.

The entry points sit at the top (:mod:`.images`, :mod:`.arrays` (``write_arrays`` and
``convert_arrays``), :mod:`.volumes`, :mod:`.append`, :mod:`.pipeline`) with the vocabulary
they share (:mod:`.options`, :mod:`.progress`, :mod:`.source`) and the sources they read
(:mod:`.array_source`, :mod:`.store_source`); below them :mod:`.engine`,
:mod:`.durability`, :mod:`.shuffle`, :mod:`.image` and :mod:`.volume`, which may import that
vocabulary but no entry point. Modules here may import :mod:`chunkio.util`,
:mod:`chunkio.errors`, :mod:`chunkio.format`, :mod:`chunkio.backends`, :mod:`chunkio.images`,
:mod:`chunkio.read` (to stream a store), :mod:`chunkio.collection` (to stream many files as
one), :mod:`chunkio.sampling.order` and their own parts (:mod:`chunkio.convert.engine`,
:mod:`chunkio.convert.durability`, :mod:`chunkio.convert.shuffle`,
:mod:`chunkio.convert.image`, :mod:`chunkio.convert.volume`), never the datasets, the loader
or diagnostics.
"""

from __future__ import annotations

from .append import append_arrays
from .arrays import convert_arrays, write_arrays
from .engine.chunking import DEFAULT_CHUNK_BYTES, choose_samples_per_chunk
from .options import Execution, Output
from .pipeline import run_conversion
from .source import BlockSource, ConversionResult

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "BlockSource",
    "ConversionResult",
    "Execution",
    "Output",
    "append_arrays",
    "choose_samples_per_chunk",
    "convert_arrays",
    "run_conversion",
    "write_arrays",
]
