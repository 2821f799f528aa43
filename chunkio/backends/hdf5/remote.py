"""HDF5 files on an object store or HTTP (``s3://bucket/user.h5``), read in place.

The metadata (superblock, object headers, chunk B-trees) is read by h5py itself, through a
Python file object (:class:`RangeFile`) whose reads are blocks of the remote file fetched by
:class:`~chunkio.remote.RangeFetcher` (retried, counted, cached on disk when asked) and kept in
a small block cache, so that HDF5's many small metadata reads cost a few requests. From it the
main process learns, per array, where each stored chunk lies (``chunk_iter``) and how it is
filtered: :class:`~.raw.RawChunks`, the layout local raw HDF5 reads use. Chunk data then
comes as byte ranges, one concurrent round per read (and ahead of it, :mod:`chunkio.remote.ahead`),
decoded by the one codec table exactly as local raw reads decode it.

What the main process learnt is handed to every other process (:meth:`RemoteHDF5Reader.documents`,
pickled with the dataset): a worker opens no HDF5 file and asks nothing before its first chunk.
h5py is opened in a process only where chunkio does not decode an array itself (filters outside
the codec table, chunks splitting samples along other axes, boxes): it then reads through the
same file object. HDF5 state never crosses a fork (:mod:`.backend` closes every h5py file first).
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import ChunkReadError, CorruptChunkError, MissingChunkError
from ...remote import RangeFetcher
from ...remote.ahead import FetchAhead
from ...util.numeric import ceil_div
from ..base import ArrayInfo, Reader, StageClock, check_region, check_rows, coalesce
from .backend import HDF5Reader
from .grid import RawGrid
from .raw import RawChunks

__all__ = ["BLOCK_BYTES", "RangeFile", "RemoteHDF5Reader"]

#: h5py's metadata reads are served from blocks of this size (HDF5 keeps a file's metadata
#: near where it was written: its start, and beside each dataset's chunks)
BLOCK_BYTES = 256 << 10
#: blocks kept per open file (least recently used dropped first)
BLOCKS_KEPT = 64


class RangeFile(io.RawIOBase):
    """A read-only file object over one remote object, read in cached blocks (for h5py)."""

    def __init__(self, fetcher: RangeFetcher, *, block: int = BLOCK_BYTES) -> None:
        super().__init__()
        self._fetcher = fetcher
        self._block = block
        self._size = fetcher.size("")  # FileNotFoundError-like RemoteNotFoundError if absent
        self._pos = 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        start, stop = self._pos, min(self._pos + len(view), self._size)
        if stop <= start:
            return 0
        first, last = start // self._block, (stop - 1) // self._block
        wanted = range(first, last + 1)
        missing = [b for b in wanted if b not in self._blocks]
        if missing:  # one concurrent round for every block this read spans
            spans = [(b * self._block, min((b + 1) * self._block, self._size)) for b in missing]
            blobs = self._fetcher.cat_ranges([("", a, z) for a, z in spans])
            self._blocks.update(zip(missing, blobs, strict=True))
        at = 0
        for b in wanted:
            self._blocks.move_to_end(b)
            data = self._blocks[b]
            lo = max(start - b * self._block, 0)
            hi = min(stop - b * self._block, len(data))
            view[at : at + hi - lo] = data[lo:hi]
            at += hi - lo
        while len(self._blocks) > max(BLOCKS_KEPT, last - first + 1):
            self._blocks.popitem(last=False)
        self._pos += at
        return at


@dataclasses.dataclass(frozen=True)
class _Array:
    """What a process needs to read one array without opening the file (pickles)."""

    info: ArrayInfo
    raw: RawChunks | None
    fill_value: Any
    #: the same array by boxes of its chunk grid (None: h5py reads boxes)
    grid: RawGrid | None = None


class RemoteHDF5Reader(Reader):
    """Read-only access to an HDF5 file below a URL (see the module docstring).

    ``documents``: what :meth:`documents` returned in another process (no request to open).
    """

    reports_missing_chunks = True
    prefetches = True

    def __init__(
        self,
        url: str,
        *,
        storage_options: Any = None,
        trust_codecs: bool = False,
        fill_missing: bool = False,
        download_cache: tuple[str, int] | None = None,
        documents: Any = None,
    ) -> None:
        self.location = url
        cache_dir, cache_bytes = download_cache or (None, 0)
        self._fetcher = RangeFetcher(
            url, storage_options=storage_options, cache_dir=cache_dir, cache_bytes=cache_bytes
        )
        self._trust = trust_codecs
        self._fill_missing = fill_missing
        self.clock = StageClock()
        self._h5: HDF5Reader | None = None
        docs = dict(documents or {})
        self._arrays: dict[str, _Array] = dict(docs.get("arrays") or {})
        self._attrs: dict[str, Any] = docs.get("attrs") or {}
        if "attrs" not in docs:
            self._attrs = self._general().attrs()  # a missing or non-HDF5 object: raised here
        self._ahead: FetchAhead[tuple[str, int], bytes] = FetchAhead(self._fetch_chunks)

    def _general(self) -> HDF5Reader:
        """h5py on this file (opened on first use in this process), for what it reads."""
        if self._h5 is None:
            self._h5 = HDF5Reader(
                self.location,
                trust_codecs=self._trust,
                fill_missing=self._fill_missing,
                raw_chunks=False,
                file_object=lambda: RangeFile(self._fetcher),
            )
        return self._h5

    def documents(self) -> dict[str, Any]:
        """What this reader learnt of the file, for ``documents=`` in another process."""
        return {"attrs": dict(self._attrs), "arrays": dict(self._arrays)}

    def attrs(self) -> dict[str, Any]:
        return dict(self._attrs)

    def array_names(self) -> list[str]:
        return self._general().array_names()

    def array_attrs(self, name: str) -> dict[str, Any]:
        return self._general().array_attrs(name)

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        return self._general().group_attrs(name)

    def read_text(self, name: str) -> list[str]:
        return self._general().read_text(name)

    def _array(self, name: str) -> _Array:
        found = self._arrays.get(name)
        if found is None:
            h5 = self._general()
            info = h5.array_info(name)  # refuses what is unsafe, names what is missing
            (raw, fill), grid = h5.describe_raw(name), h5.describe_grid(name)
            if raw is not None:
                raw = self._unmask_edge(h5, raw) if raw.masked else raw
                info = dataclasses.replace(info, chunks=raw.chunks)  # contiguous: runs
            found = self._arrays[name] = _Array(info, raw, fill, grid)
        return found

    def _unmask_edge(self, h5: HDF5Reader, raw: RawChunks) -> RawChunks:
        """Raw reads for a partial last chunk too, where they give what h5py gives.

        HDF5 may store a partial edge chunk unfiltered (a writer's choice the file does not
        show through h5py), so local reads leave it to h5py; here that would open the file in
        every worker. Decoding it here once and comparing with h5py's read tells."""
        step = raw.chunk_rows
        edge = raw.shape[0] // step
        if edge not in raw.masked or edge not in raw.index or not raw.shape[0] % step:
            return raw
        rows = raw.shape[0] - edge * step
        mine = np.empty((rows, *raw.chunks[1:]), raw.dtype)
        theirs = np.empty_like(mine)
        try:
            offset, size = raw.index[edge]
            (blob,) = self._fetcher.cat_ranges([("", offset, offset + size)])
            raw.decode_into(np.frombuffer(bytearray(blob), np.uint8), edge, mine, StageClock())
        except ChunkReadError:
            return raw
        h5.read_into(raw.name, [(edge * step, raw.shape[0])], theirs)
        if not np.array_equal(mine, theirs, equal_nan=mine.dtype.kind in "fc"):
            return raw
        return dataclasses.replace(raw, masked=raw.masked - {edge})

    def array_info(self, name: str) -> ArrayInfo:
        return self._array(name).info

    def read_path(self, name: str) -> str:
        array = self._array(name)
        return "remote raw" if array.raw is not None or array.grid is not None else "h5py"

    # -- reads ---------------------------------------------------------------------------

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        array = self._array(name)
        check_rows(ranges, array.info.shape[0], f"{self.location}: array {name!r}")
        raw = array.raw
        if raw is None and array.grid is not None:  # chunks that split samples: boxes
            rest = tuple(slice(0, n) for n in array.info.shape[1:])
            for start, stop, at in coalesce(ranges):
                self._read_grid(
                    name, array, (slice(start, stop), *rest), out[at : at + stop - start]
                )
            return
        if raw is None:
            started = time.perf_counter()
            try:
                self._general().read_into(name, ranges, out)
            finally:
                self.clock.decode += time.perf_counter() - started  # HDF5 does every stage
            return
        pieces = _pieces(raw.chunk_rows, ranges)
        by_h5py = [p for p in pieces if p[0] in raw.masked]
        for chunk, lo, hi, at in by_h5py:  # a filter skipped when written: HDF5's to decode
            first = chunk * raw.chunk_rows
            self._general().read_into(name, [(first + lo, first + hi)], out[at : at + hi - lo])
        stored = sorted({p[0] for p in pieces if p[0] in raw.index and p[0] not in raw.masked})
        t0 = time.perf_counter()
        payloads = self._ahead.take([(name, c) for c in stored])
        self.clock.read += time.perf_counter() - t0
        scratch: list[npt.NDArray[Any]] = []  # a chunk a piece starts inside, decoded aside
        for chunk, lo, hi, at in pieces:
            if chunk in raw.masked:
                continue
            part = out[at : at + hi - lo]
            blob = payloads.get((name, chunk))
            if blob is None:
                self._missing(raw, array.fill_value, chunk, part)
            elif lo == 0:
                self._decode(raw, blob, chunk, part)
            else:
                scratch = scratch or [np.empty(raw.chunks, raw.dtype)]
                self._decode(raw, blob, chunk, scratch[0][:hi])
                part[...] = scratch[0][lo:hi]

    def _decode(self, raw: RawChunks, blob: bytes, chunk: int, out: npt.NDArray[Any]) -> None:
        offset, size = raw.index[chunk]
        if len(blob) != size:
            raise CorruptChunkError(
                f"{self.location}: {raw.where(chunk)}: read {len(blob)} of its {size} bytes at "
                f"offset {offset} (the file is truncated or was replaced)"
            )
        try:  # a writable copy: some decoders work in place
            raw.decode_into(np.frombuffer(bytearray(blob), np.uint8), chunk, out, self.clock)
        except ChunkReadError as err:
            raise type(err)(f"{self.location}: {err}") from err

    def _missing(self, raw: RawChunks, fill: Any, chunk: int, out: npt.NDArray[Any]) -> None:
        if not self._fill_missing:
            try:
                raw.locate(chunk)
            except MissingChunkError as err:
                raise MissingChunkError(f"{self.location}: {err}") from err
        out[...] = fill

    def _fetch_chunks(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], bytes]:
        """The stored bytes of chunks ``(array, chunk)``, in one concurrent round."""
        spans = []
        for name, chunk in wanted:
            raw = self._arrays[name].raw if name in self._arrays else None
            if raw is None:  # pragma: no cover - only chunks of raw-read arrays are asked
                raise KeyError(name)
            offset, size = raw.index[chunk]
            spans.append(("", offset, offset + size))
        blobs = self._fetcher.cat_ranges(spans)
        return dict(zip(wanted, blobs, strict=True))

    def prefetch(self, name: str, chunks: list[int]) -> None:
        """Start fetching sample-axis ``chunks`` of ``name`` ahead of their read."""
        raw = self._array(name).raw
        if raw is not None:
            ok = [c for c in chunks if c in raw.index and c not in raw.masked]
            self._ahead.start((name, c) for c in ok)

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        array = self._array(name)
        where = f"{self.location}: array {name!r}"
        if array.grid is not None and check_region(region, array.info.shape, out, where):
            self._read_grid(name, array, region, out)
            return
        started = time.perf_counter()
        try:
            self._general().read_region(name, region, out)
        finally:
            self.clock.decode += time.perf_counter() - started

    def _read_grid(
        self, name: str, array: _Array, region: tuple[slice, ...], out: npt.NDArray[Any]
    ) -> None:
        """Box ``region`` by raw chunk reads: the chunks it touches fetched in one round."""
        grid = array.grid
        if grid is None:  # pragma: no cover - only called with one
            raise TypeError(f"{name!r} has no raw chunk grid")
        wanted = [c for c in grid.chunks_in(region) if c in grid.index and c not in grid.masked]
        t0 = time.perf_counter()
        spans = [("", grid.index[c][0], grid.index[c][0] + grid.index[c][1]) for c in wanted]
        blobs = dict(zip(wanted, self._fetcher.cat_ranges(spans), strict=True))
        self.clock.read += time.perf_counter() - t0

        def stored(coords: tuple[int, ...]) -> npt.NDArray[np.uint8] | None:
            blob = blobs.get(coords)
            if blob is None:
                return None
            offset, size, _ = grid.index[coords]
            if len(blob) != size:
                raise CorruptChunkError(
                    f"{grid.where(coords)}: read {len(blob)} of its {size} bytes at offset "
                    f"{offset} (the file is truncated or was replaced)"
                )
            return np.frombuffer(bytearray(blob), np.uint8)  # writable: decoders work in place

        def by_h5py(box: tuple[slice, ...], part: npt.NDArray[Any]) -> None:
            self._general().read_region(name, box, part)

        fill = array.fill_value if self._fill_missing else None
        try:
            grid.read_region(region, out, stored, self.clock, fallback=by_h5py, fill=fill)
        except (CorruptChunkError, MissingChunkError) as err:
            if str(err).startswith(self.location):
                raise
            raise type(err)(f"{self.location}: {err}") from err

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        array = self._array(name)
        if array.raw is None and array.grid is not None:
            if isinstance(chunk, int):
                chunk = (chunk,) + (0,) * (len(array.grid.chunks) - 1)
            return tuple(chunk) in array.grid.index
        raw = array.raw
        if raw is None:
            return self._general().chunk_exists(name, chunk)
        if not isinstance(chunk, int):  # grid coordinates: raw chunks hold whole samples
            if any(chunk[1:]):
                return False
            chunk = chunk[0]
        return chunk in raw.index

    def close(self) -> None:
        self._ahead.close()
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None
        self._fetcher.close()


def _pieces(step: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """Rows ``[a, b)`` of each range as ``(chunk, first row in it, end row in it, position in
    the output)`` (pure).

    >>> _pieces(4, [(2, 9)])
    [(0, 2, 4, 0), (1, 0, 4, 2), (2, 0, 1, 6)]
    """
    out = []
    for start, stop, at in coalesce(ranges):
        for chunk in range(start // step, ceil_div(stop, step)):
            lo, hi = max(start, chunk * step), min(stop, (chunk + 1) * step)
            out.append((chunk, lo - chunk * step, hi - chunk * step, at + lo - start))
    return out
