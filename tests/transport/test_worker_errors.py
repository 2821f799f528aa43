"""A data error reaches the user as the same class whatever route read it (issue 40).

A corrupt or missing chunk read in this process, by ring workers or by DataLoader workers must
raise the same typed error (``except CorruptChunkError`` works with any ``num_workers``), and
from a worker the message names that worker and keeps the reader's own words.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from pathlib import Path

import pytest

from chunkio import Workers, make_loader
from chunkio.errors import ChunkReadError, CorruptChunkError, MissingChunkError

ROUTES = [(0, "ring", "local"), (2, "ring", "ring"), (2, "dataloader", "dataloader")]
WORKER = {"local": None, "ring": r"ring worker \d \(pid \d+\)", "dataloader": "worker process"}


def _chunk(path: str) -> Path:
    """The file of the image array's chunk 1 (samples 16..31) of a Zarr store."""
    (chunk,) = Path(path, "image").glob("c.1.*")  # chunkio's keys: "c.<chunk>.0.0.0"
    return chunk


def _break(path: str, how: str) -> None:
    chunk = _chunk(path)
    data = bytearray(chunk.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0xFF
        chunk.write_bytes(bytes(data))
    elif how == "truncate":
        chunk.write_bytes(bytes(data[: len(data) // 2]))
    else:
        os.remove(chunk)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("how", "error"),
    [("flip", CorruptChunkError), ("truncate", CorruptChunkError), ("delete", MissingChunkError)],
)
def test_a_bad_chunk_raises_the_same_class_on_every_route(make_dataset, how, error):
    path, _ = make_dataset("zarr", samples_per_chunk=16)
    _break(path, how)
    for workers, transport, route in ROUTES:
        loader = make_loader(
            path,
            16,
            fields=["image", "label"],
            num_workers=workers,
            workers=Workers(context="fork", transport=transport),
        )
        assert loader.transport == route
        with pytest.raises(ChunkReadError) as info:
            for _ in loader:
                pass
        loader.close()
        assert type(info.value) is error, (route, type(info.value))
        text = str(info.value)
        assert "'image'" in text and "chunk 1" in text, (route, text)  # the reader's words
        if WORKER[route] is not None:
            assert re.search(WORKER[route], text), (route, text)


@pytest.mark.timeout(60)
def test_a_failed_pass_stops_its_dataloader_workers_at_once(make_dataset):
    """The DataLoader route stops its (persistent) workers when a pass fails, as the ring does:
    left to the garbage collector (the error's traceback holds the pass in a cycle), torch's
    iterator waits 5 s per worker, in whatever later code the collector happens to run."""
    path, _ = make_dataset("zarr", samples_per_chunk=16)
    _break(path, "flip")
    loader = make_loader(
        path,
        16,
        fields=["image", "label"],
        num_workers=2,
        workers=Workers(context="fork", transport="dataloader"),
    )
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(CorruptChunkError) as info:
        for _ in loader:
            pass
    assert info.value.__traceback__ is not None  # the error, and the pass it holds, kept
    assert [p for p in multiprocessing.active_children() if p.pid not in before] == []
