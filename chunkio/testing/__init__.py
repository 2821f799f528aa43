"""Test support shipped with chunkio: the backend contract suite (needs pytest)."""
