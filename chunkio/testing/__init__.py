"""Test support shipped with chunkio (needs pytest): the backend contract suite
(:mod:`chunkio.testing.contract`), real servers on loopback (:mod:`chunkio.testing.servers`:
in CI one that cannot start fails the run) and a pytest plugin that ends a run with its skips
counted by reason (:mod:`chunkio.testing.skips`).

Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends` and :mod:`chunkio.remote`.
"""
