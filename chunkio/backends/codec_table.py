"""The one codec table: what chunkio writes, decodes itself and trusts, Zarr and HDF5.

Three kinds of row, side by side so that adding a codec is one place:

* :data:`WRITTEN`: the codecs a conversion writes (``Compression(codec=...)``), each with its
  Zarr v3 codec chain and its HDF5 filter keywords;
* :data:`DECODED`: the compressors chunkio decodes itself from stored bytes (the Zarr engine
  and HDF5 raw chunk reads), by Zarr codec name and HDF5 filter id, with one decoder each;
* :data:`ZARR_SAFE` / :data:`HDF5_SAFE`: what may be opened without ``trust_codecs=True``
  (nothing that can run code, e.g. ``numcodecs.pickle``).

:func:`lz4_block` and :func:`lz4_unblock` are the ``yuv420`` image encoding's compressor
(:mod:`chunkio.images.yuv`: numcodecs' LZ4 format, one call per band of rows).

:mod:`.codec_names` names a stored chain in chunkio's terms from these rows.
Heavy libraries (zarr, hdf5plugin) are imported only by the functions that build their objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import deflate
import numcodecs
import numcodecs.blosc
import numcodecs.registry
import numcodecs.zstd
import numpy as np
import numpy.typing as npt
from numcodecs import lz4 as _lz4_codec

from . import framing

__all__ = [
    "CODECS",
    "DECODED",
    "DEFAULT_CODEC",
    "HDF5_SAFE",
    "HDF5_SHUFFLE",
    "WRITTEN",
    "ZARR2_SAFE",
    "ZARR_SAFE",
    "Compression",
    "Decode",
    "lz4_block",
    "lz4_unblock",
    "hdf5_filters",
    "hdf5plugin_filters",
    "unshuffle",
    "zarr_codec_registered",
    "zarr_compressors",
    "zarr2_codec",
    "zarr2_decoder",
    "zarr2_framing",
    "zarr_decoder",
    "zarr_encoder",
]

#: decode ``src`` (stored bytes) into all of ``dst``, or raise ValueError or RuntimeError
Decode = Callable[[npt.NDArray[np.uint8], npt.NDArray[np.uint8]], None]


# -- decoders ---------------------------------------------------------------------------------


def _inflate(src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8]) -> None:
    """Deflate in a zlib (HDF5's gzip filter, Zarr v2 ``zlib``) or gzip (Zarr ``gzip``)
    container, by libdeflate: the fastest correct decoder on the package index, measured
    against zlib, zlib-ng and ISA-L by ``python -m benchmarks.bench_deflate`` (README)."""
    try:
        if src[:2].tobytes() == framing.GZIP_MAGIC:
            data = deflate.gzip_decompress(src)
        else:  # at most dst.size bytes: a longer stream fails
            data = deflate.zlib_decompress(src, dst.size)
    except deflate.DeflateError as err:  # an Exception of its own: the contract says which
        raise ValueError(f"deflate stream cannot be decoded ({err})") from err
    if len(data) != dst.size:
        raise ValueError(f"deflate gave {len(data)} bytes, expected {dst.size}")
    dst[...] = np.frombuffer(data, np.uint8)


def _hdf5_lz4(src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8]) -> None:
    """The HDF5 LZ4 filter's frame (:func:`~.framing.hdf5_lz4_blocks`), block by block.

    numcodecs' LZ4 wants a block preceded by its decoded size (4 bytes, little-endian): those
    four bytes are written over the block's size field, so ``src`` must be writable and is
    changed (it was checked before).
    """
    for pos, size, out, want in framing.hdf5_lz4_blocks(src):
        if size == want:  # stored uncompressed
            dst[out : out + want] = src[pos + 4 : pos + 4 + want]
        else:  # numcodecs fills exactly ``want`` bytes or raises (the prefix says ``want``)
            src[pos : pos + 4] = np.frombuffer(want.to_bytes(4, "little"), np.uint8)
            _lz4_codec.decompress(src[pos : pos + 4 + size], dst[out : out + want])


def unshuffle(src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], itemsize: int) -> None:
    """Undo HDF5's byte shuffle filter (id 2): the first bytes of every element, then the
    second bytes, ...; a tail shorter than one element is stored as it is."""
    if src.size != dst.size:
        raise ValueError(f"shuffled chunk of {src.size} bytes, expected {dst.size}")
    whole = src.size - src.size % itemsize
    n = whole // itemsize
    dst[:whole].reshape(n, itemsize)[...] = src[:whole].reshape(itemsize, n).T
    dst[whole:] = src[whole:]


@dataclass(frozen=True)
class Decoded:
    """A compressor chunkio decodes itself: its stored names, its framing and its decoder.

    :meth:`decode` is the one place the :data:`Decode` contract is kept for every codec:
    the decoded size the stream declares (``declared``, read from its framing in O(1)) must
    be the destination's before ``decompress`` runs, which then fills exactly the declared
    bytes or raises (where a stream declares no size, exactly the destination).
    """

    name: str
    zarr: str | None  # the Zarr v3 codec name
    zarr2: tuple[str, ...]  # the Zarr v2 (numcodecs) compressor ids
    hdf5: int | None  # the HDF5 filter id
    declared: framing.Declared
    decompress: Decode

    def decode(self, src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8]) -> None:
        """Decode ``src`` into all of ``dst``, or raise ValueError (a stream of another size
        than ``dst``, cut short, padded) or RuntimeError (the library's own refusals)."""
        declared = self.declared(src, dst.size)
        if declared is not None and declared != dst.size:
            raise ValueError(
                f"{self.name} stream declares {declared} decoded bytes, expected {dst.size}"
            )
        self.decompress(src, dst)


DECODED: tuple[Decoded, ...] = (
    Decoded("zstd", "zstd", ("zstd",), 32015, framing.zstd_size, numcodecs.zstd.decompress),
    Decoded("Blosc", "blosc", ("blosc",), 32001, framing.blosc_size, numcodecs.blosc.decompress),
    Decoded("deflate", "gzip", ("gzip", "zlib"), 1, framing.gzip_size, _inflate),  # HDF5 name
    Decoded("LZ4", None, ("lz4",), None, framing.lz4_size, _lz4_codec.decompress),  # numcodecs'
    Decoded("HDF5 LZ4", None, (), 32004, framing.hdf5_lz4_size, _hdf5_lz4),  # the filter's
)
_BY_ZARR = {d.zarr: d.decode for d in DECODED if d.zarr is not None}
_BY_ZARR2 = {name: d.decode for d in DECODED for name in d.zarr2}
HDF5_DECODERS: dict[int, Decode] = {d.hdf5: d.decode for d in DECODED if d.hdf5 is not None}


def lz4_block(raw: Any) -> bytes:
    """``raw`` in numcodecs' LZ4 format (decoded size: 4 bytes little-endian; one block)."""
    return bytes(_lz4_codec.compress(raw))


#: :func:`lz4_block`'s inverse into ``dst`` (exactly its size; ValueError, RuntimeError)
lz4_unblock: Decode = _BY_ZARR2["lz4"]
LZ4_LIBRARY = str(_lz4_codec.__file__)  # their library, for compiled readers (images/yuv.py)


def zarr_decoder(codec: Mapping[str, Any]) -> Decode | None:
    """The decoder of one Zarr v3 bytes->bytes codec entry, ``None`` if chunkio has none
    (zarr-python then reads the array)."""
    return _BY_ZARR.get(str(codec.get("name")))


def zarr2_decoder(config: Mapping[str, Any]) -> Decode | None:
    """The decoder of a Zarr v2 compressor (its numcodecs config), ``None`` if chunkio has
    none (the array is then decoded through numcodecs itself)."""
    return _BY_ZARR2.get(str(config.get("id")))


def zarr2_framing(config: Mapping[str, Any]) -> framing.Declared | None:
    """The framing check of a Zarr v2 compressor chunkio knows, for chains numcodecs decodes
    whole (its Blosc reads as far as a header says, past a stream cut short)."""
    return next((d.declared for d in DECODED if str(config.get("id")) in d.zarr2), None)


def zarr2_codec(config: Mapping[str, Any]) -> Any:
    """numcodecs' codec object for a Zarr v2 compressor or filter config, for chains chunkio
    does not decode with its own decoders (the reader refuses ids outside
    :data:`ZARR2_SAFE` before this unless trusted)."""
    return numcodecs.get_codec(dict(config))


# -- what may be opened without trust ---------------------------------------------------------

#: Zarr v3 codecs whose decoding cannot run code; anything else (e.g. numcodecs.pickle) is
#: refused unless the dataset is opened with trust_codecs=True
ZARR_SAFE = frozenset({"bytes", "crc32c", "transpose", *_BY_ZARR})

#: Zarr v2 (numcodecs) compressor and filter ids whose decoding cannot run code; object
#: codecs (pickle, msgpack, JSON, vlen-*) and anything unknown need trust_codecs=True
ZARR2_SAFE = frozenset(
    {
        *_BY_ZARR2,
        "bz2",
        "lzma",
        "delta",
        "fixedscaleoffset",
        "shuffle",
        "quantize",
        "bitround",
        "astype",
        "packbits",
        "crc32",
        "adler32",
        "fletcher32",
        "jenkins_lookup3",
    }
)

#: HDF5 filter ids chunkio opens without trust, by name: compressors and checksums whose
#: decoding (by chunkio, or by h5py with hdf5plugin's filters) cannot run code
HDF5_SAFE: dict[int, str] = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    307: "bzip2",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32015: "zstd",
    32026: "blosc2",
}
HDF5_SHUFFLE = 2  # the HDF5 byte shuffle filter, undone by unshuffle()


def hdf5plugin_filters() -> dict[int, str]:
    """The HDF5 filters hdf5plugin provides (registered with HDF5 when it is imported), by id."""
    import hdf5plugin

    return {int(fid): name for name, fid in hdf5plugin.FILTERS.items()}


def zarr_codec_registered(name: str, zarr_format: int) -> bool:
    """Whether a codec registry here knows codec ``name``: numcodecs' for a Zarr v2 id,
    zarr-python's for a Zarr v3 name (and numcodecs' too for its ``numcodecs.<id>`` names,
    which zarr-python registers whether or not the package decoding one is installed)."""
    if zarr_format == 2:
        registry = numcodecs.registry
        return name in registry.codec_registry or name in registry.entries
    from zarr.registry import get_codec_class

    try:
        get_codec_class(name)
    except KeyError:
        return False
    bare = name.removeprefix("numcodecs.")
    return bare == name or zarr_codec_registered(bare, 2)


# -- what a conversion writes -----------------------------------------------------------------

_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


@dataclass(frozen=True)
class Written:
    """A codec a conversion writes, by chunkio's name: Zarr v3 codecs and HDF5 filters."""

    name: str
    default_level: int
    #: ``(blosc cname, blosc shuffle)`` for the codecs Zarr stores through Blosc
    blosc: tuple[str, str] | None = None


#: The default codec, chosen by measurement (README, "Choosing the defaults"): on natural
#: images LZ4 stores ~1.13x smaller than raw and decodes fast enough that a 2-worker loader
#: delivers ~1.6x the samples/s of zstd-3, whose extra ratio (~1.31x) costs more than it saves.
DEFAULT_CODEC = "lz4"

WRITTEN: dict[str, Written] = {
    w.name: w
    for w in (
        Written("zstd", 3),
        Written("lz4", 5, ("lz4", "noshuffle")),  # Blosc-LZ4 in Zarr, the LZ4 filter in HDF5
        Written("blosc-zstd", 3, ("zstd", "bitshuffle")),
        Written("blosc-lz4", 5, ("lz4", "bitshuffle")),
        Written("gzip", 6),
        Written("none", 0),
    )
}
CODECS = tuple(WRITTEN)


@dataclass(frozen=True)
class Compression:
    """How chunks are encoded: a codec, its level, and whether a checksum guards each chunk.

    ``checksum=True`` adds a crc32c codec (Zarr) or the fletcher32 filter (HDF5). ``level``
    defaults per codec (zstd 3, lz4 5, gzip 6).

    >>> Compression(), Compression("zstd").level
    (Compression(codec='lz4', level=5, checksum=True), 3)
    """

    codec: str = DEFAULT_CODEC
    level: int = None  # type: ignore[assignment]  # resolved per codec in __post_init__
    checksum: bool = True

    def __post_init__(self) -> None:
        if self.codec not in WRITTEN:
            raise ValueError(f"codec must be one of {CODECS}; got {self.codec!r}")
        if self.level is None:
            object.__setattr__(self, "level", WRITTEN[self.codec].default_level)
        if not isinstance(self.level, int) or not -5 <= self.level <= 22:
            raise ValueError(f"compression level must be an int in [-5, 22]; got {self.level!r}")


def zarr_compressors(c: Compression) -> list[Any]:
    """The Zarr v3 bytes->bytes codecs (zarr-python objects) for a :class:`Compression`."""
    from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

    written = WRITTEN[c.codec]
    chain: list[Any] = []
    if written.blosc is not None:
        cname, shuffle = written.blosc
        level = max(0, min(c.level, 9))
        chain.append(BloscCodec(cname=cname, clevel=level, shuffle=shuffle))  # type: ignore[arg-type]
    elif c.codec == "zstd":
        chain.append(ZstdCodec(level=c.level))
    elif c.codec == "gzip":
        chain.append(GzipCodec(level=max(0, min(c.level, 9))))
    if c.checksum:
        chain.append(Crc32cCodec())
    return chain


def hdf5_filters(c: Compression) -> dict[str, Any]:
    """``h5py`` dataset-creation keywords for a :class:`Compression` (filters, fletcher32)."""
    import hdf5plugin

    kw: dict[str, Any] = {"fletcher32": c.checksum}
    written = WRITTEN[c.codec]
    if c.codec == "zstd":
        kw["compression"] = hdf5plugin.Zstd(clevel=c.level)
    elif c.codec == "lz4":
        kw["compression"] = hdf5plugin.LZ4()
    elif written.blosc is not None:
        kw["compression"] = hdf5plugin.Blosc(
            cname=written.blosc[0],  # type: ignore[arg-type]  # from the table
            clevel=max(0, min(c.level, 9)),
            shuffle=hdf5plugin.Blosc.BITSHUFFLE,
        )
    elif c.codec == "gzip":
        kw["compression"] = "gzip"
        kw["compression_opts"] = max(0, min(c.level, 9))
    return kw


def zarr_encoder(codec: Mapping[str, Any]) -> Callable[[Any], Any] | None:
    """numcodecs' encoder for one Zarr v3 codec entry, configured exactly as zarr-python
    configures the same codec (chunkio writes chunk files byte for byte as zarr-python)."""
    name, conf = codec.get("name"), codec.get("configuration") or {}
    if name == "zstd":
        zstd = numcodecs.Zstd(level=int(conf.get("level", 0)), checksum=bool(conf.get("checksum")))
        return zstd.encode  # type: ignore[no-any-return]
    if name == "blosc" and conf.get("shuffle", "noshuffle") in _BLOSC_SHUFFLE:
        typesize = conf.get("typesize")
        blosc = numcodecs.Blosc(
            cname=str(conf.get("cname", "lz4")),
            clevel=int(conf.get("clevel", 5)),
            shuffle=_BLOSC_SHUFFLE[conf.get("shuffle", "noshuffle")],
            blocksize=int(conf.get("blocksize", 0)),
            typesize=None if typesize is None else int(typesize),
        )
        return blosc.encode  # type: ignore[no-any-return]
    if name == "gzip":
        return numcodecs.GZip(level=int(conf.get("level", 5))).encode  # type: ignore[no-any-return]
    return None
