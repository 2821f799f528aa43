"""The integer arithmetic of chunk grids, named once: index arrays and ceiling division."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["IntArray", "ceil_div", "ceil_div_array"]

#: sample indices, chunk numbers, offsets: always int64
IntArray = npt.NDArray[np.int64]


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, for non-negative ``a`` and positive ``b``: chunks that cover ``a``
    rows of ``b`` rows each.

    >>> ceil_div(10, 4), ceil_div(8, 4), ceil_div(0, 4)
    (3, 2, 0)
    """
    return -(-a // b)


def ceil_div_array(a: npt.ArrayLike, b: npt.ArrayLike) -> IntArray:
    """:func:`ceil_div` elementwise, for integer arrays (broadcast like ``a // b``).

    >>> ceil_div_array([10, 8, 0], 4).tolist(), ceil_div_array((5, 9), (2, 3)).tolist()
    ([3, 2, 0], [3, 3])
    """
    out: IntArray = (-(-np.asarray(a) // np.asarray(b))).astype(np.int64, copy=False)
    return out
