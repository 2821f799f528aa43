"""make_loader's one open of a path: the dataset described through a reader that is then left
open for the loader's other metadata reads (its labels), and closed when the loader is made."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..backends import Reader
from ..collection.files import is_file_list
from . import ChunkDataset

__all__ = ["opened"]


@contextmanager
def opened(
    path: Any,
    fields: Sequence[str] | str | None,
    transform: Callable[[Any], Any] | None,
    storage_options: Mapping[str, Any] | None,
) -> Iterator[tuple[ChunkDataset, Reader | None]]:
    """A dataset and the reader that described it, left open for the caller's other
    metadata reads (make_loader's labels) and closed on exit: one open in all."""
    if is_file_list(path):  # each file is opened and closed while describing them
        yield ChunkDataset(path, fields, transform, storage_options=storage_options), None
        return
    dataset = ChunkDataset.__new__(ChunkDataset)
    dataset._configure(path, transform, storage_options=storage_options)
    reader = dataset._metadata_reader()
    try:
        dataset._describe(reader, fields)
        if dataset.reader_options.fill_missing:
            # a user's store: never-written chunks read as the fill value, the caller's
            # reads too (make_loader's labels): reopen the reader as the dataset reads
            reader.close()
            reader = dataset._metadata_reader()
        yield dataset, reader
    finally:
        reader.close()
