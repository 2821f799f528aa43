"""The one conversion engine and what it runs: tasks, blocks, plans and the writer protocol.

:mod:`.core` (:func:`drive`: in-process, a process pool or dask), :mod:`.processes` and
:mod:`.workers` (the pool and how many workers), :mod:`.blocks` (a source's rows in
chunk-aligned blocks), :mod:`.writing`, :mod:`.chunking`, where
the values of ragged (:mod:`.ragged`), sparse (:mod:`.sparse`) and encoded (:mod:`.encoded`)
fields go, the arrays created for them (:mod:`.creation`) and each field kind's writes
(:mod:`.kinds`). Modules here may
import :mod:`chunkio.util`, :mod:`chunkio.errors`, :mod:`chunkio.format`, :mod:`chunkio.backends`,
:mod:`chunkio.sampling.order`, the vocabulary of :mod:`chunkio.convert` and
:mod:`chunkio.convert.durability`, never the entry points themselves, the read side's datasets
or diagnostics.
"""

from __future__ import annotations
