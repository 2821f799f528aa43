"""CF decoding on read (``ChunkDataset(..., decoding=Decoding(cf=True))``): packed variables
as physical values.

xarray's ``to_zarr`` with an encoding (``{"dtype": "int16", "scale_factor": 0.01,
"add_offset": 273.15, "_FillValue": -32768}``) and netCDF4-style HDF5 files store a variable
as packed integers with attributes saying how to unpack them. With ``Decoding(cf=True)`` each field
whose arrays carry ``scale_factor``, ``add_offset``, ``_FillValue`` or ``missing_value``
comes back as xarray's ``open_zarr`` / ``open_dataset`` decode it: stored values equal to a
fill or missing value become NaN, the others ``stored * scale_factor + add_offset``. Fields
without those attributes come back as stored.

Where the attributes come from, as xarray reads them: a Zarr v3 array's ``attributes``
(xarray writes a float ``_FillValue`` there as the base64 of a little-endian double), a v2
array's ``.zattrs`` and, for arrays xarray wrote (``_ARRAY_DIMENSIONS``), the ``.zarray``
``fill_value`` as ``_FillValue``; an HDF5 dataset's attributes.

The decoded dtype is float32 (what a model trains on), float64 only where float32 would lose
stored precision (float64 data, 4- and 8-byte integers). xarray gives float64 whenever the
attributes are doubles, as JSON numbers always are: the values agree to float32 precision.
An attribute that is not a finite number (a fill value may be NaN), or ``_Unsigned`` (not
supported), is a :class:`~chunkio.errors.FormatError` naming the array, the attribute and the
value, when the dataset is made. Time decoding (``units`` of ``time``) is not done.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader
from ..errors import FormatError
from .layout import DatasetLayout, FieldInfo

__all__ = [
    "CF_ATTRIBUTES",
    "CFCoding",
    "CFFieldCoding",
    "cf_coding",
    "decode_layout",
    "decoded_dtype",
]

#: the attributes that make a variable CF-encoded
CF_ATTRIBUTES = ("scale_factor", "add_offset", "_FillValue", "missing_value")
#: the most values a ``missing_value`` list may hold (each is a pass over every batch)
MAX_FILLS = 64


@dataclass(frozen=True)
class CFCoding:
    """How one stored array unpacks: ``stored * scale + offset``, values in ``fills`` NaN."""

    scale: float | None
    offset: float | None
    #: stored values that mean "missing" (``_FillValue`` and ``missing_value``; NaN ones left
    #: out: a stored NaN decodes to NaN anyway)
    fills: tuple[float, ...]
    #: the decoded dtype
    dtype: np.dtype[Any]

    def decode(self, raw: npt.NDArray[Any], out: npt.NDArray[Any]) -> None:
        """``raw`` (stored values) decoded into ``out`` (same shape, :attr:`dtype`).

        >>> c = CFCoding(0.5, 10.0, (-1.0,), np.dtype("float32"))
        >>> out = np.empty(3, "float32"); c.decode(np.array([0, 2, -1], "int16"), out)
        >>> out.tolist()
        [10.0, 11.0, nan]
        """
        np.copyto(out, raw, casting="unsafe")
        if self.scale is not None:
            np.multiply(out, out.dtype.type(self.scale), out=out)
        if self.offset is not None:
            np.add(out, out.dtype.type(self.offset), out=out)
        for fill in self.fills:
            np.putmask(out, raw == fill, np.nan)


def decoded_dtype(stored: np.dtype[Any]) -> np.dtype[Any]:
    """float32, or float64 where float32 would lose stored precision.

    >>> decoded_dtype(np.dtype("int16")), decoded_dtype(np.dtype("int32"))
    (dtype('float32'), dtype('float64'))
    """
    wide = stored.itemsize >= 8 if stored.kind == "f" else stored.itemsize >= 4
    return np.dtype("float64" if wide else "float32")


def _number(value: Any, key: str, array: str, where: str, *, nan: bool = False) -> list[float]:
    """An attribute's value as numbers (a scalar, a 1-element or, for ``missing_value``, a
    longer list); base64 doubles and ``"NaN"`` as xarray writes fill values to Zarr v3."""
    if isinstance(value, str) and nan:
        if value in ("NaN", "Infinity", "-Infinity"):
            return [float(value.replace("inity", ""))]
        try:
            blob = base64.b64decode(value, validate=True)
        except ValueError:
            blob = b""
        if len(blob) in (2, 4, 8):
            return [float(np.frombuffer(blob, f"<f{len(blob)}")[0])]
    values = np.asarray(value).reshape(-1) if not isinstance(value, str | bytes) else None
    ok = values is not None and 1 <= values.size <= MAX_FILLS and values.dtype.kind in "iuf"
    if ok and values is not None and (key == "missing_value" or values.size == 1):
        found = [float(v) for v in values]
        if nan or all(math.isfinite(v) for v in found):
            return found
    what = "a number or NaN" if nan else "a finite number"
    if key == "missing_value":  # each one is a pass over every batch
        what += f" (or a list of at most {MAX_FILLS})"
    raise FormatError(
        f"{where}: array {array!r}: CF attribute {key!r} must be {what} to decode "
        f"(Decoding(cf=True)); got {reprlib.repr(value)}"
    )


def cf_coding(
    attrs: Mapping[str, Any], stored: np.dtype[Any], array: str, where: str
) -> CFCoding | None:
    """The coding the attributes ``attrs`` of ``array`` (stored as ``stored``) declare;
    ``None`` when they declare none.

    >>> cf_coding({"scale_factor": 0.01, "_FillValue": -32768}, np.dtype("i2"), "t2m", "x")
    CFCoding(scale=0.01, offset=None, fills=(-32768.0,), dtype=dtype('float32'))
    """
    if not any(k in attrs for k in CF_ATTRIBUTES):
        return None
    if "_Unsigned" in attrs or stored.kind not in "iuf":
        raise FormatError(
            f"{where}: array {array!r} ({stored}) has CF attributes that Decoding(cf=True) does "
            f"not decode (numeric arrays, no _Unsigned); got {dict(attrs)!r}"
        )
    scale, offset = (
        _number(attrs[k], k, array, where)[0] if k in attrs else None
        for k in ("scale_factor", "add_offset")
    )
    fills = [
        v
        for k in ("_FillValue", "missing_value")
        if k in attrs
        for v in _number(attrs[k], k, array, where, nan=True)
    ]
    kept = tuple(dict.fromkeys(v for v in fills if not math.isnan(v)))
    if scale is None and offset is None and not kept and decoded_dtype(stored) == stored:
        return None  # e.g. the NaN _FillValue xarray gives every float array: nothing to do
    return CFCoding(scale, offset, kept, decoded_dtype(stored))


def _array_attrs(reader: Reader, array: str) -> Mapping[str, Any]:
    """The array's own attributes (readers without them, e.g. memory stores: none)."""
    found = getattr(reader, "array_attrs", None)
    return found(array) if callable(found) else {}


@dataclass(frozen=True)
class CFFieldCoding:
    """How a CF-decoded field is decoded (:attr:`FieldInfo.cf`): its ``stored`` dtype and one
    coding per array it reads (``None``: that array is only cast)."""

    stored: np.dtype[Any]
    codings: tuple[CFCoding | None, ...]

    def decode(self, raw: npt.NDArray[Any], out: npt.NDArray[Any], axis: int) -> None:
        """A batch ``raw`` as stored, decoded into ``out``; ``axis``: the batch's variable
        axis when the field stacks several arrays."""
        one = len(self.codings) == 1
        for j, coding in enumerate(self.codings):
            r = raw if one else np.moveaxis(raw, axis, 0)[j]  # views: decoded in place
            o = out if one else np.moveaxis(out, axis, 0)[j]
            if coding is None:
                np.copyto(o, r, casting="unsafe")
            else:
                coding.decode(r, o)


def decode_layout(reader: Reader, layout: DatasetLayout) -> DatasetLayout:
    """``layout`` with each dense or window field whose arrays are CF-encoded given its
    codings (:attr:`FieldInfo.cf`, a :class:`CFFieldCoding`) and its decoded dtype."""
    where = reader.location
    fields: list[FieldInfo] = []
    for info in layout.fields:
        if info.kind_def.plain_arrays:
            codings = tuple(
                cf_coding(_array_attrs(reader, a), info.dtype, a, where) for a in info.array_names()
            )
            if any(c is not None for c in codings):
                decoded = decoded_dtype(info.dtype)
                info = dataclasses.replace(
                    info, dtype=decoded, cf=CFFieldCoding(info.dtype, codings)
                )
        fields.append(info)
    return dataclasses.replace(layout, fields=tuple(fields))
