"""Groups and string arrays of a Zarr store, read through zarr-python: the attributes of a
group (an AnnData sparse matrix or dataframe column) and the values of a string array
(categories), which chunkio's own chunk reads do not serve."""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr

from ...errors import FormatError, MissingFieldError

__all__ = ["group_attrs", "read_text"]


def _node(group: Any, name: str, where: str) -> Any:
    try:
        return group[name]
    except KeyError as err:
        raise MissingFieldError(f"{where}: nothing at {name!r}") from err


def group_attrs(group: Any, name: str, where: str) -> dict[str, Any] | None:
    """The attributes of group ``name`` of zarr group ``group``; ``None`` for an array."""
    node = _node(group, name, where)
    return None if isinstance(node, zarr.Array) else dict(node.attrs)


def read_text(group: Any, name: str, where: str) -> list[str]:
    """Every value of the 1-D string array ``name``."""
    node = _node(group, name, where)
    if not isinstance(node, zarr.Array) or np.dtype(node.dtype).kind not in "OSUT":
        raise FormatError(f"{where}: {name!r} is not an array of strings")
    values = np.asarray(node[...]).reshape(-1).tolist()
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
