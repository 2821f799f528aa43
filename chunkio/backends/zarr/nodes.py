"""Groups and string arrays of a Zarr store, read through zarr-python: the attributes of a
group (an AnnData sparse matrix or dataframe column) and the values of a string array
(categories), which chunkio's own chunk reads do not serve."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import zarr

from ...errors import ChunkioError, CorruptChunkError, FormatError, MissingFieldError

__all__ = ["ZARR_DECODE_ERRORS", "array_attrs", "group_attrs", "read_text"]

#: what zarr-python's codecs and chunk decoding raise on bytes they cannot decode (e.g.
#: numcodecs' Zstd: ``RuntimeError: Zstd decompression error``; a chunk of the wrong size:
#: ``ValueError``; a codec's framing: ``KeyError``, ``TypeError``, ``IndexError``)
ZARR_DECODE_ERRORS = (ValueError, RuntimeError, KeyError, TypeError, IndexError, AssertionError)


def _node(group: Any, name: str, where: str) -> Any:
    try:
        return group[name]
    except KeyError as err:
        raise MissingFieldError(f"{where}: nothing at {name!r}") from err
    except ChunkioError:
        raise
    except ZARR_DECODE_ERRORS as err:  # a zarr.json zarr-python cannot parse
        raise FormatError(
            f"{where}: {name!r} cannot be opened by zarr-python ({type(err).__name__}: {err})"
        ) from err


def group_attrs(group: Any, name: str, where: str) -> dict[str, Any] | None:
    """The attributes of group ``name`` of zarr group ``group``; ``None`` for an array."""
    node = _node(group, name, where)
    return None if isinstance(node, zarr.Array) else dict(node.attrs)


def read_text(group: Any, name: str, where: str) -> list[str]:
    """Every value of the 1-D string array ``name``."""
    node = _node(group, name, where)
    if not isinstance(node, zarr.Array) or np.dtype(node.dtype).kind not in "OSUT":
        raise FormatError(f"{where}: {name!r} is not an array of strings")
    try:
        values = np.asarray(node[...]).reshape(-1).tolist()
    except ZARR_DECODE_ERRORS as err:  # zarr-python's codecs: e.g. "Zstd decompression error"
        raise CorruptChunkError(
            f"{where}: array {name!r} (read whole by zarr-python) cannot be decoded "
            f"({type(err).__name__}: {err})"
        ) from err
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]


def array_attrs(meta: Mapping[str, Any], v2_attrs: Callable[[], Any]) -> dict[str, Any]:
    """An array's attributes from its metadata ``meta`` (v3 ``attributes``; v2: ``v2_attrs()``,
    its ``.zattrs`` as zarr-python reads them). A v2 array xarray wrote (``_ARRAY_DIMENSIONS``)
    has its ``fill_value`` as ``_FillValue``, as xarray reads it (:mod:`chunkio.format.cf`).

    >>> array_attrs({"zarr_format": 2, "fill_value": -1}, lambda: {"_ARRAY_DIMENSIONS": ["t"]})
    {'_ARRAY_DIMENSIONS': ['t'], '_FillValue': -1}
    """
    if meta.get("zarr_format") != 2:
        return dict(meta.get("attributes") or {})
    attrs = dict(v2_attrs())
    if "_ARRAY_DIMENSIONS" in attrs and meta.get("fill_value") is not None:
        attrs.setdefault("_FillValue", meta["fill_value"])
    return attrs
