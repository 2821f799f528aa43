"""Test support shipped with chunkio (needs pytest): the backend contract suite
(:mod:`chunkio.testing.contract`) and real servers on loopback (:mod:`chunkio.testing.servers`).

Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends` and :mod:`chunkio.remote`.
"""
