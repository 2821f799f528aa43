"""Raw chunk reads of HDF5 datasets chunked along any axes: boxes (patch reads of volumes) and
rows of arrays whose chunks split samples.

libhdf5 decodes a chunk into a buffer of the chunk's size and copies out of it whatever its
filters returned: a chunk whose stream decodes short leaves the rest of that buffer as it was
on the heap, and h5py returns those bytes as data, in every codec. For every filter chain
chunkio decodes itself (byte shuffle, then at most one compressor of the codec table, then
fletcher32; :class:`RawGrid`), this module reads each stored chunk's bytes at the offset HDF5's
chunk index gives (one ``pread``, or one byte range of a remote file), checks its checksum and
decodes it with the codec table, whose decoders fill exactly the chunk or raise. HDF5 stores an
edge chunk at the full chunk shape; its part inside the array is copied out.

:func:`partial_chunks_unfiltered` asks libhdf5 whether partial edge chunks skipped the filters
(``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``), which h5py does not expose: where that cannot be
asked, an edge chunk stored at exactly the full chunk's size is left to h5py.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError, MissingChunkError
from ...util.numeric import ceil_div
from .._checksum import Fletcher32, fletcher32_body
from ..base import StageClock
from ..codec_table import HDF5_DECODERS, HDF5_SHUFFLE, Decode, unshuffle

__all__ = ["FLETCHER32", "Pipeline", "RawGrid", "partial_chunks_unfiltered"]

FLETCHER32 = 3
_DONT_FILTER_PARTIAL_CHUNKS = 0x0002
Coords = tuple[int, ...]
#: a chunk's stored bytes (writable: some decoders work in place), None where never written
Stored = Callable[[Coords], "npt.NDArray[np.uint8] | None"]
#: reads one box through h5py into the buffer given (chunks HDF5 must decode itself)
Fallback = Callable[[tuple[slice, ...], npt.NDArray[Any]], None]


@functools.cache
def _hdf5_library() -> Any:
    """The libhdf5 h5py loaded (the same copy: dlopen of a loaded path shares it), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libhdf5" in line}
    except OSError:
        return None
    found = sorted(p for p in paths if re.search(r"/libhdf5[-.][^/]*$", p))
    if len(found) != 1:
        return None  # none, or two copies: which one h5py calls is unknown
    try:
        lib = ctypes.CDLL(found[0])
        ask = lib.H5Pget_chunk_opts
    except (OSError, AttributeError):
        return None
    ask.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint)]
    ask.restype = ctypes.c_int
    return ask


def partial_chunks_unfiltered(plist: Any) -> bool | None:
    """Whether the dataset creation property list ``plist`` stores partial edge chunks
    without its filters (``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``); None where libhdf5 cannot
    be asked."""
    ask = _hdf5_library()
    if ask is None:
        return None
    opts = ctypes.c_uint(0)
    if ask(int(plist.id), ctypes.byref(opts)) < 0:
        return None
    return bool(opts.value & _DONT_FILTER_PARTIAL_CHUNKS)


@dataclass(frozen=True)
class Pipeline:
    """A filter chain chunkio decodes: byte shuffle, one compressor, fletcher32 (each
    optional, in that order), and which of them ran on a chunk given its filter mask."""

    filters: tuple[int, ...]
    shuffled: bool
    decode: Decode | None
    checksum: bool

    @classmethod
    def parse(cls, filters: tuple[int, ...]) -> Pipeline | None:
        """The pipeline of filter ids ``filters``, None if chunkio cannot decode it."""
        checksum = bool(filters) and filters[-1] == FLETCHER32
        rest = filters[:-1] if checksum else filters
        shuffled = bool(rest) and rest[0] == HDF5_SHUFFLE
        rest = rest[1:] if shuffled else rest
        if len(rest) > 1 or (rest and rest[0] not in HDF5_DECODERS):
            return None
        decode = HDF5_DECODERS[rest[0]] if rest else None
        return cls(filters, shuffled, decode, checksum)

    def steps(self, mask: int) -> tuple[bool, Decode | None, bool]:
        """``(shuffled, decoder, checksum)``: what ran on a chunk of filter mask ``mask``."""
        if not mask:
            return self.shuffled, self.decode, self.checksum
        ran = {f for i, f in enumerate(self.filters) if not mask >> i & 1}
        decode = self.decode if ran & HDF5_DECODERS.keys() else None
        return HDF5_SHUFFLE in ran, decode, FLETCHER32 in ran


#: a filter mask with every filter skipped (a partial edge chunk stored unfiltered)
_UNFILTERED = 0xFFFFFFFF


@dataclass
class RawGrid:
    """Where the stored chunks of one chunked HDF5 dataset lie, and how to decode them."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    #: the stored element type (big-endian kept: decoded bytes are copied out as values)
    dtype: np.dtype[Any]
    pipeline: Pipeline
    #: grid coordinates -> (byte offset, stored size, filter mask) of every stored chunk
    index: dict[Coords, tuple[int, int, int]]
    #: chunks h5py reads: a mask naming filters the pipeline lacks, or a partial edge chunk
    #: stored at the full size when libhdf5 cannot say whether it was filtered
    masked: frozenset[Coords] = frozenset()
    _fletcher: Fletcher32 = field(default_factory=Fletcher32)
    _verified: dict[Coords, tuple[int, int, int]] = field(default_factory=dict)
    _file_state: tuple[int, ...] = ()
    _buffer: npt.NDArray[np.uint8] = field(default_factory=lambda: np.empty(0, np.uint8))

    @classmethod
    def build(cls, dset: Any, name: str) -> RawGrid | None:
        """The raw reader of chunked dataset ``dset`` when its type and filters allow one."""
        dtype = np.dtype(dset.dtype)
        if (
            dset.chunks is None
            or dset.is_virtual
            or dtype.hasobject
            or dtype.fields is not None
            or dset.id.get_type().get_size() != dtype.itemsize  # h5py converts the type
        ):
            return None
        plist = dset.id.get_create_plist()
        ids = tuple(int(plist.get_filter(i)[0]) for i in range(plist.get_nfilters()))
        pipeline = Pipeline.parse(ids)
        if plist.get_external_count() > 0 or pipeline is None:
            return None
        chunks = tuple(int(c) for c in dset.chunks)
        shape = tuple(int(s) for s in dset.shape)
        unfiltered = partial_chunks_unfiltered(plist) if ids else False
        nbytes = int(np.prod(chunks, dtype=np.int64)) * dtype.itemsize
        index: dict[Coords, tuple[int, int, int]] = {}
        masked: set[Coords] = set()

        def visit(info: Any) -> None:
            coords = tuple(int(o) // c for o, c in zip(info.chunk_offset, chunks, strict=True))
            mask, size = int(info.filter_mask), int(info.size)
            partial = any((x + 1) * c > n for x, c, n in zip(coords, chunks, shape, strict=True))
            if mask >> len(ids):
                masked.add(coords)  # skips filters the pipeline does not have: HDF5's to judge
            elif partial and unfiltered:
                mask = _UNFILTERED
            elif partial and unfiltered is None and size == nbytes and ids:
                masked.add(coords)  # maybe stored unfiltered: libhdf5 cannot be asked
            index[coords] = (int(info.byte_offset), size, mask)

        if hasattr(dset.id, "chunk_iter"):
            dset.id.chunk_iter(visit)
        else:  # pragma: no cover - HDF5 < 1.14
            for i in range(dset.id.get_num_chunks()):
                visit(dset.id.get_chunk_info(i))
        return cls(name, shape, chunks, dtype, pipeline, index, frozenset(masked))

    def check_file(self, fd: int) -> None:
        """Forget the verified checksums if the file changed (as
        :meth:`.raw.RawChunks.check_file`)."""
        st = os.fstat(fd)
        state = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if state != self._file_state:
            self._verified.clear()
            self._file_state = state

    def where(self, coords: Coords) -> str:
        """Chunk ``coords`` as messages name it."""
        box = ", ".join(
            f"{x * c}:{min((x + 1) * c, n)}"
            for x, c, n in zip(coords, self.chunks, self.shape, strict=True)
        )
        return f"array {self.name!r}: chunk {coords} (elements [{box}])"

    def chunks_in(self, region: tuple[slice, ...]) -> Iterator[Coords]:
        """Grid coordinates of the chunks box ``region`` touches, in storage order (pure)."""
        pairs = zip(region, self.chunks, strict=True)
        spans = [range(s.start // c, ceil_div(s.stop, c)) for s, c in pairs]
        return itertools.product(*spans)

    def pread(self, fd: int) -> Stored:
        """Stored bytes of a chunk from descriptor ``fd`` (one buffer, reused per chunk)."""

        def stored(coords: Coords) -> npt.NDArray[np.uint8] | None:
            found = self.index.get(coords)
            if found is None:
                return None
            offset, size, _ = found
            if self._buffer.size < size:
                self._buffer = np.empty(max(size, 2 * self._buffer.size), np.uint8)
            raw, got = self._buffer[:size], 0
            while got < size:  # Linux reads at most about 2 GiB per call
                n = os.preadv(fd, [raw[got:]], offset + got)  # type: ignore[list-item]
                if n <= 0:
                    break
                got += n
            if got != size:
                raise CorruptChunkError(
                    f"{self.where(coords)}: the file ends inside the chunk ({got} of {size})"
                )
            return raw

        return stored

    def read_boxes(
        self,
        fd: int,
        boxes: Sequence[tuple[tuple[slice, ...], npt.NDArray[Any]]],
        clock: StageClock,
        *,
        fallback: Fallback,
        fill: Any,
        where: str,
    ) -> None:
        """:meth:`read_region` of each ``(region, out)`` of ``boxes`` from descriptor ``fd``,
        the file's state checked once (:meth:`check_file`); errors name file ``where``."""
        self.check_file(fd)
        stored = self.pread(fd)
        try:
            for region, out in boxes:
                self.read_region(region, out, stored, clock, fallback=fallback, fill=fill)
        except (CorruptChunkError, MissingChunkError) as err:
            if str(err).startswith(where):
                raise
            raise type(err)(f"{where}: {err}") from err

    def read_region(
        self,
        region: tuple[slice, ...],
        out: npt.NDArray[Any],
        stored: Stored,
        clock: StageClock,
        *,
        fallback: Fallback,
        fill: Any = None,
    ) -> None:
        """Box ``region`` (one slice per axis, validated) into ``out``: each chunk it touches
        decoded once. A chunk never written is the ``fill`` value, or MissingChunkError
        where ``fill`` is None."""
        coords = self._one_chunk(region)
        whole = out.shape == self.chunks and out.flags.c_contiguous and out.dtype == self.dtype
        if coords is not None and whole:
            # a whole chunk into a buffer of its shape (a patch read's chunk into its slot):
            # decoded there, without the pieces of the general case
            if coords in self.masked:
                fallback(region, out)
                return
            t0 = time.perf_counter()
            raw = stored(coords)
            clock.read += time.perf_counter() - t0
            if raw is not None:
                self.decode_into(raw, coords, out, clock)
            elif fill is None:
                raise MissingChunkError(
                    f"{self.where(coords)} is missing from the file (HDF5 would read it back as "
                    "the fill value)"
                )
            else:
                out[...] = fill
            return
        scratch: npt.NDArray[Any] | None = None
        for pieces in itertools.product(*self._axis_pieces(region)):
            coords, dst, src, box = zip(*pieces, strict=True)
            if coords in self.masked:
                fallback(box, out[dst])
                continue
            t0 = time.perf_counter()
            raw = stored(coords)
            clock.read += time.perf_counter() - t0
            if raw is None:
                if fill is None:
                    raise MissingChunkError(
                        f"{self.where(coords)} is missing from the file (HDF5 would read it "
                        "back as the fill value)"
                    )
                out[dst] = fill
                continue
            part = out[dst]
            if part.shape == self.chunks and part.flags.c_contiguous and part.dtype == self.dtype:
                self.decode_into(raw, coords, part, clock)  # no copy: the box holds the chunk
                continue
            if scratch is None:
                scratch = np.empty(self.chunks, self.dtype)
            self.decode_into(raw, coords, scratch, clock)
            part[...] = scratch[src]

    def _one_chunk(self, region: tuple[slice, ...]) -> Coords | None:
        """The grid coordinates of the chunk ``region`` is exactly (whole, not an edge chunk
        cut by the array's end), else None (pure).

        >>> plain = Pipeline((), False, None, False)
        >>> grid = RawGrid("x", (10, 8), (4, 4), np.dtype("u1"), plain, {})
        >>> grid._one_chunk((slice(4, 8), slice(0, 4)))  # chunk (1, 0)
        (1, 0)
        >>> grid._one_chunk((slice(8, 10), slice(0, 4))) is None  # the edge chunk, cut short
        True
        """
        coords = []
        for s, c in zip(region, self.chunks, strict=True):
            if s.start % c or s.stop - s.start != c:
                return None
            coords.append(s.start // c)
        return tuple(coords)

    def _axis_pieces(
        self, region: tuple[slice, ...]
    ) -> list[list[tuple[int, slice, slice, slice]]]:
        """Per axis, each chunk ``region`` touches as ``(grid coordinate, slice of the box,
        slice of the chunk, slice of the array)`` (pure; a chunk's are their product).

        >>> grid = RawGrid("x", (10,), (4,), np.dtype("u1"), Pipeline((), False, None, False), {})
        >>> [p[:3] for p in grid._axis_pieces((slice(3, 9),))[0]]
        [(0, slice(0, 1, None), slice(3, 4, None)), (1, slice(1, 5, None), slice(0, 4, None)), \
(2, slice(5, 6, None), slice(0, 1, None))]
        """
        axes = []
        for s, c in zip(region, self.chunks, strict=True):
            pieces = []
            for x in range(s.start // c, ceil_div(s.stop, c)):
                o = x * c
                a, z = max(s.start, o), min(s.stop, o + c)
                pieces.append(
                    (x, slice(a - s.start, z - s.start), slice(a - o, z - o), slice(a, z))
                )
            axes.append(pieces)
        return axes

    def decode_into(
        self,
        raw: npt.NDArray[np.uint8],
        coords: Coords,
        target: npt.NDArray[Any],
        clock: StageClock,
    ) -> None:
        """Check and decode chunk ``coords``'s stored bytes ``raw`` into ``target`` (the
        whole chunk, C-contiguous, of the stored type)."""
        t1 = time.perf_counter()
        offset, _, mask = self.index[coords]
        shuffled, decode, checksum = (
            (False, None, False) if mask == _UNFILTERED else self.pipeline.steps(mask)
        )
        body = raw
        if checksum:
            body = fletcher32_body(
                raw,
                key=coords,
                offset=offset,
                verified=self._verified,
                summer=self._fletcher,
                where=functools.partial(self.where, coords),  # a string only on failure
            )
        t2 = time.perf_counter()
        clock.checksum += t2 - t1
        flat = target.reshape(-1).view(np.uint8)
        try:
            into = np.empty(flat.size, np.uint8) if shuffled else flat
            if decode is not None:
                decode(body, into)
            elif body.size == into.size:
                into[...] = body
            else:
                raise ValueError(f"{body.size} stored bytes, expected {into.size}")
            if shuffled:
                unshuffle(into, flat, self.dtype.itemsize)
        except Exception as err:
            raise CorruptChunkError(
                f"{self.where(coords)} cannot be decoded ({type(err).__name__}: {err})"
            ) from err
        clock.decode += time.perf_counter() - t2
