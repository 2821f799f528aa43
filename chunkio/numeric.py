"""The integer arithmetic of chunk grids, named once: index arrays and ceiling division."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["IntArray", "ceil_div"]

#: sample indices, chunk numbers, offsets: always int64
IntArray = npt.NDArray[np.int64]


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, for non-negative ``a`` and positive ``b``: chunks that cover ``a``
    rows of ``b`` rows each.

    >>> ceil_div(10, 4), ceil_div(8, 4), ceil_div(0, 4)
    (3, 2, 0)
    """
    return -(-a // b)
