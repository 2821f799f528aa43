"""Raw chunk reads for HDF5 datasets whose filter pipeline is one chunkio writes.

HDF5's own read path (``read_direct``) runs each chunk through the library's filter pipeline
under h5py's global lock: it checks Fletcher-32 a word at a time, decompresses into a
temporary buffer and copies the selection out, which costs about twice what the bytes need. For
datasets chunked along the sample axis only, with the filters chunkio writes (one of LZ4, Blosc,
Zstd or deflate, then optionally fletcher32 last), this module reads each stored chunk with one
``pread`` at the offset HDF5's chunk index gives, checks its checksum
(:mod:`chunkio.backends._checksum`) and decodes it with numcodecs, the decoders the Zarr path
uses, straight into the caller's buffer. Arrays chunked along other axes too are read by
boxes (:mod:`.grid`); anything else keeps using h5py; the backend contract tests run both
paths.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError, MissingChunkError
from ...util.numeric import ceil_div
from .._checksum import Fletcher32, fletcher32_body
from ..base import StageClock
from ..codec_table import HDF5_DECODERS, HDF5_SHUFFLE, Decode, unshuffle
from .grid import partial_chunks_unfiltered

__all__ = ["RawChunks"]

_FLETCHER32 = 3
#: a filter mask with every filter skipped (a partial edge chunk stored unfiltered)
_UNFILTERED = 0xFFFFFFFF
#: a contiguous dataset is read in runs of rows of about this many bytes (its "chunks")
CONTIGUOUS_RUN_BYTES = 1 << 20
#: chunks stored back to back are read together up to this many bytes (one chunk at least).
#: Each open dataset keeps a read buffer of max(this, its largest stored chunk): small, as a
#: worker may hold hundreds of files' datasets open (a few chunks of a sparse h5ad's 64 KiB)
RUN_READ_BYTES = 256 << 10


def run_rows(shape: Sequence[int], dtype: np.dtype[Any]) -> int:
    """Rows per run of :data:`CONTIGUOUS_RUN_BYTES` of a contiguous (or compact) array: the
    chunks it is read, and ordered, by (never the whole array as one chunk).

    >>> run_rows((100_000, 3, 64, 64), np.dtype("u1")), run_rows((10,), np.dtype("i8"))
    (85, 10)
    """
    row = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    return min(max(1, CONTIGUOUS_RUN_BYTES // max(1, row)), max(1, int(shape[0])))


@dataclass
class RawChunks:
    """Where the stored chunks of one HDF5 dataset lie in its file, and how to decode them."""

    path: str
    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    decode: Decode | None
    checksum: bool
    #: chunk index along axis 0 -> (byte offset, stored size); absent: never written, or
    #: written with a filter mask naming filters the pipeline does not have
    index: dict[int, tuple[int, int]]
    #: chunks h5py reads (a partial edge chunk, a filter mask this reader does not know)
    masked: frozenset[int] = frozenset()
    #: the filter pipeline's ids, in order, and the chunks written with some of them skipped
    #: (chunk -> filter mask: bit i set, filter i skipped, e.g. Blosc on data it cannot shrink)
    filters: tuple[int, ...] = ()
    skipped: dict[int, int] = field(default_factory=dict)
    #: the byte shuffle filter ran before the compressor
    shuffled: bool = False
    #: a contiguous dataset read in runs (the last one short)
    contiguous: bool = False
    _buffer: npt.NDArray[np.uint8] = field(default_factory=lambda: np.empty(0, np.uint8))
    _fletcher: Fletcher32 = field(default_factory=Fletcher32)
    #: chunk -> (offset, size, stored checksum) whose Fletcher-32 this process has checked,
    #: valid while the file is unchanged (see :meth:`check_file`)
    _verified: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    _file_state: tuple[int, ...] = ()

    @classmethod
    def build(cls, dset: Any, path: str, name: str) -> RawChunks | None:
        """The raw reader for ``dset`` when its layout and filters allow one, else None."""
        chunks = dset.chunks
        dtype = np.dtype(dset.dtype)
        if (
            dset.ndim == 0
            or (chunks is not None and tuple(chunks[1:]) != tuple(dset.shape[1:]))
            or dset.is_virtual
            or dtype.hasobject
            or dtype.fields is not None
            or (dtype.itemsize > 1 and dtype.byteorder not in ("<", "="))
            or sys.byteorder != "little"
        ):
            return None
        plist = dset.id.get_create_plist()
        if plist.get_external_count() > 0:
            return None
        if chunks is None:
            return cls._contiguous(dset, path, name, dtype, plist)
        ids = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        checksum = bool(ids) and ids[-1] == _FLETCHER32
        rest = ids[:-1] if checksum else ids
        shuffled = bool(rest) and rest[0] == HDF5_SHUFFLE
        rest = rest[1:] if shuffled else rest
        if len(rest) > 1 or (rest and rest[0] not in HDF5_DECODERS):
            return None
        index: dict[int, tuple[int, int]] = {}
        masked: set[int] = set()
        skipped: dict[int, int] = {}
        step = int(chunks[0])

        def visit(info: Any) -> None:
            chunk = int(info.chunk_offset[0]) // step
            if info.filter_mask >> len(ids):
                masked.add(chunk)  # skips filters the pipeline does not have: HDF5's to judge
                return
            if info.filter_mask:
                skipped[chunk] = int(info.filter_mask)
            index[chunk] = (int(info.byte_offset), int(info.size))

        if hasattr(dset.id, "chunk_iter"):
            dset.id.chunk_iter(visit)
        else:  # pragma: no cover - HDF5 < 1.14
            for i in range(dset.id.get_num_chunks()):
                visit(dset.id.get_chunk_info(i))
        edge, nbytes = int(dset.shape[0]) // step, int(np.prod(chunks)) * dtype.itemsize
        unfiltered = partial_chunks_unfiltered(plist) if ids else False
        if dset.shape[0] % step and edge in index and unfiltered:
            skipped[edge] = _UNFILTERED  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS: stored as is
        elif dset.shape[0] % step and unfiltered is None and index.get(edge, (0, 0))[1] == nbytes:
            # libhdf5 cannot be asked whether partial edge chunks skip the filters (stored
            # with filter mask 0 at the chunk's full size): h5py reads that one. One of
            # another size went through the filters and decodes here, its size checked.
            masked.add(edge)
        return cls(
            path=path,
            name=name,
            shape=tuple(int(s) for s in dset.shape),
            chunks=tuple(int(c) for c in chunks),
            dtype=dtype,
            decode=HDF5_DECODERS[rest[0]] if rest else None,
            checksum=checksum,
            index=index,
            masked=frozenset(masked),
            shuffled=shuffled,
            filters=tuple(ids),
            skipped=skipped,
        )

    @classmethod
    def _contiguous(
        cls, dset: Any, path: str, name: str, dtype: np.dtype[Any], plist: Any
    ) -> RawChunks | None:
        """A contiguous dataset (no filters: its rows lie in order at one offset), read in runs
        of :data:`CONTIGUOUS_RUN_BYTES` as if chunked so."""
        import h5py

        offset = dset.id.get_offset()
        if plist.get_layout() != h5py.h5d.CONTIGUOUS or offset is None or not dset.shape[0]:
            return None  # compact, or never written (h5py reads the fill value)
        row = int(np.prod(dset.shape[1:], dtype=np.int64)) * dtype.itemsize
        rows = run_rows(dset.shape, dtype)
        n = int(dset.shape[0])
        index = {
            c: (int(offset) + c * rows * row, min(rows, n - c * rows) * row)
            for c in range(ceil_div(n, rows))
        }
        return cls(
            path=path,
            name=name,
            shape=tuple(int(s) for s in dset.shape),
            chunks=(rows, *(int(s) for s in dset.shape[1:])),
            dtype=dtype,
            decode=None,
            checksum=False,
            index=index,
            contiguous=True,
        )

    def _steps(self, chunk: int) -> tuple[bool, Decode | None, bool]:
        """``(shuffled, decoder, checksum)``: the filters that ran on chunk ``chunk``."""
        mask = self.skipped.get(chunk, 0)
        if not mask:
            return self.shuffled, self.decode, self.checksum
        ran = {f for i, f in enumerate(self.filters) if not mask >> i & 1}
        decode = self.decode if ran & HDF5_DECODERS.keys() else None
        return HDF5_SHUFFLE in ran, decode, _FLETCHER32 in ran

    def _decode_into(
        self, decode: Decode | None, body: npt.NDArray[np.uint8], flat: npt.NDArray[np.uint8]
    ) -> None:
        if decode is not None:
            decode(body, flat)
        elif body.size == flat.size or (self.contiguous and body.size < flat.size):
            flat[: body.size] = body  # a contiguous dataset's last run is short
        else:
            raise ValueError(f"{body.size} stored bytes, expected {flat.size}")

    @property
    def chunk_rows(self) -> int:
        return self.chunks[0]

    def chunk_nbytes(self) -> int:
        return int(np.prod(self.chunks, dtype=np.int64)) * self.dtype.itemsize

    def check_file(self, fd: int) -> None:
        """Forget the verified chunks if the file changed since they were checked.

        Fletcher-32 is checked once per chunk per process while the file keeps its device,
        inode, size, modification and change times: any write through the file system
        changes the change time (``utime`` cannot set it back), so a chunk modified after
        its check is checked again. What this skips is re-checking bytes that nothing
        rewrote - in training, every later epoch (Fletcher-32 in NumPy costs about as much as
        decompressing LZ4, four times the crc32c of the Zarr path). Damage that bypasses the
        file system after the first read in a process is found by the next process.
        """
        st = os.fstat(fd)
        state = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if state != self._file_state:
            self._verified.clear()
            self._file_state = state

    def _samples(self, chunk: int) -> str:
        step = self.chunk_rows
        return f"{chunk * step}..{min(step, self.shape[0] - chunk * step) + chunk * step - 1}"

    def where(self, chunk: int) -> str:
        """Chunk ``chunk`` as messages name it."""
        return f"array {self.name!r}: chunk {chunk} (samples {self._samples(chunk)})"

    def locate(self, chunk: int) -> tuple[int, int]:
        """``(byte offset, stored size)`` of chunk ``chunk`` in the file;
        :class:`MissingChunkError` if it was never written."""
        found = self.index.get(chunk)
        if found is None:
            raise MissingChunkError(
                f"array {self.name!r}: chunk {chunk} is missing from the file (samples "
                f"{self._samples(chunk)}; HDF5 would read it back as the fill value)"
            )
        return found

    def read_run_into(
        self, fd: int, first: int, count: int, out: npt.NDArray[Any], clock: StageClock
    ) -> None:
        """Read, check and decode chunks ``first .. first + count - 1`` into ``out``, their
        rows in order (of the last one, as many as ``out`` has left). Chunks stored back to
        back in the file are read with one ``preadv`` (HDF5 writes a dataset's chunks in
        order), up to :data:`RUN_READ_BYTES` at a time."""
        index = self.index
        spans: list[tuple[int, int, int]] = []  # (chunk, byte offset, stored size)
        for chunk in range(first, first + count):
            found = index.get(chunk)
            if found is None:
                self.locate(chunk)  # raises, naming the chunk
                return  # pragma: no cover - locate raised
            spans.append((chunk, *found))
        rows, done = 0, 0
        while done < count:
            total, stop = spans[done][2], done + 1
            while stop < count and total + spans[stop][2] <= RUN_READ_BYTES:
                total += spans[stop][2]
                stop += 1
            rows = self._read_spans(fd, spans[done:stop], total, out, rows, clock)
            done = stop

    def _read_spans(
        self,
        fd: int,
        spans: list[tuple[int, int, int]],
        total: int,
        out: npt.NDArray[Any],
        rows: int,
        clock: StageClock,
    ) -> int:
        """Chunks ``spans`` (``total`` stored bytes) read into the buffer, by one ``preadv``
        per stretch stored back to back, then each checked and decoded into ``out`` from row
        ``rows`` on; the row after them."""
        t0 = time.perf_counter()
        if self._buffer.size < total:  # exactly: never past max(RUN_READ_BYTES, one chunk)
            self._buffer = np.empty(total, np.uint8)
        buffer = self._buffer
        # per stretch of chunks back to back: [its start in the buffer, its byte offset in
        # the file, its end in the buffer, its end in the file]
        stretches: list[list[int]] = []
        at = 0
        for _, offset, size in spans:
            if stretches and stretches[-1][3] == offset:
                stretches[-1][2] += size
                stretches[-1][3] += size
            else:
                stretches.append([at, offset, at + size, offset + size])
            at += size
        ends = []  # per stretch: (where the bytes read end in the buffer, where they should)
        for start, offset, end, _ in stretches:
            got = 0
            while got < end - start:  # Linux reads at most about 2 GiB per call
                n = os.preadv(fd, [buffer[start + got : end]], offset + got)  # type: ignore[list-item]
                if n <= 0:
                    break
                got += n
            ends.append((start + got, end))
        clock.read += time.perf_counter() - t0
        at, stretch, step = 0, 0, self.chunks[0]
        for chunk, _, size in spans:
            while ends[stretch][1] <= at and stretch + 1 < len(ends):  # (a chunk of 0 bytes)
                stretch += 1
            got = min(size, max(0, ends[stretch][0] - at))
            if got != size:
                raise CorruptChunkError(
                    f"{self.where(chunk)}: the file ends inside the chunk ({got} of {size})"
                )
            valid = min(step, len(out) - rows)
            self.decode_into(buffer[at : at + size], chunk, out[rows : rows + valid], clock)
            at += size
            rows += valid
        return rows

    def decode_into(
        self, raw: npt.NDArray[np.uint8], chunk: int, out: npt.NDArray[Any], clock: StageClock
    ) -> None:
        """Check and decode chunk ``chunk``'s stored bytes ``raw`` (writable: some decoders
        work in place) into ``out``, its first ``len(out)`` rows."""
        t1 = time.perf_counter()
        size = raw.size
        body = raw
        shuffled, decode, checksum = self._steps(chunk)
        if checksum:
            body = fletcher32_body(
                raw,
                key=chunk,
                offset=self.index.get(chunk, (-1, size))[0],
                verified=self._verified,
                summer=self._fletcher,
                where=functools.partial(self.where, chunk),  # a string only on failure
            )
        t2 = time.perf_counter()
        clock.checksum += t2 - t1
        full = len(out) == self.chunks[0] and out.flags.c_contiguous
        target = out if full else np.empty(self.chunks, self.dtype)
        flat = target.reshape(-1).view(np.uint8)
        try:
            if shuffled:
                unshuffled = np.empty(flat.size, np.uint8)
                self._decode_into(decode, body, unshuffled)
                unshuffle(unshuffled, flat, self.dtype.itemsize)
            else:
                self._decode_into(decode, body, flat)
        except Exception as err:
            raise CorruptChunkError(
                f"{self.where(chunk)} cannot be decoded ({type(err).__name__}: {err})"
            ) from err
        if not full:
            out[...] = target[: len(out)]
        clock.decode += time.perf_counter() - t2
