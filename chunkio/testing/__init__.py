"""Test support shipped with chunkio (needs pytest): the backend contract suite
(:mod:`chunkio.testing.contract`), real servers on loopback (:mod:`chunkio.testing.servers`:
in CI one that cannot start fails the run), a pytest plugin that ends a run with its skips
counted by reason (:mod:`chunkio.testing.skips`) and the check that the compiled parts are
built (:mod:`chunkio.testing.compiled`: in CI a missing one fails ``make test``).

Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format`, :mod:`chunkio.backends` and :mod:`chunkio.remote`.
"""
