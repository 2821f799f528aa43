"""Windows in time: fields made of several steps along the sample axis, and their anchors.

A weather or climate sample is a window, not a row: steps ``t-1, t`` of some variables as input
and ``t+1`` as target, around an *anchor* ``t``. :class:`Field` names the arrays and the steps;
:class:`Anchors` restricts which anchors are sampled (a time split, a valid-mask, excluded
ranges). :func:`chunkio.format.store_layout.open_windows` turns both into a :class:`WindowSet`
when a dataset is opened: one ``"window"`` field per :class:`Field` (read by
:mod:`chunkio.read.windows`) and the sorted array of valid anchors, which are the dataset's
samples.

The rules, checked before any worker starts (a :class:`~chunkio.errors.WindowError` names the
field, the arrays and the values otherwise):

- Axis 0 of every array is the step axis; all arrays of the dataset have one length ``N``.
- Variables stacked into one field share their shape and dtype.
- An anchor ``a`` is valid when ``a`` and every ``a + step`` of every field lie in
  ``[0, N)``, and no row of its span ``[a + min(0, lowest step), a + max(0, highest step)]``
  is missing (``valid`` False, or inside an ``exclude`` range): a window never crosses a gap,
  so a forecast of steps ``[1, 4]`` never runs through a missing step either.
- ``select`` (``anchors=range(0, 2000)``, or an index array) keeps only those anchors; every
  one must lie in ``[0, N)``. Steps that leave no valid anchor are an error.

Everything here is pure NumPy: the window spec and its rules. Opening it on a store (the
arrays' descriptions, a valid-mask array named by path) is
:func:`chunkio.format.store_layout.open_windows`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import WindowError
from ..util.messages import listing, short_repr
from ..util.numeric import IntArray, ceil_div
from .layout import DatasetLayout, FieldInfo
from .names import validate_field_name

__all__ = [
    "EDGE_SHARE",
    "Anchors",
    "Field",
    "WindowInfo",
    "WindowSet",
    "anchor_groups",
    "is_windowed",
    "valid_anchors",
    "window_fields",
]

#: the order groups anchors in runs of row chunks long enough that the chunks a run's windows
#: reach beyond it (decoded again for the neighbouring run) add at most this share of reads
EDGE_SHARE = 0.08


@dataclass(frozen=True, init=False)
class Field:
    """A field read as a window of steps around each anchor.

    Parameters
    ----------
    paths
        An array (a field of a chunkio dataset, or an array path of a store chunkio did not
        write), or a list of them stacked as a variable axis.
    steps
        Offsets along axis 0 from the anchor, e.g. ``range(-2, 1)`` (``t-2, t-1, t``) or
        ``[1, 4]`` (lead targets); ``None``: the anchor's row only, with no step axis.
    name
        The field's name in samples (default: the arrays' last path parts joined by ``_``).

    A sample is ``(steps, variables, *shape)``; the step axis is left out when ``steps`` is
    ``None``, the variable axis when ``paths`` is one string:

    >>> Field("t2m", steps=range(-2, 1))
    Field('t2m', steps=(-2, -1, 0))
    >>> Field(["t2m", "u10"], steps=[1]).name
    't2m_u10'
    """

    paths: tuple[str, ...]
    steps: tuple[int, ...] | None
    stacked: bool
    name: str

    def __init__(
        self, paths: str | Sequence[str], steps: Iterable[int] | None = None, *, name: str = ""
    ) -> None:
        if isinstance(paths, str):
            found: tuple[str, ...] = (paths,)
        elif isinstance(paths, Sequence):
            found = tuple(paths)
        else:
            raise WindowError(f"Field: paths must be a string or a list of them; got {paths!r}")
        if not found or not all(isinstance(p, str) and p.strip("/") for p in found):
            raise WindowError(f"Field: paths must be non-empty array paths; got {paths!r}")
        object.__setattr__(self, "paths", tuple(p.strip("/") for p in found))
        object.__setattr__(self, "stacked", not isinstance(paths, str))
        object.__setattr__(self, "steps", None if steps is None else _steps(found, steps))
        default = "_".join(re.sub(r"[^A-Za-z0-9_-]", "_", p.rsplit("/", 1)[-1]) for p in found)
        chosen = name or (default if re.match(r"[A-Za-z_]", default) else f"f_{default}")
        object.__setattr__(self, "name", validate_field_name(chosen[:128]))

    @property
    def offsets(self) -> tuple[int, ...]:
        """The steps read (``(0,)`` for a field without a step axis)."""
        return (0,) if self.steps is None else self.steps

    def __repr__(self) -> str:
        paths = repr(self.paths[0]) if not self.stacked else repr(list(self.paths))
        steps = "" if self.steps is None else f", steps={self.steps}"
        return f"Field({paths}{steps})"


def _steps(paths: Sequence[str], steps: Iterable[int]) -> tuple[int, ...]:
    try:
        found = tuple(steps)
    except TypeError:
        found = ()
    ok = all(isinstance(s, int | np.integer) and not isinstance(s, bool) for s in found)
    if not found or not ok or len(set(found)) != len(found):
        raise WindowError(
            f"Field {listing(paths)}: steps must be distinct ints (e.g. range(-1, 1) or [1, 4]); "
            f"got {short_repr(steps)}"
        )
    return tuple(int(s) for s in found)


@dataclass(frozen=True, eq=False)
class Anchors:
    """Which anchors a windowed dataset samples.

    ``select``: a range or an index array of rows (a contiguous time split is
    ``range(0, 2000)``); ``valid``: a boolean array of every row (``True`` where the step is
    present), or the path of one in the store; ``exclude``: ``(start, stop)`` row ranges that
    are missing. Anchors whose span crosses a missing row are skipped.
    """

    select: range | Sequence[int] | npt.NDArray[Any] | None = None
    valid: str | Sequence[bool] | npt.NDArray[Any] | None = None
    exclude: Sequence[tuple[int, int]] = field(default_factory=tuple)

    @classmethod
    def of(cls, given: Any) -> Anchors:
        """``anchors=`` as a dataset takes it: ``None``, an :class:`Anchors`, or a selection."""
        if given is None:
            return cls()
        return given if isinstance(given, Anchors) else cls(select=given)


@dataclass(frozen=True)
class WindowInfo(FieldInfo):
    """A ``"window"`` field: ``arrays`` read at ``steps`` from each anchor, each array's
    ``rows`` per chunk; ``stepped``/``stacked``: whether samples have a step / variable axis."""

    arrays: tuple[str, ...] = ()
    steps: tuple[int, ...] = (0,)
    rows: tuple[int, ...] = ()
    stepped: bool = False
    stacked: bool = False

    def array_names(self) -> tuple[str, ...]:
        return self.arrays


@dataclass(frozen=True, eq=False)
class WindowSet:
    """What a windowed dataset reads: its layout (one window field per :class:`Field`, in the
    user's order), the valid anchors (sorted rows: sample ``i`` is anchor ``anchors[i]``) and
    the samples per chunk of the chunk-aware order (:func:`anchor_groups`)."""

    layout: DatasetLayout
    anchors: IntArray
    group_sizes: IntArray
    #: row chunks each order chunk's windows reach beyond it (decoded for two order chunks)
    edge_chunks: int
    #: decoded bytes of one row of every array the windows read
    row_nbytes: int

    @property
    def fields(self) -> tuple[str, ...]:
        return self.layout.field_names


def is_windowed(fields: Any, anchors: Any) -> bool:
    """Whether ``ChunkDataset(path, fields, anchors=...)`` reads windows: a :class:`Field` is
    given, or ``anchors``."""
    if anchors is not None or isinstance(fields, Field):
        return True
    values = fields.values() if isinstance(fields, Mapping) else fields
    if isinstance(values, str) or values is None:
        return False
    return any(isinstance(v, Field) for v in values)


def window_fields(fields: Any, where: str) -> tuple[Field, ...]:
    """``fields`` (a :class:`Field`, a string, a list of both, or a mapping name -> either)
    as Fields with distinct names; a mapping's keys name them, repeated default names get
    ``_2``, ``_3``...

    >>> [f.name for f in window_fields(["t2m", Field("t2m", steps=[1])], "x")]
    ['t2m', 't2m_2']
    """
    if fields is None:
        raise WindowError(f"{where}: windows need fields: name the arrays, e.g. [Field(...)]")
    if isinstance(fields, str | Field):
        items: list[tuple[str, Any]] = [("", fields)]
    elif isinstance(fields, Mapping):
        items = [(str(k), v) for k, v in fields.items()]
    else:
        items = [("", v) for v in fields]
    out: list[Field] = []
    for key, value in items:
        if isinstance(value, str):
            value = Field(value, name=key)
        elif not isinstance(value, Field):
            raise WindowError(f"{where}: a field is a path or a chunkio.Field; got {value!r}")
        elif key:
            value = Field(_given_paths(value), value.steps, name=key)
        taken = {f.name for f in out}
        name, n = value.name, 2
        while name in taken:
            name, n = f"{value.name}_{n}", n + 1
        out.append(
            value if name == value.name else Field(_given_paths(value), value.steps, name=name)
        )
    return tuple(out)


def _given_paths(f: Field) -> str | list[str]:
    return list(f.paths) if f.stacked else f.paths[0]


def valid_anchors(
    num_rows: int,
    fields: Sequence[Field],
    anchors: Anchors,
    valid: npt.NDArray[np.bool_] | None,
    where: str,
) -> IntArray:
    """The sorted valid anchors (see the module docstring); ``valid``: the mask, read.

    >>> valid_anchors(6, [Field("x", steps=[-1, 0]), Field("x", steps=[2])], Anchors(), None, "")
    array([1, 2, 3])
    >>> valid_anchors(6, [Field("x", steps=[-1, 0])], Anchors(exclude=[(2, 3)]), None, "")
    array([1, 4, 5])
    """
    lo = min(min(f.offsets) for f in fields)
    hi = max(max(f.offsets) for f in fields)
    missing = np.zeros(num_rows, dtype=bool)
    if valid is not None:
        if valid.shape != (num_rows,):
            raise WindowError(
                f"{where}: the valid-mask must hold one bool per step ({num_rows},); "
                f"got shape {valid.shape}"
            )
        missing |= ~valid.astype(bool)
    for pair in anchors.exclude:
        start, stop = _range_pair(pair, num_rows, where)
        missing[start:stop] = True
    first, last = max(0, -lo), num_rows - 1 - max(0, hi)
    rows = np.arange(first, max(first, last + 1), dtype=np.int64)
    if anchors.select is not None:
        rows = np.intersect1d(rows, _selected(anchors.select, num_rows, where))
    # a window's span, anchor included, must hold no missing row: count them by cumsum
    bad = np.concatenate([[0], np.cumsum(missing, dtype=np.int64)])
    span_start, span_stop = rows + min(0, lo), rows + max(0, hi) + 1
    kept: IntArray = rows[bad[span_stop] - bad[span_start] == 0]
    if not kept.size:
        described = listing(
            (
                f"{f.name} {listing(f.paths, limit=3)} steps {listing(f.offsets, limit=6)}"
                for f in fields
            ),
            limit=4,
            show=str,
            brackets=False,
        )
        span = max(0, hi) - min(0, lo) + 1  # the anchor's own step included
        if last < first:  # the steps reach further than the series is long
            needs = f"need {span} steps per window, more than the {num_rows} steps stored"
        else:
            needs = f"on {num_rows} steps need anchors in [{first}, {last}]"
        raise WindowError(
            f"{where}: no valid anchor: fields {described} {needs}"
            + (
                f", within the selected anchors {_short(anchors.select)}"
                if anchors.select is not None
                else ""
            )
            + (f", spans free of the {int(missing.sum())} missing steps" if missing.any() else "")
        )
    return kept


def _short(select: Any) -> str:
    if isinstance(select, range):
        return repr(select)
    arr = np.asarray(select).ravel()
    return f"{arr[:5].tolist()}{'...' if arr.size > 5 else ''} ({arr.size} rows)"


def _range_pair(pair: Any, num_rows: int, where: str) -> tuple[int, int]:
    try:
        start, stop = (int(v) for v in pair)
    except (TypeError, ValueError):
        raise WindowError(
            f"{where}: exclude takes (start, stop) row ranges; got {pair!r}"
        ) from None
    if not 0 <= start < stop <= num_rows:
        raise WindowError(
            f"{where}: excluded range {(start, stop)} must satisfy 0 <= start < stop <= {num_rows}"
        )
    return start, stop


def _selected(select: Any, num_rows: int, where: str) -> IntArray:
    arr = np.asarray(select)
    if arr.ndim != 1 or (
        arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer))
    ):
        raise WindowError(
            f"{where}: anchors= takes a range or a 1-D int array; got {_short(select)}"
        )
    arr = arr.astype(np.int64)
    outside = (arr < 0) | (arr >= num_rows)
    if outside.any():
        raise WindowError(
            f"{where}: anchors outside the {num_rows} steps [0, {num_rows}): "
            f"{arr[outside][:5].tolist()} ({int(outside.sum())} of {arr.size})"
        )
    return np.unique(arr)


def anchor_groups(anchors: IntArray, rows_per_chunk: int, lo: int, hi: int) -> tuple[IntArray, int]:
    """Anchors per order chunk, and the row chunks each one's windows reach beyond it.

    An order chunk is a run of ``k`` row chunks: its windows also read the ``edge`` chunks
    before and after it (decoded again for the neighbouring run, which the order reads at
    another time), so ``k`` is the least with ``edge / k <= EDGE_SHARE``.

    >>> anchor_groups(np.arange(1, 99), 1, -1, 1)[0].tolist()
    [24, 25, 25, 24]
    """
    edge = ceil_div(max(0, -lo), rows_per_chunk) + ceil_div(max(0, hi), rows_per_chunk)
    k = max(1, int(np.ceil(edge / EDGE_SHARE)))
    counts = np.bincount(anchors // (rows_per_chunk * k))
    return counts[counts > 0].astype(np.int64), edge
