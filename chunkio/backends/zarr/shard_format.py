"""The Zarr v3 shard format (the ``sharding_indexed`` codec), built and parsed by pure functions.

A shard is one stored object holding a grid of inner chunks, each encoded by the inner codec
chain exactly as an unsharded chunk would be (``bytes`` -> compressor -> ``crc32c``, see
:mod:`chunkio.backends.zarr.chunks`), followed by an index: one ``(offset, nbytes)`` pair of
little-endian ``uint64`` per inner chunk in C order of the inner-chunk grid, then the crc32c of
those index bytes. An inner chunk that is not stored has both fields ``2**64 - 1``.

What zarr-python 3 writes (the tests compare bytes):

* Inner chunks are concatenated in *Morton* (Z-) order of the inner-chunk grid, while the index
  lists them in C order. For grids with one axis of more than one chunk (chunkio shards along
  the sample axis only) both orders are the same; :func:`encode_shard` takes ``grid=`` for the
  general case.
* Inner chunks lying wholly past the array's end (a partial last shard) are never stored, even
  with ``write_empty_chunks=True``; an inner chunk reaching past the end is stored padded with
  the fill value to the full inner chunk shape, as unsharded edge chunks are.
* ``write_empty_chunks=True`` stores all-fill inner chunks like any other; with ``False`` they
  are left out of the shard (index entry empty), and a shard of nothing but such chunks is not
  written at all (no object). :func:`encode_shard` of all-``None`` chunks returns the bare
  index, which zarr-python reads as a shard of fill values.
* No padding or alignment: the first chunk starts at byte 0 (``index_location="end"``) or right
  after the index (``"start"``; offsets count from the start of the shard object).

A sharded array's layout, read from its ``zarr.json``, is :mod:`.shard`'s.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ...errors import CorruptChunkError
from .._checksum import crc32c

__all__ = [
    "EMPTY",
    "INDEX_CODECS",
    "Chunk",
    "IndexLocation",
    "InnerChunk",
    "check_index",
    "encode_shard",
    "index_nbytes",
    "inner_range",
    "merged_ranges",
    "morton_order",
    "parse_index",
    "shard_parts",
    "sharding_codec",
]

#: the index entry (offset and nbytes) of an inner chunk that is not stored
EMPTY = 2**64 - 1
_EMPTY = np.uint64(EMPTY)

IndexLocation = Literal["start", "end"]

#: the index codecs chunkio writes (and zarr-python's default)
INDEX_CODECS: tuple[dict[str, Any], ...] = (
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
)

Chunk = bytes | bytearray | memoryview
#: one stored inner chunk: its bytes, or its parts in order (a body and its crc32c, say)
InnerChunk = Chunk | tuple[Chunk, ...]


def sharding_codec(
    inner_chunk_shape: tuple[int, ...],
    inner_codecs: Sequence[Mapping[str, Any]],
    *,
    index_location: IndexLocation = "end",
    dtype: Any = None,
) -> dict[str, Any]:
    """The ``sharding_indexed`` entry of a sharded array's ``codecs`` in ``zarr.json``.

    ``inner_codecs`` are copied as given; with ``dtype`` they are first completed the way
    zarr-python completes them for that data type: ``bytes`` loses its ``endian`` for
    one-byte types and gains ``"little"`` otherwise; ``blosc``, ``zstd`` and ``gzip`` get
    zarr-python's defaults (Blosc's ``typesize`` and ``shuffle`` from the data type), keys in
    zarr-python's order.

    >>> sharding_codec((2, 3), [{"name": "bytes"}], dtype="uint8")["configuration"]["codecs"]
    [{'name': 'bytes'}]
    """
    codecs = [copy.deepcopy(dict(c)) for c in inner_codecs]
    if dtype is not None:
        codecs = [_complete(c, np.dtype(dtype)) for c in codecs]
    if index_location not in ("start", "end"):
        raise ValueError(f"index_location must be 'start' or 'end', not {index_location!r}")
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [int(c) for c in inner_chunk_shape],
            "codecs": codecs,
            "index_codecs": copy.deepcopy(list(INDEX_CODECS)),
            "index_location": index_location,
        },
    }


def _complete(codec: dict[str, Any], dtype: np.dtype[Any]) -> dict[str, Any]:
    """``codec`` with zarr-python's defaults for ``dtype`` filled in, keys in its order."""
    name = codec.get("name")
    conf = dict(codec.get("configuration") or {})
    size = dtype.itemsize
    if name == "bytes":
        if size == 1:
            return {"name": "bytes"}
        return {"name": "bytes", "configuration": {"endian": conf.get("endian", "little")}}
    if name == "blosc":
        shuffle = conf.get("shuffle") or ("bitshuffle" if size == 1 else "shuffle")
        typesize = conf.get("typesize")
        return {
            "name": "blosc",
            "configuration": {
                "typesize": size if typesize is None else typesize,
                "cname": conf.get("cname", "zstd"),
                "clevel": conf.get("clevel", 5),
                "shuffle": shuffle,
                "blocksize": conf.get("blocksize", 0),
            },
        }
    if name == "zstd":
        level, checksum = conf.get("level", 0), conf.get("checksum", False)
        return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}
    if name == "gzip":
        return {"name": "gzip", "configuration": {"level": conf.get("level", 5)}}
    return codec


def index_nbytes(n_inner: int, *, checksum: bool = True) -> int:
    """Bytes of a shard's index for ``n_inner`` inner chunks (its crc32c included).

    >>> index_nbytes(4), index_nbytes(4, checksum=False)
    (68, 64)
    """
    return 16 * n_inner + (4 if checksum else 0)


def morton_order(grid: tuple[int, ...]) -> npt.NDArray[np.intp]:
    """C-order numbers of the inner chunks of ``grid`` in the order zarr-python stores them.

    Morton (Z-) order with the bits of each axis interleaved, axes that need fewer bits
    dropping out (zarr-python's ``_morton_order``); the identity when at most one axis has more
    than one chunk.

    >>> morton_order((2, 2)).tolist(), morton_order((3, 1)).tolist()
    ([0, 2, 1, 3], [0, 1, 2])
    """
    n = math.prod(grid)
    if sum(1 for g in grid if g > 1) <= 1:
        return np.arange(n, dtype=np.intp)
    coords = np.stack(np.unravel_index(np.arange(n, dtype=np.intp), grid), axis=1)
    bits = [(g - 1).bit_length() for g in grid]
    codes = np.zeros(n, dtype=np.int64)
    out_bit = 0
    for bit in range(max(bits)):
        for axis, width in enumerate(bits):
            if bit < width:
                codes |= ((coords[:, axis] >> bit) & 1).astype(np.int64) << out_bit
                out_bit += 1
    return np.argsort(codes, kind="stable").astype(np.intp)


def encode_shard(
    inner: Sequence[InnerChunk | None],
    *,
    grid: tuple[int, ...] | None = None,
    index_location: IndexLocation = "end",
    checksum: bool = True,
) -> bytes:
    """A shard object from its inner chunks' encoded bytes, byte for byte as zarr-python writes.

    ``inner`` holds each inner chunk as the inner codec chain encodes it (compressed, its
    crc32c appended), in C order of the inner-chunk grid; ``None`` (or no bytes) is a chunk
    not stored. ``grid`` (the inner-chunk grid of the shard) only matters when more than one
    axis has several chunks: the chunks are then stored in Morton order (see
    :func:`morton_order`). ``checksum`` adds the index's crc32c (``bytes`` + ``crc32c``
    index codecs).

    >>> shard = encode_shard([b"ab", None, b"c"])
    >>> parse_index(shard, 3, where="x").tolist()[:2], shard[:3]
    ([[0, 2], [18446744073709551615, 18446744073709551615]], b'abc')
    """
    return b"".join(shard_parts(inner, grid=grid, index_location=index_location, checksum=checksum))


def shard_parts(
    inner: Sequence[InnerChunk | None],
    *,
    grid: tuple[int, ...] | None = None,
    index_location: IndexLocation = "end",
    checksum: bool = True,
) -> list[Chunk]:
    """:func:`encode_shard` as the list of buffers that, written in order, make the shard:
    a writer hands them to one ``writev`` instead of copying them into one ``bytes``."""
    n = len(inner)
    if grid is not None and math.prod(grid) != n:
        raise ValueError(f"{n} inner chunks given for a grid of {grid} ({math.prod(grid)})")
    order = range(n) if grid is None else morton_order(grid).tolist()
    index = np.full((n, 2), _EMPTY, dtype="<u8")
    parts: list[Chunk] = []
    pos = index_nbytes(n, checksum=checksum) if index_location == "start" else 0
    for i in order:
        chunk = inner[i]
        pieces = chunk if isinstance(chunk, tuple) else () if chunk is None else (chunk,)
        size = sum(memoryview(p).nbytes for p in pieces)
        if not size:
            continue  # not stored: the index keeps its empty entry
        index[i] = (pos, size)
        parts.extend(pieces)
        pos += size
    table = _index_bytes(index, checksum)
    if index_location == "start":
        parts.insert(0, table)
    elif index_location == "end":
        parts.append(table)
    else:
        raise ValueError(f"index_location must be 'start' or 'end', not {index_location!r}")
    return parts


def _index_bytes(index: npt.NDArray[Any], checksum: bool) -> bytes:
    raw = np.ascontiguousarray(index, dtype="<u8").view(np.uint8).reshape(-1)
    tail = crc32c(raw).to_bytes(4, "little") if checksum else b""
    return raw.tobytes() + tail


def parse_index(
    tail: bytes | bytearray | memoryview | npt.NDArray[Any],
    n_inner: int,
    *,
    where: str,
    shard_size: int | None = None,
    checksum: bool = True,
    index_location: IndexLocation = "end",
) -> npt.NDArray[np.uint64]:
    """The ``(n_inner, 2)`` index (offset, nbytes) from a shard's index bytes.

    ``tail`` is the shard, or any part of it ending with the index (its last
    :func:`index_nbytes` bytes are used). The crc32c is checked; with ``shard_size`` (the whole
    object's length) the entries are checked too (:func:`check_index`). Damage raises
    :class:`~chunkio.errors.CorruptChunkError` naming ``where``.
    """
    size = index_nbytes(n_inner, checksum=checksum)
    raw = tail if isinstance(tail, np.ndarray) else np.frombuffer(tail, dtype=np.uint8)
    raw = raw.reshape(-1).view(np.uint8)
    if raw.size < size:
        raise CorruptChunkError(
            f"{where}: shard is truncated: {raw.size} bytes where its index alone takes "
            f"{size} ({n_inner} inner chunks)"
        )
    raw = raw[raw.size - size :]
    body = raw[: 16 * n_inner]
    if checksum and crc32c(body) != int.from_bytes(raw[16 * n_inner :].tobytes(), "little"):
        raise CorruptChunkError(
            f"{where}: shard index fails its crc32c checksum (the shard is corrupt or truncated)"
        )
    index = body.view("<u8").reshape(n_inner, 2).astype(np.uint64)
    if shard_size is not None:
        check_index(
            index, shard_size, where=where, checksum=checksum, index_location=index_location
        )
    return index


def check_index(
    index: npt.NDArray[np.uint64],
    shard_size: int,
    *,
    where: str,
    checksum: bool = True,
    index_location: IndexLocation = "end",
) -> None:
    """Raise :class:`~chunkio.errors.CorruptChunkError` unless every entry of ``index`` is
    empty (both fields ``2**64 - 1``) or a byte range inside the ``shard_size``-byte shard that
    does not overlap the index itself."""
    n = index.shape[0]
    table = index_nbytes(n, checksum=checksum)
    if shard_size < table:
        raise CorruptChunkError(
            f"{where}: shard is truncated: {shard_size} bytes where its index alone takes {table}"
        )
    offsets = index[:, 0].astype(np.uint64)
    sizes = index[:, 1].astype(np.uint64)
    empty_off, empty_size = offsets == _EMPTY, sizes == _EMPTY
    half = np.flatnonzero(empty_off != empty_size)
    if half.size:
        i = int(half[0])
        raise CorruptChunkError(
            f"{where}: shard index entry {i} is half empty "
            f"(offset {int(offsets[i])}, nbytes {int(sizes[i])})"
        )
    lo, hi = (table, shard_size) if index_location == "start" else (0, shard_size - table)
    used = ~empty_off
    # offset <= hi and nbytes <= hi - offset (no uint64 overflow)
    bad = used & ((offsets < np.uint64(lo)) | (offsets > np.uint64(hi)))
    bad |= used & ~bad & (sizes > np.uint64(hi) - np.minimum(offsets, np.uint64(hi)))
    wrong = np.flatnonzero(bad)
    if wrong.size:
        i = int(wrong[0])
        start, nbytes = int(offsets[i]), int(sizes[i])
        what = (
            "shard index points into the index before its chunks"
            if start < lo
            else "shard index points past its end"
        )
        raise CorruptChunkError(
            f"{where}: {what}: inner chunk {i} at bytes {start}..{start + nbytes}, but the "
            f"chunks of this {shard_size}-byte shard lie in bytes {lo}..{hi} and its "
            f"{table}-byte index takes the rest ({wrong.size} bad of {n} entries)"
        )


def inner_range(index: npt.NDArray[np.uint64], i: int) -> tuple[int, int] | None:
    """``(start, stop)`` bytes of inner chunk ``i`` within its shard, ``None`` if not stored.

    >>> inner_range(parse_index(encode_shard([b"ab", None]), 2, where="x"), 0)
    (0, 2)
    """
    offset, nbytes = int(index[i, 0]), int(index[i, 1])
    if offset == EMPTY and nbytes == EMPTY:
        return None
    return offset, offset + nbytes


def merged_ranges(
    index: npt.NDArray[np.uint64], wanted: Sequence[int], *, gap: int | None = 0
) -> list[tuple[int, int, list[int]]]:
    """Byte ranges to fetch inner chunks ``wanted`` of a shard, neighbours merged.

    Chunks not stored are left out; the rest are sorted by offset, and one whose start lies at
    most ``gap`` bytes after the previous range's end joins that range. Each range is
    ``(start, stop, [inner chunk numbers in it, by offset])``.

    >>> index = parse_index(encode_shard([b"aa", b"bb", None, b"cc"]), 4, where="x")
    >>> merged_ranges(index, [3, 0, 2]), merged_ranges(index, [3, 0], gap=2)
    ([(0, 2, [0]), (4, 6, [3])], [(0, 6, [0, 3])])
    """
    if gap is not None and gap < 0:
        raise ValueError(f"gap must be >= 0 or None (no merging), not {gap}")
    spans = sorted(
        (r[0], r[1], i) for i in dict.fromkeys(wanted) if (r := inner_range(index, i)) is not None
    )
    out: list[tuple[int, int, list[int]]] = []
    for start, stop, i in spans:
        if out and gap is not None and start - out[-1][1] <= gap:
            first, end, members = out[-1]
            members.append(i)
            out[-1] = (first, max(end, stop), members)
        else:
            out.append((start, stop, [i]))
    return out
