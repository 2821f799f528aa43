"""A local HDF5 file as the dataset was made with it (:mod:`chunkio.backends.hdf5.described`):
an array rechunked, retyped or resized since is refused in the process that made the dataset
and in one it is pickled to, never read by the chunks the reads were planned on; a raw read
asked to start inside a chunk is refused, not shifted; a file of too many chunks is not
described (each process opens it through h5py) and reads the same rows; missing chunks are
named by their grid coordinates and the fill value they would read as."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import chunkio
from chunkio.backends import ReaderOptions
from chunkio.backends.hdf5 import described
from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.errors import FormatError, MissingChunkError

ROWS = np.arange(48 * 6, dtype=np.float32).reshape(48, 6)


def _file(path: Path) -> str:
    """48 rows of 6 values chunked by 8 rows (gzip, fletcher32), and a label per row."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=ROWS, chunks=(8, 6), compression="gzip", fletcher32=True)
        f["y"] = np.arange(48, dtype=np.int64) % 3
    return str(path)


def _rewrite(path: str, change: str) -> None:
    """Array ``x`` written again: rechunked, retyped (same item size) or with more rows."""
    with h5py.File(path, "r+") as f:
        del f["x"]
        if change == "chunks":
            f.create_dataset("x", data=ROWS * 2, chunks=(5, 6), compression="gzip")
        elif change == "dtype":
            f.create_dataset("x", data=ROWS.astype(np.int32), chunks=(8, 6), compression="gzip")
        else:
            f.create_dataset("x", data=np.concatenate([ROWS, ROWS[:8]]), chunks=(8, 6))


CHANGED = {
    "chunks": r"chunk shape \(5, 6\), made with \(8, 6\)",
    "dtype": r"dtype '<i4', made with '<f4'",
    "shape": r"shape \(56, 6\), made with \(48, 6\)",
}


@pytest.mark.parametrize("change", list(CHANGED))
def test_an_array_changed_since_the_dataset_was_made_is_refused_here_and_in_a_worker(
    tmp_path: Path, change: str
) -> None:
    """The reads are planned on the shape, chunks and dtype the dataset was made with: a
    file whose array has others now is a FormatError naming the file, the array, both values
    and what to do, in this process and in one the dataset is pickled to (as a spawned
    worker gets it), not rows of another chunk or bytes of another type."""
    path = _file(tmp_path / "a.h5")
    ds = chunkio.ChunkDataset(path, fields={"x": "x", "label": "y"})
    pickled = pickle.dumps(ds)
    _rewrite(path, change)
    message = rf"a\.h5: array 'x' changed since .*{CHANGED[change]}.*make the dataset again"
    with pytest.raises(FormatError, match=message):
        ds.read_batch([9, 40])
    with pytest.raises(FormatError, match=message):
        pickle.loads(pickled).read_batch([9, 40])


def test_a_file_rewritten_with_the_same_arrays_is_read_as_it_is_now(tmp_path: Path) -> None:
    """Values rewritten, the arrays' shape, chunks and dtype kept: read as they are now."""
    path = _file(tmp_path / "a.h5")
    ds = chunkio.ChunkDataset(path, fields={"x": "x", "label": "y"})
    with h5py.File(path, "r+") as f:
        del f["x"]
        f.create_dataset("x", data=ROWS * 3, chunks=(8, 6), compression="gzip")
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(ds)).read_batch([9, 40])["x"],
                                  ROWS[[9, 40]] * 3)  # fmt: skip


def test_a_raw_read_starting_inside_a_chunk_is_refused_not_shifted(tmp_path: Path) -> None:
    """Rows are read by whole stored chunks: a range starting inside one (planned on chunks
    the file no longer has) is a FormatError, never the chunk's rows from its first on."""
    path = str(tmp_path / "u.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(100, dtype=np.int32), chunks=(7,))
    reader = HDF5Reader(path)
    try:
        out = np.empty(5, np.int32)
        reader.read_into("x", [(7, 12)], out)  # on a chunk: read
        assert out.tolist() == [7, 8, 9, 10, 11]
        with pytest.raises(FormatError, match=r"u\.h5: array 'x' is stored in chunks of 7 rows"):
            reader.read_into("x", [(10, 15)], out)
        assert reader.read_path("x") == "raw"
    finally:
        reader.close()


def test_a_file_of_more_chunks_than_the_bound_is_not_described_and_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past :data:`~chunkio.backends.hdf5.described.MAX_DESCRIBED_CHUNKS` a file's description
    leaves its arrays out (what every worker is handed stays small): each process opens it
    through h5py and reads the same rows; what the arrays were made with still travels, so
    a rechunked file is refused there too."""
    path = _file(tmp_path / "a.h5")
    small = chunkio.ChunkDataset(path, fields={"x": "x", "label": "y"})
    monkeypatch.setattr(described, "MAX_DESCRIBED_CHUNKS", 5)  # x alone has 6
    ds = chunkio.ChunkDataset(path, fields={"x": "x", "label": "y"})
    documents: Any = ds.reader_options.documents
    assert small.reader_options.documents["arrays"] and not documents["arrays"]
    assert documents["made"]["x"] == ((48, 6), (8, 6), "<f4")
    opened: list[str] = []
    real = h5py.File
    monkeypatch.setattr(h5py, "File", lambda *a, **k: opened.append(str(a[0])) or real(*a, **k))
    idx = np.array([47, 0, 9, 8, 23])
    got = pickle.loads(pickle.dumps(ds)).read_batch(idx)
    np.testing.assert_array_equal(got["x"], ROWS[idx])
    np.testing.assert_array_equal(got["label"], idx % 3)
    assert opened  # h5py's first look, as without a description
    monkeypatch.setattr(h5py, "File", real)
    _rewrite(path, "chunks")
    with pytest.raises(FormatError, match=r"chunk shape \(5, 6\), made with \(8, 6\)"):
        pickle.loads(pickle.dumps(ds)).read_batch(idx)


def test_reader_options_repr_leaves_out_the_description(tmp_path: Path) -> None:
    """A description holds a file's chunk index: a repr (a log line) leaves it out."""
    path = _file(tmp_path / "a.h5")
    opts = chunkio.ChunkDataset(path, fields={"x": "x"}).reader_options
    assert opts.documents is not None and "documents" not in repr(opts)
    assert repr(opts) == repr(dataclasses.replace(opts, documents=None))
    assert "documents" in [f.name for f in dataclasses.fields(ReaderOptions)]


def test_a_missing_chunk_is_named_by_its_grid_coordinates_and_fill_value(tmp_path: Path) -> None:
    """A never-written chunk of an array chunked along several axes is named by its grid
    coordinates, one of whole rows by its row chunk; the message says what HDF5 would read
    it back as: the fill value, or zeros."""
    path = str(tmp_path / "m.h5")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("v", (8, 8, 6), np.int16, chunks=(4, 4, 3), fillvalue=7)
        d[:4] = 1
        f.create_dataset("r", (8, 3), np.int16, chunks=(4, 3))[:4] = 1
    reader = HDF5Reader(path)
    try:
        with pytest.raises(
            MissingChunkError, match=r"chunk \(1, 0, 0\) is missing .*fill value \(7\)"
        ):
            reader.read_region(
                "v", (slice(4, 6), slice(0, 2), slice(0, 2)), np.empty((2, 2, 2), np.int16)
            )
        with pytest.raises(MissingChunkError, match=r"'r': chunk 1 is missing .*back as zeros\)"):
            reader.read_region("r", (slice(4, 6), slice(0, 3)), np.empty((2, 3), np.int16))
    finally:
        reader.close()
