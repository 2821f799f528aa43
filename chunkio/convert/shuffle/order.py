"""Write-time shuffle: the order in which a conversion stores its source's samples.

Converted data is shuffled by default so that every stored chunk is a random subset of the
dataset: chunk-aware loaders read a few whole chunks per batch, and chunks written in source
order (one class folder after another) would give batches of one or two classes.

The order is exactly::

    perm = np.random.default_rng(seed).permutation(N)

for ``N <= WHOLE_ORDER_MAX`` (4,194,304) samples, and stored row ``i`` holds source sample
``perm[i]``. numpy's permutation exists only whole (8 bytes a sample, its inverse as much
again), so above that size the order is :class:`~chunkio.convert.shuffle.keyed.KeyedPermutation`
``(N, seed)`` instead: a seeded bijection that every process evaluates one block at a time,
so a conversion's memory does not grow with its rows (:class:`StoredOrder` picks and serves
either); ``extra["order"]`` then also says ``"method": "keyed"``. The shuffled dataset gets one more
field, ``source_index`` (``(N,)`` int64, equal to ``perm``), so every stored row maps back to
its source position, and the attribute ``extra["order"] = {"shuffled": true, "seed": seed}``.
With ``shuffle=False`` rows are stored in source order, no ``source_index`` field is added
(stored row ``i`` *is* source sample ``i``) and ``extra["order"]`` is
``{"shuffled": false, "seed": null}``. Datasets without ``extra["order"]`` were written in
source order.

:class:`ShuffledSource` wraps any source that can read rows in arbitrary order
(``read_rows``); it is the one implementation behind ``write_arrays``, ``convert_images`` and
``append_arrays``. Its fingerprint includes the order, so an interrupted conversion resumes
only with the same ``shuffle`` and ``seed`` (otherwise it starts afresh).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ...errors import SourceError
from ...format.layout import FieldInfo
from ...util.messages import listing
from ...util.numeric import IntArray
from .keyed import KeyedPermutation

__all__ = [
    "ORDER_KEY",
    "SOURCE_INDEX",
    "WHOLE_ORDER_MAX",
    "RowSource",
    "ShuffledSource",
    "StoredOrder",
    "check_order_options",
    "gather_rows",
    "order_extra",
    "permutation",
    "shuffled",
]

#: the field holding each stored row's position in the source
SOURCE_INDEX = "source_index"
#: the key of ``extra`` recording the order
ORDER_KEY = "order"
#: The most samples shuffled in numpy's order, which every process using it holds whole with
#: its inverse (16 bytes a sample: 64 MiB here, two blocks' worth); above, the keyed order.
WHOLE_ORDER_MAX = 1 << 22


@runtime_checkable
class RowSource(Protocol):
    """A :class:`~chunkio.convert.BlockSource` that can also read rows in any order."""

    @property
    def num_samples(self) -> int: ...

    @property
    def fields(self) -> tuple[FieldInfo, ...]: ...

    def fingerprint(self) -> str: ...

    def read_block(self, start: int, stop: int) -> dict[str, Any]: ...

    def read_rows(self, indices: IntArray) -> dict[str, Any]:
        """Samples ``indices`` (unique, any order), in that order, as ``read_block`` does."""
        ...


def check_order_options(shuffle: object, seed: object) -> None:
    """Refuse anything but a bool ``shuffle`` and an int ``seed >= 0``.

    >>> check_order_options(True, 3)
    >>> check_order_options(True, -1)
    Traceback (most recent call last):
    ...
    ValueError: seed must be an int >= 0; got -1
    """
    if not isinstance(shuffle, (bool, np.bool_)):
        raise TypeError(f"shuffle must be True or False; got {shuffle!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int >= 0; got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be an int >= 0; got {seed!r}")


def permutation(num_samples: int, seed: int) -> IntArray:
    """The stored order, whole: ``np.random.default_rng(seed).permutation(num_samples)`` up
    to :data:`WHOLE_ORDER_MAX` samples, the keyed order above (:class:`StoredOrder`).

    >>> permutation(5, 0).tolist()
    [2, 4, 3, 0, 1]
    """
    return StoredOrder(num_samples, seed).rows(0, num_samples)


class StoredOrder:
    """The stored order of ``num_samples`` samples, served a slice at a time.

    ``seed=None`` is the source's own order. ``rows(a, b)`` is ``perm[a:b]``: the source
    samples of stored rows ``a..b-1``; ``positions(a, b)`` is ``inv[a:b]``: the stored rows of
    source samples ``a..b-1``. Up to :data:`WHOLE_ORDER_MAX` samples the order is numpy's,
    computed whole on first use and kept (with its inverse, once asked for); above, the
    :class:`~chunkio.convert.shuffle.keyed.KeyedPermutation`, which holds nothing: memory
    ``O(b - a)`` per call. It pickles as ``(num_samples, seed)``.

    >>> order = StoredOrder(5, 0)
    >>> order.rows(1, 3).tolist(), order.positions(0, 5).tolist()
    ([4, 3], [3, 4, 0, 2, 1])
    """

    def __init__(self, num_samples: int, seed: int | None, *, method: str | None = None) -> None:
        self.num_samples, self.seed = int(num_samples), seed
        if method is None:  # decided here, once: workers get it pickled, not recomputed
            big = self.num_samples > WHOLE_ORDER_MAX
            method = "source" if seed is None else "keyed" if big else "numpy"
        if method not in ("source", "numpy", "keyed") or (method == "source") != (seed is None):
            raise ValueError(
                f"order method must be 'source' (seed None) or 'numpy' or 'keyed' (a seed); "
                f"got {method!r} with seed {seed!r}"
            )
        #: ``"source"`` (no shuffle), ``"numpy"`` or ``"keyed"``
        self.method = method
        self._perm: IntArray | None = None
        self._inv: IntArray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_perm": None, "_inv": None}

    def _keyed(self) -> KeyedPermutation:
        return KeyedPermutation(self.num_samples, int(self.seed or 0))

    def _whole(self) -> IntArray:
        if self._perm is None:
            rng = np.random.default_rng(self.seed)
            self._perm = rng.permutation(self.num_samples).astype(np.int64, copy=False)
        return self._perm

    def rows(self, start: int, stop: int) -> IntArray:
        """``perm[start:stop]``, a new array."""
        start, stop = max(0, start), min(stop, self.num_samples)
        method = self.method
        if method == "source" or stop <= start:
            return np.arange(start, max(start, stop), dtype=np.int64)
        if method == "keyed":
            return self._keyed().take(np.arange(start, stop, dtype=np.int64))
        return self._whole()[start:stop].copy()

    def positions(self, start: int, stop: int) -> IntArray:
        """``inv[start:stop]``: where source samples ``start..stop-1`` are stored."""
        start, stop = max(0, start), min(stop, self.num_samples)
        method = self.method
        if method == "source" or stop <= start:
            return np.arange(start, max(start, stop), dtype=np.int64)
        if method == "keyed":
            return self._keyed().inverse(np.arange(start, stop, dtype=np.int64))
        if self._inv is None:
            inv = np.empty(self.num_samples, dtype=np.int64)
            inv[self._whole()] = np.arange(self.num_samples, dtype=np.int64)
            self._inv = inv
        return self._inv[start:stop].copy()


def order_extra(
    extra: Mapping[str, Any] | None, *, shuffle: bool, seed: int, num_samples: int = 0
) -> dict[str, Any]:
    """``extra`` with ``extra["order"]`` recording the order (a key the caller may not set);
    ``"method": "keyed"`` added where ``num_samples`` takes the keyed order."""
    out = dict(extra or {})
    if ORDER_KEY in out:
        raise ValueError(
            f"extra[{ORDER_KEY!r}] is reserved: chunkio records the sample order there; "
            f"got extra[{ORDER_KEY!r}] = {out[ORDER_KEY]!r}"
        )
    out[ORDER_KEY] = {"shuffled": bool(shuffle), "seed": int(seed) if shuffle else None}
    if shuffle and StoredOrder(num_samples, int(seed)).method == "keyed":
        out[ORDER_KEY]["method"] = "keyed"
    return out


def gather_rows(read_sorted: Callable[[IntArray], Any], indices: npt.ArrayLike) -> npt.NDArray[Any]:
    """Rows ``indices`` (any order) via ``read_sorted(unique increasing indices)``.

    For stores that only read increasing indices efficiently (h5py, zarr, dask).

    >>> gather_rows(lambda i: np.arange(10)[i] * 10, np.array([7, 2, 5]))
    array([70, 20, 50])
    """
    idx = np.asarray(indices, dtype=np.int64)
    unique, inverse = np.unique(idx, return_inverse=True)
    rows = np.asarray(read_sorted(unique))
    return rows[inverse.reshape(-1)]


class ShuffledSource:
    """``source``'s samples in the order :func:`permutation` gives, plus ``source_index``.

    Parameters
    ----------
    source
        A :class:`RowSource` (``ArraySource`` and ``ImageSource`` are).
    seed
        The permutation's seed; ``None`` keeps the source's order and only adds
        ``source_index`` (``append_arrays(..., shuffle=False)`` into a dataset that has it).
    offset
        Added to ``source_index``: the number of samples already stored before these
        (``append_arrays``), so ``source_index`` counts positions in everything ever written.

    ``read_block(start, stop)`` returns source samples ``perm[start:stop]`` in that order and
    ``source_index = offset + perm[start:stop]``; ragged shapes are permuted alike. It pickles
    as its arguments: the order (:class:`StoredOrder`) is recomputed, not shipped, in each
    worker.
    """

    def __init__(self, source: RowSource, seed: int | None, *, offset: int = 0) -> None:
        if not callable(getattr(source, "read_rows", None)):
            raise TypeError(
                "a shuffled conversion needs a source with read_rows(indices); got "
                f"{type(source).__name__}"
            )
        if seed is not None:
            check_order_options(True, seed)
        names = [f.name for f in source.fields]
        if SOURCE_INDEX in names:
            raise SourceError(
                f"field {SOURCE_INDEX!r} is reserved: chunkio adds it to record where each "
                f"stored row came from; got a field of that name among {listing(names)} "
                "(rename it, or pass shuffle=False)"
            )
        self.source = source
        self.seed = None if seed is None else int(seed)
        self.offset = int(offset)
        self.num_samples = int(source.num_samples)
        self.fields: tuple[FieldInfo, ...] = (
            *source.fields,
            FieldInfo(SOURCE_INDEX, np.dtype(np.int64), ()),
        )
        self.order = StoredOrder(self.num_samples, self.seed)

    @property
    def perm(self) -> IntArray:
        """Source position of each stored row (before ``offset``), whole: 8 bytes a sample
        (blocks take theirs from :attr:`order`)."""
        return self.order.rows(0, self.num_samples)

    def fingerprint(self) -> str:
        order = "source-order" if self.seed is None else f"shuffled:seed={self.seed}"
        if self.order.method == "keyed":  # never resume a run begun in numpy's order
            order += ":keyed"
        text = f"{self.source.fingerprint()}|{order}|offset={self.offset}"
        return hashlib.sha256(text.encode()).hexdigest()

    def read_block(self, start: int, stop: int) -> dict[str, Any]:
        idx = self.order.rows(start, stop)
        out = dict(self.source.read_rows(idx))
        out[SOURCE_INDEX] = idx + self.offset
        return out

    def ragged_shapes(self, name: str) -> npt.NDArray[np.int64]:
        """The source's per-sample shapes of ragged field ``name``, in stored order."""
        shapes = getattr(self.source, "ragged_shapes", None)
        if not callable(shapes):
            raise SourceError(
                f"field {name!r} is ragged: the source must provide "
                "ragged_shapes(name) -> (N, ndim) ints"
            )
        return np.asarray(shapes(name), dtype=np.int64)[self.perm]


def shuffled(source: RowSource, *, shuffle: bool, seed: int) -> Any:
    """``source`` itself (``shuffle=False``) or a :class:`ShuffledSource` over it."""
    check_order_options(shuffle, seed)
    return ShuffledSource(source, seed) if shuffle else source
