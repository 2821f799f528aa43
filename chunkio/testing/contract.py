"""The contract every read engine passes. Subclass :class:`BackendContract`, supply ``location``.

Each test writes through the backend's :class:`~chunkio.backends.Writer` and reads back through
a :class:`~chunkio.backends.Reader`, comparing with NumPy. A subclass picks the engine under
test by overriding :meth:`BackendContract.open` (e.g. zarr-python's general path, h5py instead
of raw chunk reads, a remote URL) and :attr:`BackendContract.shard_chunks` (arrays written in
shards of that many chunks where the format has shards).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chunkio.backends import Compression, open_reader, open_writer
from chunkio.backends.base import CODECS, Reader, StageClock, Writer
from chunkio.errors import MissingChunkError

__all__ = ["BackendContract", "assert_row_reads_agree"]

DTYPES = ["uint8", "uint16", "int64", "float32", "bool"]


def _fill(
    writer: Writer,
    name: str,
    data: np.ndarray[Any, Any],
    step: int,
    *,
    skip: int = -1,
    compression: Compression = Compression(),  # noqa: B008 - frozen value object
    shard_chunks: int | None = None,
) -> None:
    writer.create_rows_like(name, data, step, compression, shard_chunks)
    for c, start in enumerate(range(0, len(data), step)):
        if c != skip:
            writer.write_block(name, start, data[start : start + step])


class BackendContract:
    """Behaviour shared by the Zarr, HDF5 and in-memory backends.

    Where backends may differ, the test asks the reader's capability flags (e.g.
    ``reports_missing_chunks``), never its class.
    """

    #: write arrays in shards of this many chunks (formats without shards ignore it)
    shard_chunks: int | None = None
    #: the read path the reader under test must take (:meth:`~chunkio.backends.Reader.read_path`)
    read_path = ""

    @pytest.fixture
    def location(self) -> Any:  # pragma: no cover - supplied by subclasses
        raise NotImplementedError

    def open(self, location: Any) -> Reader:
        """The reader under test (default: what :func:`open_reader` picks)."""
        return open_reader(location)

    def fill(self, writer: Writer, name: str, data: Any, step: int, **kw: Any) -> None:
        _fill(writer, name, data, step, shard_chunks=self.shard_chunks, **kw)

    def write_and_open(self, location: Any, name: str, data: Any, step: int, **kw: Any) -> Reader:
        """Write array ``name`` of ``data`` at ``location`` (:meth:`fill`), then open the reader
        under test on it."""
        writer = open_writer(location)
        self.fill(writer, name, data, step, **kw)
        writer.close()
        return self.open(location)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_round_trip_of_chunk_ranges(self, location: Any, dtype: str) -> None:
        rng = np.random.default_rng(0)
        data = (rng.random((23, 3, 5)) * 200).astype(dtype)
        reader = self.write_and_open(location, "x", data, 4)
        try:
            ranges = [(0, 4), (8, 12), (12, 16), (20, 23)]
            out = np.empty((4 + 4 + 4 + 3, 3, 5), dtype=dtype)
            reader.read_into("x", ranges, out)
            expected = np.concatenate([data[a:b] for a, b in ranges])
            np.testing.assert_array_equal(out, expected)
            assert reader.read_path("x") == self.read_path  # the engine under test read it
        finally:
            reader.close()

    @pytest.mark.parametrize("codec", CODECS)
    @pytest.mark.parametrize("checksum", [True, False])
    def test_every_codec_round_trips(self, location: Any, codec: str, checksum: bool) -> None:
        data = np.arange(10 * 6, dtype=np.uint16).reshape(10, 6) * 7
        reader = self.write_and_open(
            location, "x", data, 4, compression=Compression(codec, 3, checksum)
        )
        out = np.empty_like(data)
        reader.read_into("x", [(0, 4), (4, 8), (8, 10)], out)
        reader.close()
        np.testing.assert_array_equal(out, data)

    def test_declares_capabilities_and_times_its_stages(self, location: Any) -> None:
        data = np.arange(40, dtype=np.int64).reshape(10, 4)
        reader = self.write_and_open(location, "x", data, 3)
        try:
            assert isinstance(reader.reports_missing_chunks, bool)
            assert isinstance(reader.clock, StageClock)
            before = reader.clock.total()
            reader.read_into("x", [(0, 3), (3, 6)], np.empty((6, 4), np.int64))
            assert reader.clock.total() > before
        finally:
            reader.close()

    def test_reads_into_a_view_of_a_larger_buffer(self, location: Any) -> None:
        data = np.arange(40, dtype=np.int64).reshape(10, 4)
        reader = self.write_and_open(location, "x", data, 3)
        buf = np.full((12, 4), -1, dtype=np.int64)
        reader.read_into("x", [(3, 6), (9, 10)], buf[2:6])
        reader.close()
        np.testing.assert_array_equal(buf[2:6], np.concatenate([data[3:6], data[9:10]]))
        assert (buf[:2] == -1).all() and (buf[6:] == -1).all()

    def test_attrs_and_array_info(self, location: Any) -> None:
        writer = open_writer(location)
        self.fill(writer, "img", np.zeros((7, 2, 2), np.uint8), 2)
        writer.set_attrs({"chunkio": {"a": [1, 2], "b": "x"}, "chunkio_complete": True})
        assert writer.attrs()["chunkio"] == {"a": [1, 2], "b": "x"}
        writer.close()
        reader = self.open(location)
        try:
            assert reader.attrs()["chunkio"] == {"a": [1, 2], "b": "x"}
            assert reader.attrs()["chunkio_complete"] is True
            assert reader.array_names() == ["img"]
            info = reader.array_info("img")
            assert (info.shape, info.chunks[0]) == ((7, 2, 2), 2)
            assert info.dtype == np.dtype(np.uint8)
        finally:
            reader.close()

    def test_all_zero_chunks_are_stored_and_read_back_as_zeros(self, location: Any) -> None:
        reader = self.write_and_open(location, "z", np.zeros((6, 3), np.float32), 3)
        try:
            assert reader.chunk_exists("z", 0) and reader.chunk_exists("z", 1)
            out = np.ones((6, 3), np.float32)
            reader.read_into("z", [(0, 3), (3, 6)], out)
            assert (out == 0).all()
        finally:
            reader.close()

    def test_missing_chunk_is_reported_not_zeros(self, location: Any) -> None:
        reader = self.write_and_open(
            location, "x", np.arange(12, dtype=np.int64).reshape(6, 2), 2, skip=1
        )
        try:
            assert not reader.chunk_exists("x", 1)
            out = np.empty((2, 2), np.int64)
            reader.read_into("x", [(0, 2)], out)
            if not reader.reports_missing_chunks:
                return  # it reads unwritten chunks as the fill value; chunk_exists tells
            with pytest.raises(MissingChunkError, match="chunk 1"):
                reader.read_into("x", [(2, 4)], out)
        finally:
            reader.close()

    def test_row_ranges_outside_the_array_are_refused(self, location: Any) -> None:
        """A range past either end, or reversed, names the array, the range and the rows: not
        the fill value, nothing written, or another chunk's rows."""
        data = np.arange(20, dtype=np.float32).reshape(10, 2)
        reader = self.write_and_open(location, "x", data, 4)
        try:
            for start, stop in [(-4, 0), (8, 12), (12, 16), (4, 0)]:
                out = np.full((4 + max(0, stop - start), 2), -1, np.float32)
                with pytest.raises(IndexError, match=rf"'x'.* rows {start}:{stop} outside 0:10"):
                    reader.read_into("x", [(0, 4), (start, stop)], out)
            out = np.empty((2, 2), np.float32)
            reader.read_into("x", [(8, 10), (10, 10)], out)  # the last rows, an empty range
            np.testing.assert_array_equal(out, data[8:10])
        finally:
            reader.close()

    def test_read_region_returns_any_box(self, location: Any) -> None:
        data = np.random.default_rng(1).integers(0, 1000, (3, 10, 9, 7)).astype(np.int32)
        writer = open_writer(location)
        writer.create_array(
            "v",
            shape=data.shape,
            dtype=data.dtype,
            chunks=(1, 4, 4, 3),
            compression=Compression(),
            shard_chunks=self.shard_chunks,
        )
        for i in range(3):
            writer.write_block("v", i, data[i : i + 1])
        writer.close()
        reader = self.open(location)
        # whole volume, unaligned, one chunk, empty
        boxes = [
            (0, 1, 0, 10, 0, 9, 0, 7),
            (1, 3, 3, 9, 2, 5, 6, 7),
            (2, 3, 4, 8, 4, 8, 3, 6),
            (0, 3, 5, 5, 0, 9, 0, 7),
        ]
        try:
            for box in boxes:
                region = tuple(slice(a, b) for a, b in zip(box[::2], box[1::2], strict=True))
                out = np.full(data[region].shape, -1, np.int32)
                reader.read_region("v", region, out)
                np.testing.assert_array_equal(out, data[region])
            with pytest.raises(IndexError, match="outside"):
                too_far = (slice(0, 1), slice(0, 11), slice(0, 9), slice(0, 7))
                reader.read_region("v", too_far, np.empty((1, 11, 9, 7), np.int32))
        finally:
            reader.close()

    def test_read_region_reports_missing_chunks(self, location: Any) -> None:
        data = np.arange(2 * 6 * 4, dtype=np.int16).reshape(2, 6, 4)
        writer = open_writer(location)
        writer.create_array(
            "v",
            shape=data.shape,
            dtype=data.dtype,
            chunks=(1, 3, 2),
            compression=Compression(),
            shard_chunks=self.shard_chunks,
        )
        writer.write_block("v", 0, data[:1])
        writer.close()
        reader = self.open(location)
        try:
            out = np.empty((1, 2, 2), np.int16)
            reader.read_region("v", (slice(0, 1), slice(2, 4), slice(1, 3)), out)
            np.testing.assert_array_equal(out, data[:1, 2:4, 1:3])
            if not reader.reports_missing_chunks:
                return  # it reads unwritten chunks as the fill value; chunk_exists tells
            with pytest.raises(MissingChunkError, match="chunk"):
                reader.read_region("v", (slice(1, 2), slice(2, 4), slice(1, 3)), out)
        finally:
            reader.close()


def assert_row_reads_agree(
    fast: Reader, general: Reader, name: str, data: np.ndarray[Any, Any], rng: Any
) -> None:
    """A read path under test and the general one it must equal read the same random whole
    chunks of rows of array ``name`` (holding ``data``) into differently pre-filled buffers;
    both equal ``data``."""
    step = fast.array_info(name).chunks[0]
    chunks = sorted({int(c) for c in rng.integers(0, -(-len(data) // step), size=3)})
    ranges = [(c * step, min((c + 1) * step, len(data))) for c in chunks]
    rows = sum(b - a for a, b in ranges)
    a = np.full((rows, *data.shape[1:]), 7, data.dtype)
    b = np.full((rows, *data.shape[1:]), 9, data.dtype)
    fast.read_into(name, ranges, a)
    general.read_into(name, ranges, b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.concatenate([data[p:q] for p, q in ranges]))
