"""An array's metadata document (v3 ``zarr.json``, v2 ``.zarray``) checked at the boundary:
its fields (:func:`check_array_document`), then its codecs (:func:`check_codecs`).

Every field of the document that chunkio reads (to pick an engine, refuse codecs, size a
chunk buffer) is checked for its type and range here, once, before anything uses it: a
:class:`~chunkio.errors.FormatError` naming the array, the document and the key, with what
was expected and what came, instead of an ``AttributeError`` deep in a codec table or a
``ZeroDivisionError`` in a read plan.

A chunk is decoded whole (into the caller's buffer, or a scratch chunk), so its declared
shape is what one decode allocates: a chunk of more than :data:`MAX_CHUNK_BYTES` is refused
here, before any allocation, however long its array. Chunks longer than their array are
allowed below that bound (zarr-python writes them, and so does chunkio for a dataset of fewer
samples than a chunk holds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import FormatError, OptionalDependencyError, UnsafeInputError
from ...util.messages import listing
from ..codec_packages import missing_zarr_codecs, zarr_install_hint
from ..codec_table import ZARR2_SAFE, ZARR_SAFE
from .shard import shard_layout

__all__ = ["MAX_CHUNK_BYTES", "check_array_document", "check_codecs"]

#: the most bytes one chunk may declare: what Blosc (and numcodecs' other codecs, whose
#: buffers are C ints) take in one buffer; a larger chunk cannot have been written by them
MAX_CHUNK_BYTES = 2**31


def check_array_document(meta: Mapping[str, Any], *, where: str) -> None:
    """Check the fields chunkio reads of an array's metadata ``meta`` (normalised as
    :mod:`.documents` keeps it: a v2 ``.zarray`` has ``zarr_format: 2``); ``where`` names the
    array.

    >>> meta = {"zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "int8",
    ...         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
    ...         "chunk_key_encoding": {"name": "default"}, "codecs": [{"name": "bytes"}]}
    >>> check_array_document(meta, where="array 'x'")
    >>> check_array_document({**meta, "codecs": [7]}, where="array 'x'")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: array 'x' (zarr.json): 'codecs'[0] must be an object with a \
'name'; got 7
    """
    if meta.get("zarr_format") == 2:
        _check_v2(meta, f"{where} (.zarray)")
    else:
        _check_v3(meta, f"{where} (zarr.json)")


def _check_v3(meta: Mapping[str, Any], where: str) -> None:
    shape = _sizes(meta.get("shape"), "'shape'", where, least=0)
    dtype = meta.get("data_type")
    if not isinstance(dtype, (str, Mapping)):
        raise FormatError(f"{where}: 'data_type' must be a name or an object; got {dtype!r}")
    grid = _object(meta.get("chunk_grid"), "'chunk_grid'", where)
    _name(grid, "'chunk_grid'", where)
    config = _object(grid.get("configuration", {}), "'chunk_grid'.'configuration'", where)
    # the unit of decoding: the chunk, or a shard's inner chunk (a shard is never decoded
    # whole, so it may be larger)
    decoded: tuple[int, ...] | None = None
    if grid.get("name") == "regular":
        key = "'chunk_grid'.'configuration'.'chunk_shape'"
        decoded = _sizes(config.get("chunk_shape"), key, where, least=1)
        _same_axes(shape, decoded, where)
    encoding = meta.get("chunk_key_encoding", {"name": "default"})
    encoding = _object(encoding, "'chunk_key_encoding'", where)
    _name(encoding, "'chunk_key_encoding'", where)
    _object(encoding.get("configuration", {}), "'chunk_key_encoding'.'configuration'", where)
    codecs = meta.get("codecs")
    if not isinstance(codecs, (list, tuple)):
        raise FormatError(f"{where}: 'codecs' must be a list; got {codecs!r}")
    for i, codec in enumerate(codecs):
        _codec(codec, f"'codecs'[{i}]", where)
        if codec["name"] == "sharding_indexed":
            inner = _object(codec.get("configuration"), f"'codecs'[{i}].'configuration'", where)
            for key in ("codecs", "index_codecs"):
                listed = inner.get(key, [])
                if not isinstance(listed, (list, tuple)):
                    raise FormatError(
                        f"{where}: 'codecs'[{i}].'configuration'.{key!r} must be a list; got "
                        f"{listed!r}"
                    )
                for j, c in enumerate(listed):
                    _codec(c, f"'codecs'[{i}].'configuration'.{key!r}[{j}]", where)
            key = f"'codecs'[{i}].'configuration'.'chunk_shape'"
            decoded = _sizes(inner.get("chunk_shape"), key, where, least=1)
            _same_axes(shape, decoded, where)
    if decoded is not None:
        _check_chunk_bytes(decoded, _itemsize(dtype), where)
    _object(meta.get("attributes", {}), "'attributes'", where)


def _check_v2(meta: Mapping[str, Any], where: str) -> None:
    shape = _sizes(meta.get("shape"), "'shape'", where, least=0)
    chunks = _sizes(meta.get("chunks"), "'chunks'", where, least=1)
    dtype = meta.get("dtype")
    if not isinstance(dtype, (str, list, tuple)):
        raise FormatError(f"{where}: 'dtype' must be a type string or a list; got {dtype!r}")
    _same_axes(shape, chunks, where)
    _check_chunk_bytes(chunks, _itemsize(dtype), where)
    compressor = meta.get("compressor")
    if compressor is not None and not isinstance(compressor, Mapping):
        raise FormatError(f"{where}: 'compressor' must be an object or null; got {compressor!r}")
    if compressor is not None and not isinstance(compressor.get("id"), str):
        raise FormatError(f"{where}: 'compressor' must have an 'id' string; got {compressor!r}")
    filters = meta.get("filters")
    if filters is not None and not isinstance(filters, (list, tuple)):
        raise FormatError(f"{where}: 'filters' must be a list or null; got {filters!r}")
    for i, f in enumerate(filters or []):
        if not isinstance(f, Mapping) or not isinstance(f.get("id"), str):
            raise FormatError(f"{where}: 'filters'[{i}] must be an object with an 'id'; got {f!r}")
    if meta.get("order", "C") not in ("C", "F"):
        raise FormatError(f"{where}: 'order' must be 'C' or 'F'; got {meta.get('order')!r}")
    separator = meta.get("dimension_separator")
    if separator not in (None, ".", "/"):
        raise FormatError(f"{where}: 'dimension_separator' must be '.' or '/'; got {separator!r}")


def _object(value: Any, key: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FormatError(f"{where}: {key} must be an object; got {value!r}")
    return value


def _name(value: Mapping[str, Any], key: str, where: str) -> None:
    if not isinstance(value.get("name"), str):
        raise FormatError(f"{where}: {key} must have a 'name' string; got {dict(value)!r}")


def _codec(codec: Any, key: str, where: str) -> None:
    if not isinstance(codec, Mapping) or not isinstance(codec.get("name"), str):
        raise FormatError(f"{where}: {key} must be an object with a 'name'; got {codec!r}")
    _object(codec.get("configuration", {}), f"{key}.'configuration'", where)


def _sizes(value: Any, key: str, where: str, *, least: int) -> tuple[int, ...]:
    """A list of ints, each at least ``least`` (bools are not sizes)."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= least for v in value
    ):
        raise FormatError(f"{where}: {key} must be a list of integers >= {least}; got {value!r}")
    return tuple(value)


def _itemsize(dtype: Any) -> int:
    """Bytes per element of a declared data type, where NumPy knows it (else 1: the bound
    on a chunk's elements then still holds)."""
    try:
        return max(1, int(np.dtype(dtype).itemsize))
    except (TypeError, ValueError):
        return 1


def _same_axes(shape: tuple[int, ...], chunks: tuple[int, ...], where: str) -> None:
    if len(chunks) != len(shape):
        raise FormatError(
            f"{where}: the chunk shape {list(chunks)} must have one size per axis of the "
            f"shape {list(shape)}"
        )


def _check_chunk_bytes(chunks: tuple[int, ...], itemsize: int, where: str) -> None:
    nbytes = math.prod(chunks) * itemsize
    if nbytes > MAX_CHUNK_BYTES:
        raise FormatError(
            f"{where}: a chunk of {list(chunks)} x {itemsize} bytes is {nbytes} bytes; at most "
            f"{MAX_CHUNK_BYTES} expected (the most one chunk is decoded into)"
        )


def check_codecs(
    meta: Mapping[str, Any], name: str, where: str, *, trust: bool = False
) -> tuple[str, ...]:
    """The array's codec names (v2: its compressor and filter ids; v3: its codecs, those
    inside shards included), refused unless decoding them cannot run code (or ``trust``),
    and unless a codec registry here knows each (:class:`OptionalDependencyError` naming the
    package to install), before zarr parses or decodes anything."""
    fmt = 2 if meta.get("zarr_format") == 2 else 3
    what = f"{where}: array {name!r}" + (" (Zarr v2)" if fmt == 2 else "")
    if fmt == 2:
        configs = [meta.get("compressor"), *(meta.get("filters") or [])]
        names = [str(c.get("id")) for c in configs if isinstance(c, Mapping)]
    else:
        codecs = list(meta.get("codecs") or [])
        names = [str(c.get("name")) for c in codecs if c.get("name") != "sharding_indexed"]
        if not trust:  # before the shard configuration is parsed
            _refuse_unsafe(names, ZARR_SAFE, what, fmt)
        layout = shard_layout(meta, where=what)  # FormatError if unreadable
        if layout is not None:
            names += [str(c.get("name")) for c in (*layout.inner_codecs, *layout.index_codecs)]
    if not trust:
        _refuse_unsafe(names, ZARR2_SAFE if fmt == 2 else ZARR_SAFE, what, fmt)
    missing = missing_zarr_codecs(names, fmt)
    if missing:
        registry = "numcodecs" if fmt == 2 else "zarr-python"
        hints = "; ".join(f"{c!r}: {zarr_install_hint(c)}" for c in missing)
        raise OptionalDependencyError(
            f"{what} declares codec(s) {missing} that this installation cannot decode (no "
            f"{registry} codec of that name is registered): {hints}"
        )
    return tuple(names)


def _refuse_unsafe(names: Sequence[str], safe: frozenset[str], what: str, fmt: int) -> None:
    """Raise :class:`UnsafeInputError` naming the codecs of ``names`` outside ``safe`` (and
    what to install for those no registry knows either)."""
    unsafe = [n for n in names if n not in safe]
    if unsafe:
        missing = missing_zarr_codecs(unsafe, fmt)
        hints = "".join(f"; {c!r} is not installed either: {zarr_install_hint(c)}" for c in missing)
        raise UnsafeInputError(
            f"{what} declares codec(s) {unsafe}; chunkio only decodes "
            f"{listing(sorted(safe), limit=6)} unless opened with trust_codecs=True{hints}"
        )
