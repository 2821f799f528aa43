"""chunkio."""
