"""Value policies for volumes: dtype choice, narrowing without wraparound, NaN/Inf handling.

*Narrowing* (storing in a dtype that cannot hold every value of the source dtype) never wraps:

``on_overflow="error"``
    values outside the target's range - or non-integer values going to an integer dtype -
    raise :class:`~chunkio.errors.SourceError` naming the file and the range found.
``"clip"``
    values are clipped to the target's range (and rounded to the nearest integer).
``"scale"``
    integer targets: each volume's finite range ``[min, max]`` is mapped linearly onto the
    target's whole range and rounded; float targets: a volume that overflows is divided by
    the factor that makes it fit. Either way ``original ~= stored * slope + inter`` and the
    ``(slope, inter)`` of every volume is recorded (NIfTI's ``scl_slope``/``scl_inter``).

NaN and +-Inf (float sources): ``nan_policy="error"`` raises, ``"zero"`` stores 0, ``"keep"``
keeps them (float targets only). Labels must hold integers: anything else - NaN, fractions,
values outside the label dtype - is an error, never clipped or scaled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...util.messages import keyword

__all__ = ["NanPolicy", "OnOverflow", "choose_dtype", "prepare_image", "prepare_label"]

OnOverflow = Literal["error", "clip", "scale"]
NanPolicy = Literal["error", "zero", "keep"]
Array = npt.NDArray[Any]


def choose_dtype(
    sources: Sequence[np.dtype[Any]], requested: npt.DTypeLike | None, *, label: bool
) -> np.dtype[Any]:
    """The stored dtype: ``requested``, else one that holds every source dtype.

    Float label files (common in NIfTI) are stored as int16.

    >>> choose_dtype([np.dtype("uint8"), np.dtype("int16")], None, label=False)
    dtype('int16')
    >>> choose_dtype([np.dtype("float32")], None, label=True)
    dtype('int16')
    """
    if requested is not None:
        dtype = np.dtype(requested)
    elif label:
        kinds = [np.dtype(np.uint8) if d.kind == "b" else d for d in sources]
        dtype = np.result_type(*(np.dtype(np.int16) if d.kind == "f" else d for d in kinds))
    else:
        dtype = np.result_type(*sources)
    if dtype.kind not in ("iu" if label else "biuf"):
        what = "labels" if label else "images"
        raise ValueError(f"{what} cannot be stored as {dtype}; choose an integer or float dtype")
    return dtype


def _limits(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype.kind == "b":
        return 0.0, 1.0
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    return float(info.min), float(info.max)


def _fix_nonfinite(data: Array, target: np.dtype[Any], policy: NanPolicy, where: str) -> Array:
    if data.dtype.kind != "f":
        return data
    bad = ~np.isfinite(data)
    if not bad.any():
        return data
    first = np.unravel_index(int(np.argmax(bad)), data.shape)
    if policy == "zero":
        return np.where(bad, data.dtype.type(0), data)
    if policy == "keep" and target.kind == "f":
        return data
    hint = f"{keyword('nan_policy', 'zero')} to store 0"
    if target.kind == "f":
        hint += f" or {keyword('nan_policy', 'keep')} to keep them"
    raise SourceError(
        f"{where}: {int(bad.sum())} NaN/Inf value(s), the first at voxel "
        f"{tuple(int(i) for i in first)}; expected finite values for {target} "
        f"({keyword('nan_policy', policy)}); pass {hint}"
    )


def prepare_image(
    data: Array,
    target: np.dtype[Any],
    *,
    on_overflow: OnOverflow,
    nan_policy: NanPolicy,
    where: str,
) -> tuple[Array, float, float]:
    """Apply the NaN and narrowing policies; return ``(stored, slope, inter)``."""
    data = _fix_nonfinite(data, target, nan_policy, where)
    if data.dtype == target or np.can_cast(data.dtype, target, "safe"):
        return data.astype(target, copy=False), 1.0, 0.0
    finite = data[np.isfinite(data)] if data.dtype.kind == "f" else data
    if finite.size == 0:
        return data.astype(target), 1.0, 0.0  # only NaN/Inf left, kept by policy
    lo, hi = float(finite.min()), float(finite.max())
    tmin, tmax = _limits(target)
    to_int = target.kind in "iub"
    if on_overflow == "scale":
        return _scale(data, target, lo, hi, tmin, tmax)
    fits = tmin <= lo and hi <= tmax
    whole = not to_int or data.dtype.kind != "f" or bool(np.all(finite == np.rint(finite)))
    if on_overflow == "error" and not (fits and whole):
        problem = (
            f"values {lo:g}..{hi:g} do not fit {target} [{tmin:g}, {tmax:g}]"
            if not fits
            else f"non-integer values cannot be stored as {target} exactly"
        )
        raise SourceError(
            f"{where}: {problem}; pass {keyword('on_overflow', 'clip')} or "
            f"{keyword('on_overflow', 'scale')} to convert anyway"
        )
    if on_overflow not in ("error", "clip"):
        raise ValueError(f"on_overflow must be 'error', 'clip' or 'scale'; got {on_overflow!r}")
    out = np.clip(data, tmin, tmax) if not fits else data
    if to_int and data.dtype.kind == "f":
        out = np.rint(out)
    return out.astype(target), 1.0, 0.0


def _scale(
    data: Array, target: np.dtype[Any], lo: float, hi: float, tmin: float, tmax: float
) -> tuple[Array, float, float]:
    if target.kind == "f":
        peak = max(abs(lo), abs(hi))
        if peak <= tmax:
            return data.astype(target), 1.0, 0.0
        slope = peak / tmax
        return (data / slope).astype(target), slope, 0.0
    slope = (hi - lo) / (tmax - tmin) if hi > lo else 1.0
    stored = np.rint((data.astype(np.float64) - lo) / slope + tmin)
    inter = lo - tmin * slope
    return np.clip(stored, tmin, tmax).astype(target), slope, inter


def prepare_label(data: Array, target: np.dtype[Any], *, where: str) -> Array:
    """Labels as ``target`` integers, or :class:`SourceError` - never rounded or wrapped."""
    if data.dtype.kind == "b":
        data = data.astype(np.uint8)
    if data.dtype.kind == "f":
        bad = ~np.isfinite(data) | (data != np.rint(data))
        if bad.any():
            first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), data.shape))
            raise SourceError(
                f"{where}: labels must be integers; got {data[first].item()!r} at voxel {first} "
                f"({int(bad.sum())} such voxel(s))"
            )
    elif data.dtype.kind not in "iu":
        raise SourceError(f"{where}: labels must be integers; got dtype {data.dtype}")
    if data.size and not np.can_cast(data.dtype, target, "safe"):
        lo, hi = data.min(), data.max()
        tmin, tmax = _limits(target)
        if lo < tmin or hi > tmax:
            raise SourceError(
                f"{where}: label values {lo}..{hi} do not fit {target} [{tmin:g}, {tmax:g}]; "
                "pass a wider label_dtype"
            )
    return data.astype(target, copy=False)
