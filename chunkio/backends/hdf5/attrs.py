"""HDF5 attributes as plain Python: bytes as text, NumPy scalars as Python numbers, chunkio's
own objects (stored as JSON text) parsed."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["decode_attrs"]


def decode_attrs(attrs: Any) -> dict[str, Any]:
    """HDF5 attributes -> plain Python (``chunkio*`` objects are stored as JSON text)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(value, str) and key.startswith("chunkio"):
            value = json.loads(value) if key == "chunkio" else _json_or_text(value)
        elif isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
