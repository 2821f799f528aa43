"""Test support shipped with chunkio (needs pytest): the backend contract suite
(:mod:`chunkio.testing.contract`) and real servers on loopback (:mod:`chunkio.testing.servers`)."""
