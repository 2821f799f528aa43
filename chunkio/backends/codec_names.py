"""Naming a stored codec chain in chunkio's terms: the inverse of the codec table's writers.

:class:`CodecInfo` says how an array's chunks are encoded, as :class:`~.codec_table.Compression`
names it; :func:`zarr_codec_info` (a Zarr v3 chain), :func:`zarr2_codec_info` and
:func:`zarr2_codecs` (a Zarr v2 compressor and filters) and :func:`hdf5_codec_info` (an HDF5
filter pipeline) read it from stored metadata, for descriptions (``chunkio info``,
:class:`~chunkio.backends.base.ArrayInfo`). The names come from the rows of
:mod:`.codec_table` (the one codec table); nothing here decodes or encodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .codec_table import DECODED, HDF5_SAFE

__all__ = ["CodecInfo", "hdf5_codec_info", "zarr2_codec_info", "zarr2_codecs", "zarr_codec_info"]

#: the Zarr v3 compressor names chunkio decodes itself (the table's decoded rows)
_COMPRESSORS = frozenset(d.zarr for d in DECODED if d.zarr is not None)


@dataclass(frozen=True)
class CodecInfo:
    """How an array's chunks are encoded, named as :class:`Compression` names it.

    ``codec`` is one of :data:`CODECS` when the stored codecs are ones chunkio writes (other
    compressors keep their stored name, e.g. ``"blosc-zlib"``); ``level`` is ``None`` where
    the format records none (HDF5's LZ4 filter); ``checksum`` is ``"crc32c"`` (Zarr),
    ``"fletcher32"`` (HDF5) or ``None``.

    >>> str(CodecInfo("lz4", 5, "crc32c")), str(CodecInfo("none", None, None))
    ('lz4(5)+crc32c', 'none')
    """

    codec: str
    level: int | None = None
    checksum: str | None = None

    def __str__(self) -> str:
        level = "" if self.level is None else f"({self.level})"
        return self.codec + level + ("" if self.checksum is None else f"+{self.checksum}")


def _blosc_name(cname: str, shuffle: object) -> str:
    """chunkio's name of a Blosc configuration: ``lz4`` is Blosc-LZ4 without shuffle."""
    return "lz4" if cname == "lz4" and shuffle in ("noshuffle", 0) else f"blosc-{cname}"


def zarr_codec_info(codecs: Sequence[Mapping[str, Any]]) -> CodecInfo:
    """The inverse of :func:`zarr_compressors`: a Zarr codec chain in chunkio's names.

    >>> str(zarr_codec_info([{"name": "bytes"}, {"name": "blosc", "configuration": {
    ...     "cname": "lz4", "clevel": 5, "shuffle": "noshuffle"}}, {"name": "crc32c"}]))
    'lz4(5)+crc32c'
    """
    for c in codecs:  # a sharded array: its inner chunks' codecs
        if c.get("name") == "sharding_indexed":
            return zarr_codec_info((c.get("configuration") or {}).get("codecs") or [])
    names = [str(c.get("name")) for c in codecs]
    checksum = "crc32c" if "crc32c" in names else None
    compressors = [c for c in codecs if c.get("name") in _COMPRESSORS]
    if not compressors:
        return CodecInfo("none", None, checksum)
    if len(compressors) > 1:
        return CodecInfo("+".join(str(c["name"]) for c in compressors), None, checksum)
    name = str(compressors[0]["name"])
    conf = compressors[0].get("configuration") or {}
    level = conf.get("level", conf.get("clevel"))
    if name == "blosc":
        name = _blosc_name(str(conf.get("cname")), conf.get("shuffle"))
    return CodecInfo(name, None if level is None else int(level), checksum)


def zarr2_codecs(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Zarr v2 array's filters, then its compressor, as Zarr v3-style codec entries
    (``name``, ``configuration``), for descriptions (``chunkio info``).

    >>> chain = zarr2_codecs({"filters": [{"id": "delta", "dtype": "<i4"}],
    ...                       "compressor": {"id": "zlib", "level": 1}})
    >>> chain[0], chain[1]["name"]
    ({'name': 'delta', 'configuration': {'dtype': '<i4'}}, 'zlib')
    """
    compressor = meta.get("compressor")
    chain = [*(meta.get("filters") or []), *([compressor] if compressor else [])]
    return [
        {"name": str(c.get("id")), "configuration": {k: v for k, v in c.items() if k != "id"}}
        for c in chain
    ]


def zarr2_codec_info(meta: Mapping[str, Any]) -> CodecInfo:
    """A Zarr v2 array's compressor in chunkio's names (v2 has no checksum codec).

    >>> str(zarr2_codec_info({"compressor": {"id": "zlib", "level": 1}}))
    'gzip(1)'
    >>> str(zarr2_codec_info({"compressor": None}))
    'none'
    """
    c = meta.get("compressor")
    if not c:
        return CodecInfo("none", None, None)
    cid = str(c.get("id"))
    name = next((d.zarr for d in DECODED if cid in d.zarr2 and d.zarr is not None), cid)
    if cid == "blosc":
        name = _blosc_name(str(c.get("cname")), c.get("shuffle"))
    level = c.get("level", c.get("clevel"))
    return CodecInfo(name, None if level is None else int(level), None)


#: Blosc's compressor codes, as the HDF5 Blosc filter stores them (its 7th cd_value)
_BLOSC_CODES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}


def hdf5_codec_info(filters: Sequence[tuple[int, Sequence[int]]]) -> CodecInfo:
    """The inverse of :func:`hdf5_filters`: ``(filter id, cd_values)`` pairs in chunkio's names.

    >>> str(hdf5_codec_info([(32004, ()), (3, ())])), str(hdf5_codec_info([(1, (4,))]))
    ('lz4+fletcher32', 'gzip(4)')
    """
    codec, level, checksum = "none", None, None
    for fid, values in filters:
        if fid == 3:
            checksum = "fletcher32"
        elif fid == 2:
            continue  # byte shuffle: chunkio never adds it, it compresses nothing by itself
        elif fid == 32004:
            codec, level = "lz4", None  # the HDF5 LZ4 filter has no level
        elif fid in (1, 32015):
            codec = "gzip" if fid == 1 else "zstd"  # cd_values are unsigned: zstd's -3 below
            level = int(np.uint32(values[0]).view(np.int32)) if values else None
        elif fid == 32001 and len(values) >= 7:
            codec = f"blosc-{_BLOSC_CODES.get(values[6], values[6])}"
            level = int(values[4])
        else:
            codec, level = HDF5_SAFE.get(fid, f"filter-{fid}"), None
    return CodecInfo(codec, level, checksum)
