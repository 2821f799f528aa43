"""The one Zarr read engine: a byte source x a chunk index x the chunk codec, per array.

Every Zarr array chunkio decodes itself, local or remote, sharded or not, read by whole samples
or by N-D boxes, goes through :class:`ArrayEngine`:

* **plan** (pure): a read becomes *pieces*, one per chunk it touches: the chunk's grid
  coordinates, the part of the chunk wanted, and where it goes in the output;
* **locate**: each chunk becomes a request for bytes of a stored object: a whole chunk object,
  or a byte range of a shard found through the shard's index (read once per process and kept
  while the object is unchanged; neighbouring inner chunks merged into one request);
* **fetch**: one call to the :class:`~.sources.ByteSource` for the whole read (local
  ``pread`` s, or one concurrent round of range requests);
* **decode**: each chunk is checked (crc32c) and decoded once, straight into the output where
  the piece is a whole C-contiguous chunk, else into a scratch chunk whose wanted part is copied.

What the engine does not decode (codec chains outside :class:`~.chunks.ChunkFiles`, other
chunk grids) :meth:`ArrayEngine.build` declines, and the reader uses zarr-python, the general
path; ``tests/backends`` check both return the same.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError, MissingChunkError
from ...remote.ahead import FetchAhead
from ...util.numeric import ceil_div
from ..base import StageClock, coalesce
from .chunks import ChunkFiles
from .metadata import check_array_document
from .shard import (
    ShardLayout,
    inner_meta,
    inner_range,
    merged_ranges,
    shard_layout,
)
from .shard_index import Coords, ShardIndexes
from .sources import ByteSource, Request

__all__ = ["ArrayEngine", "Piece"]

Payload = bytes | memoryview


@dataclass(frozen=True)
class Piece:
    """One chunk's share of a read: ``out[...] = chunk[inside]``."""

    coords: Coords
    inside: tuple[slice, ...]
    out: npt.NDArray[Any]
    #: ``inside`` is the whole chunk
    whole: bool


def plan_pieces(
    region: tuple[slice, ...], chunks: tuple[int, ...], out: npt.NDArray[Any]
) -> list[Piece]:
    """The pieces of a box read into ``out``, in C order of the chunk grid (pure).

    >>> [(p.coords, p.inside) for p in plan_pieces((slice(3, 6),), (4,), np.empty(3))]
    [((0,), (slice(3, 4, None),)), ((1,), (slice(0, 2, None),))]
    """
    spans = [range(s.start // c, ceil_div(s.stop, c)) for s, c in zip(region, chunks, strict=True)]
    pieces = []
    for coords in itertools.product(*spans):
        inside, dst, whole = [], [], True
        for s, c, n in zip(region, coords, chunks, strict=True):
            lo = c * n
            a, z = max(s.start, lo), min(s.stop, lo + n)
            inside.append(slice(a - lo, z - lo))
            dst.append(slice(a - s.start, z - s.start))
            whole = whole and z - a == n
        pieces.append(Piece(coords, tuple(inside), out[tuple(dst)], whole))
    return pieces


class ArrayEngine:
    """Reads one Zarr array from a :class:`~.sources.ByteSource`.

    ``fill_missing``: a chunk never written reads as the array's fill value (Zarr's contract,
    for arrays chunkio did not write); else it raises
    :class:`~chunkio.errors.MissingChunkError` (chunkio's datasets store every chunk, so an
    absent one means damage, never zeros).
    """

    def __init__(
        self,
        files: ChunkFiles,
        source: ByteSource,
        layout: ShardLayout | None,
        *,
        fill_missing: bool = False,
    ) -> None:
        self.files = files
        self.source = source
        self.layout = layout
        self.fill_missing = fill_missing
        self._shards = (
            None if layout is None else ShardIndexes(source, layout, files.key, files.array_name)
        )
        self._ahead: FetchAhead[Coords, Payload] = FetchAhead(self._fetch)

    @classmethod
    def build(
        cls, source: ByteSource, name: str, meta: dict[str, Any], *, fill_missing: bool = False
    ) -> ArrayEngine | None:
        """The engine for array ``name`` (its ``zarr.json``, or v2 ``.zarray``, as a dict), or
        ``None`` where its codecs or grid are ones only zarr-python decodes. A document whose
        fields chunkio reads are mistyped, or whose chunks hold none or too much, is a
        :class:`~chunkio.errors.FormatError` (:func:`.metadata.check_array_document`)."""
        check_array_document(meta, where=f"array {name!r}")
        layout = shard_layout(meta, where=f"array {name!r}")
        files = ChunkFiles.build("", name, inner_meta(meta, layout) if layout else meta)
        if files is None:
            return None
        return cls(files, source, layout, fill_missing=fill_missing)

    @property
    def name(self) -> str:
        return self.files.array_name

    @property
    def chunks(self) -> tuple[int, ...]:
        """The shape of the unit of decoding (a shard's inner chunk)."""
        return self.files.chunks

    # -- reads ---------------------------------------------------------------------------

    def read_rows(
        self, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any], clock: StageClock
    ) -> None:
        """Rows ``[a, b)`` of each range, concatenated in order, into ``out``."""
        if len(ranges) == 1 and not self.source.batches:
            start, stop = ranges[0]
            if (
                start % self.chunks[0] == 0
                and stop - start == self.chunks[0]
                and out.shape == self.chunks
                and out.flags.c_contiguous
            ):  # one whole chunk (a cache slot): read and decoded, no plan
                self._read_chunk(self._row_chunk(start // self.chunks[0]), out, clock)
                return
        rest = tuple(slice(0, n) for n in self.files.shape[1:])
        pieces: list[Piece] = []
        for start, stop, at in coalesce(ranges):
            region = (slice(start, stop), *rest)
            pieces += plan_pieces(region, self.chunks, out[at : at + stop - start])
        self._read(pieces, clock)

    def read_region(
        self, region: tuple[slice, ...], out: npt.NDArray[Any], clock: StageClock
    ) -> None:
        """The box ``region`` (validated by the caller) into ``out``."""
        self._read(plan_pieces(region, self.chunks, out), clock)

    def _read(self, pieces: list[Piece], clock: StageClock) -> None:
        by_chunk: dict[Coords, list[Piece]] = {}
        for piece in pieces:
            by_chunk.setdefault(piece.coords, []).append(piece)
        scratch: list[npt.NDArray[Any]] = []
        if self.source.batches:  # a network: every chunk of the read in one round
            t0 = time.perf_counter()
            payloads = self._payloads(list(by_chunk))
            clock.read += time.perf_counter() - t0
            for coords, group in by_chunk.items():
                self._decode(payloads.get(coords), group, scratch, clock)
            return
        for coords, group in by_chunk.items():  # local: each chunk decoded right after its
            t0 = time.perf_counter()  # read, while its bytes are still in the CPU's caches
            payload = self._fetch_one(coords)
            clock.read += time.perf_counter() - t0
            self._decode(payload, group, scratch, clock)

    def _read_chunk(self, coords: Coords, out: npt.NDArray[Any], clock: StageClock) -> None:
        """The whole chunk ``coords`` into ``out`` (its shape, C-contiguous), with no plan:
        the windows' streamed cache reads chunk by chunk, where planning pieces cost about a
        tenth of a 192 KiB Zstd chunk's decode (``docs/benchmarks.md``, windows)."""
        t0 = time.perf_counter()
        payload = self._fetch_one(coords)
        clock.read += time.perf_counter() - t0
        if payload is None:
            out[...] = self.files.fill_value
            return
        where = functools.partial(self._describe, coords)
        self.files.decode_bytes(payload, out, where=where, clock=clock)

    def _fetch_one(self, coords: Coords) -> Payload | None:
        """One chunk's stored bytes, read alone (``None``: never written, fill_missing)."""
        if self._shards is None:
            return self._fetch([coords]).get(coords)
        shard, number = self._shards.shard_of(coords)
        try:
            index = self._shards.get(shard)
        except MissingChunkError:
            if self.fill_missing:
                return None
            raise
        span = inner_range(index, number)
        if span is None:
            self._check_stored(shard, index, [number])  # raises unless fill_missing
            return None
        key = self.files.key(shard)
        (blob,) = self.source.fetch([(key, *span)])
        if blob is None or len(blob) != span[1] - span[0]:
            got = "nothing" if blob is None else f"{len(blob)} bytes"
            raise CorruptChunkError(
                f"array {self.name!r}: shard {self.source.where(key)}: read {got} of bytes "
                f"{span[0]}..{span[1]} (the shard is truncated or was removed)"
            )
        return blob

    def _decode(
        self,
        payload: Payload | None,
        pieces: list[Piece],
        scratch: list[npt.NDArray[Any]],
        clock: StageClock,
    ) -> None:
        """One chunk's stored bytes into its pieces (``None``: never written, fill_missing)."""
        if payload is None:
            for piece in pieces:
                piece.out[...] = self.files.fill_value
            return
        where = functools.partial(self._describe, pieces[0].coords)
        out = pieces[0].out
        # straight into the output only where it holds the chunk's very bytes: a wider dtype
        # (stores of several dtypes in one batch) is cast from the scratch chunk
        if (
            len(pieces) == 1
            and pieces[0].whole
            and out.flags.c_contiguous
            and out.dtype == self.files.dtype
        ):
            self.files.decode_bytes(payload, out, where=where, clock=clock)
            return
        if not scratch:
            scratch.append(np.empty(self.chunks, self.files.dtype))
        self.files.decode_bytes(payload, scratch[0], where=where, clock=clock)
        for piece in pieces:
            piece.out[...] = scratch[0][piece.inside]

    # -- locating and fetching -----------------------------------------------------------

    def _payloads(self, wanted: list[Coords]) -> dict[Coords, Payload]:
        """The stored bytes of chunks ``wanted``: those fetched ahead, the rest now."""
        return self._ahead.take(wanted)

    def _fetch(self, wanted: Sequence[Coords]) -> dict[Coords, Payload]:
        if self.layout is None:
            keys = [self.files.key(c) for c in wanted]
            blobs = self.source.fetch([(k, None, None) for k in keys])
            for coords, key, blob in zip(wanted, keys, blobs, strict=True):
                if blob is None and not self.fill_missing:
                    raise MissingChunkError(
                        f"array {self.name!r}: chunk {self._what(coords)} is missing: "
                        f"{self.source.where(key)} does not exist"
                    )
            return {c: b for c, b in zip(wanted, blobs, strict=True) if b is not None}
        return self._fetch_sharded(wanted)

    def _fetch_sharded(self, wanted: Sequence[Coords]) -> dict[Coords, Payload]:
        by_shard: dict[Coords, list[int]] = {}
        for coords in wanted:
            shard, number = self._index.shard_of(coords)
            by_shard.setdefault(shard, []).append(number)
        # a shard wanted whole and not indexed yet (small arrays read entirely): one read
        whole = [s for s, inner in by_shard.items() if self._reads_whole(s, inner)]
        out = self._fetch_whole(whole)
        rest = {s: inner for s, inner in by_shard.items() if s not in whole}
        requests: list[Request] = []
        members: list[tuple[Coords, int, list[int]]] = []  # (shard, start, inner chunks)
        indexes: dict[Coords, npt.NDArray[np.uint64]] = {}
        for shard, inner in rest.items():
            try:
                index = indexes[shard] = self._index.get(shard)
            except MissingChunkError:
                if self.fill_missing:
                    continue
                raise
            self._check_stored(shard, index, inner)
            for start, stop, group in merged_ranges(index, inner, gap=self.source.merge_gap):
                requests.append((self.files.key(shard), start, stop))
                members.append((shard, start, group))
        blobs = self.source.fetch(requests)
        for (shard, start, group), (key, _, end), blob in zip(
            members, requests, blobs, strict=True
        ):
            index = indexes[shard]
            stop = end or start
            if blob is None or len(blob) < stop - start:
                got = "nothing" if blob is None else f"{len(blob)} bytes"
                raise CorruptChunkError(
                    f"array {self.name!r}: shard {self.source.where(key)}: read {got} of "
                    f"bytes {start}..{stop} (the shard is truncated or was removed)"
                )
            view = memoryview(blob)
            for i in group:
                a, b = inner_range(index, i) or (0, 0)
                out[self._index.coords_of(shard, i)] = view[a - start : b - start]
        return out

    def _fetch_whole(self, shards: list[Coords]) -> dict[Coords, Payload]:
        """Every stored inner chunk of ``shards``, each shard read whole (its index checked
        against the object's size)."""
        if not shards:
            return {}
        layout = self._index.layout
        keys = [self.files.key(s) for s in shards]
        versions = [self.source.version(k) for k in keys]
        blobs = self.source.fetch([(k, None, None) for k in keys])
        out: dict[Coords, Payload] = {}
        for shard, key, version, blob in zip(shards, keys, versions, blobs, strict=True):
            if blob is None:
                if self.fill_missing:
                    continue
                raise MissingChunkError(
                    f"array {self.name!r}: chunk {self._what(self._index.coords_of(shard, 0))} is "
                    f"missing: shard {self.source.where(key)} does not exist"
                )
            where = f"array {self.name!r}: shard {self.source.where(key)}"
            index = layout.parse_index(blob, where=where)
            self._index.remember(shard, version, index)
            inner = self._inner_in_array(shard)
            self._check_stored(shard, index, inner)
            view = memoryview(blob)
            for i in inner:
                span = inner_range(index, i)
                if span is not None:
                    out[self._index.coords_of(shard, i)] = view[span[0] : span[1]]
        return out

    @property
    def _index(self) -> ShardIndexes:
        if self._shards is None:  # pragma: no cover - only sharded arrays get here
            raise TypeError(f"array {self.name!r} is not sharded")
        return self._shards

    def _inner_in_array(self, shard: Coords) -> list[int]:
        """Index numbers of the inner chunks of ``shard`` inside the array (a partial last
        shard stores none past the array's end)."""
        grid = self._index.grid
        counts = [ceil_div(n, c) for n, c in zip(self.files.shape, self.chunks, strict=True)]
        inside = [
            range(min(g, total - s * g)) for s, g, total in zip(shard, grid, counts, strict=True)
        ]
        return [int(np.ravel_multi_index(c, grid)) for c in itertools.product(*inside)]

    def _reads_whole(self, shard: Coords, inner: list[int]) -> bool:
        return not self._index.known(shard) and len(set(inner)) == len(self._inner_in_array(shard))

    def _check_stored(self, shard: Coords, index: npt.NDArray[np.uint64], inner: list[int]) -> None:
        if self.fill_missing:
            return  # empty entries are fill values; merged_ranges leaves them out
        for i in inner:
            if inner_range(index, i) is None:
                raise MissingChunkError(
                    f"array {self.name!r}: chunk {self._what(self._index.coords_of(shard, i))} is "
                    f"missing from shard {self.source.where(self.files.key(shard))} (its index "
                    "entry is empty)"
                )

    def _what(self, coords: Coords) -> str:
        """A chunk as messages name it: its number and samples along the sample axis, or its
        grid coordinates."""
        if any(coords[1:]) or self.chunks[1:] != self.files.shape[1:]:
            return str(coords)
        step = self.chunks[0]
        first = coords[0] * step
        last = min(first + step, self.files.shape[0]) - 1
        return f"{coords[0]} (samples {first}..{last})"

    def _describe(self, coords: Coords) -> str:
        if self.layout is None:
            return f"chunk {self._what(coords)} in {self.source.where(self.files.key(coords))}"
        shard, inner = self._index.shard_of(coords)
        key = self.files.key(shard)
        return f"chunk {self._what(coords)} (inner chunk {inner} of shard {self.source.where(key)})"

    # -- presence, prefetch, lifetime ----------------------------------------------------

    def _row_chunk(self, chunk: int) -> Coords:
        return (chunk, *(0 for _ in self.files.shape[1:]))

    def exists(self, chunk: int | Coords) -> bool:
        """Whether sample-axis chunk ``chunk`` (or the chunk at grid coordinates) is stored."""
        coords = self._row_chunk(chunk) if isinstance(chunk, int) else tuple(chunk)
        if self.layout is None:
            return self.source.exists(self.files.key(coords))
        return self._index.stored(coords)

    def prefetch(self, chunks: list[int]) -> None:
        """Start fetching sample-axis ``chunks`` in the background where that pays (a read
        that needs them waits for them)."""
        if self.source.prefetches:
            self._ahead.start(self._row_chunk(c) for c in chunks)

    def close(self) -> None:
        self._ahead.close()
