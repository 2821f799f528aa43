"""Array metadata sized or shaped to hurt, refused before anything is allocated or divided by
it; zarr-python's own decode errors on its fallback path typed (RELIABILITY rows 28, 34).

Arrays are written by zarr-python, then their ``zarr.json`` edited as a damaged or hostile
file would have it: a chunk or shard of 0 (a ``ZeroDivisionError`` in the read plan), a chunk
of 2**40 along an axis of 4 (32 TiB allocated for one decode), an array of 10**12 rows read
whole (an index array sized by its declaration alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from chunkio.backends.base import MAX_WHOLE_BYTES, read_all
from chunkio.backends.zarr.backend import ZarrReader
from chunkio.backends.zarr.engine import ArrayEngine
from chunkio.backends.zarr.metadata import MAX_CHUNK_BYTES
from chunkio.backends.zarr.sources import LocalFiles
from chunkio.errors import CorruptChunkError, FormatError


def _array(root: Path, *, shards: tuple[int, ...] | None = None) -> Path:
    group = zarr.open_group(root, mode="w", zarr_format=3)
    a = group.create_array(
        "a", shape=(40, 4), chunks=(8, 4), shards=shards, dtype="f4", compressors=[ZstdCodec()]
    )
    a[...] = np.arange(160, dtype="f4").reshape(40, 4)
    return root / "a" / "zarr.json"


def _edit(document: Path, change: Any) -> dict[str, Any]:
    doc = json.loads(document.read_text())
    change(doc)
    document.write_text(json.dumps(doc))
    return dict(doc)


def _grid(doc: dict[str, Any]) -> list[int]:
    shape: list[int] = doc["chunk_grid"]["configuration"]["chunk_shape"]
    return shape


@pytest.mark.parametrize(
    ("shards", "change", "says"),
    [
        (None, lambda d: _grid(d).__setitem__(1, 0), "'chunk_shape' must be a list of integers"),
        (None, lambda d: _grid(d).__setitem__(1, 2**40), f"at most {MAX_CHUNK_BYTES} expected"),
        ((16, 4), lambda d: _grid(d).__setitem__(0, 0), "'chunk_shape' must be a list of integers"),
        (
            (16, 4),
            lambda d: d["codecs"][0]["configuration"]["chunk_shape"].__setitem__(0, 2**40),
            f"at most {MAX_CHUNK_BYTES} expected",
        ),
    ],
    ids=["chunk-0", "chunk-2^40", "shard-0", "inner-2^40"],
)
def test_a_chunk_or_shard_of_none_or_too_much_is_refused_before_a_read(
    tmp_path: Path, shards: tuple[int, ...] | None, change: Any, says: str
) -> None:
    """Through the reader, and through the engine built on the document alone."""
    doc = _edit(_array(tmp_path / "s.zarr", shards=shards), change)
    reader = ZarrReader(str(tmp_path / "s.zarr"))
    with pytest.raises(FormatError, match=r"array 'a' \(zarr\.json\): ") as caught:
        reader.read_into("a", [(0, 8)], np.empty((8, 4), "f4"))
    assert says in str(caught.value)
    with pytest.raises(FormatError, match="array 'a'"):
        ArrayEngine.build(LocalFiles(str(tmp_path / "s.zarr" / "a")), "a", doc)


def test_an_array_read_whole_is_bounded_by_its_declared_size(tmp_path: Path) -> None:
    """An index array declaring 10**12 rows (its chunks never written) is refused by
    ``read_all`` before it allocates them; the intact array reads."""
    document = _array(tmp_path / "s.zarr")
    np.testing.assert_array_equal(
        read_all(ZarrReader(str(tmp_path / "s.zarr")), "a")[:, 0], np.arange(0, 160, 4)
    )
    _edit(document, lambda d: d.__setitem__("shape", [10**12, 4]))
    reader = ZarrReader(str(tmp_path / "s.zarr"))
    with pytest.raises(
        FormatError, match=r"array 'a' declares shape \(1000000000000, 4\)"
    ) as caught:
        read_all(reader, "a")
    assert f"at most {MAX_WHOLE_BYTES} expected" in str(caught.value)


def test_zarr_pythons_decode_errors_on_the_general_path_are_corrupt_chunk_errors(
    tmp_path: Path,
) -> None:
    """A Zstd chunk cut short, read by zarr-python (``use_engine=False``): its
    ``RuntimeError`` becomes a CorruptChunkError naming the store, array and chunks; rows
    and boxes alike."""
    _array(tmp_path / "s.zarr")
    chunk = tmp_path / "s.zarr" / "a" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-6])
    reader = ZarrReader(str(tmp_path / "s.zarr"), use_engine=False)
    out = np.empty((8, 4), "f4")
    reader.read_into("a", [(0, 8)], out)  # the chunks before it still read
    with pytest.raises(CorruptChunkError, match=r"array 'a', samples 8\.\.15 \(chunks 1\.\.1\)"):
        reader.read_into("a", [(8, 16)], out)
    with pytest.raises(CorruptChunkError, match=r"array 'a': a chunk of box"):
        reader.read_region("a", (slice(8, 16), slice(0, 4)), out)
