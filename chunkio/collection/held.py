"""Rows of small files read whole, held in one buffer per field until a pass has taken them.

A file of one chunk (a small ``.h5ad``) costs as much to read whole as to read a few of its
rows, and the file-aware order (:mod:`chunkio.sampling.file_order`) takes a few of its rows in
each of the next batches. A reading process reads such a file whole on a pass's first read of
it and serves its rows from here until the pass has taken every one (:class:`HeldRows`). The
rows of every held file lie in one buffer per field, so a batch drawn from tens of files is
one gather per field at ``the file's first row here + the sample's row in its file``, not a
gather and a scatter per file (the per-file NumPy calls were most of a batch's cost).

The buffers are a ring: a file is written after the last one, the ring wrapping to its start
when the file does not fit before its end, over files already served (or left from an
earlier pass). A file that still has rows to serve in this pass is skipped over (a reader
may serve only part of a file, whose rest a neighbour reads: it stays all pass); only when no
room is left between such files does the ring double, up to a byte budget; at the budget the
oldest are overwritten, and read again if a batch asks for them. Pure NumPy, no I/O: the
caller reads the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray

__all__ = ["HeldRows"]


class HeldRows:
    """Whole files' rows of ``fields`` (dtypes ``dtypes``) for a dataset of ``num_files``
    files, in at most ``budget`` bytes.

    >>> held = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=3, budget=1024)
    >>> held.add(2, {"y": np.array([7, 8, 9])}, epoch=0)
    True
    >>> parts = np.array([2, 2]); held.holds(parts, 0).tolist()
    [True, True]
    >>> held.take("y", held.positions(parts, np.array([2, 0]))).tolist()
    [9, 7]
    >>> held.served(np.array([2]), np.array([3])); held.holds(parts, 0).tolist()
    [False, False]
    """

    def __init__(
        self,
        fields: Sequence[str],
        dtypes: Mapping[str, np.dtype[Any]],
        *,
        num_files: int,
        budget: int,
    ) -> None:
        self.fields = tuple(fields)
        self._dtypes = {name: np.dtype(dtypes[name]) for name in self.fields}
        self._budget = int(budget)
        #: per file: its first row in the buffers (-1: not held), the rows of it this pass
        #: has still to take, and the pass it was read for
        self._base = np.full(num_files, -1, np.int64)
        self._left = np.zeros(num_files, np.int64)
        self._epoch = np.zeros(num_files, np.int64)
        self._spans: dict[int, tuple[int, int]] = {}  # held file -> its rows in the ring
        self._buffers: dict[str, npt.NDArray[Any]] = {}
        self._max_rows = 0  # the budget in rows (known once a file's row size is)
        self._head = 0

    def __len__(self) -> int:
        """Files held now."""
        return len(self._spans)

    @property
    def capacity(self) -> int:
        """Rows the ring holds now."""
        return len(next(iter(self._buffers.values()))) if self._buffers else 0

    def holds(self, parts: IntArray, epoch: int) -> npt.NDArray[np.bool_]:
        """Whether each of files ``parts`` is held, read for pass ``epoch``."""
        found: npt.NDArray[np.bool_] = (self._base[parts] >= 0) & (self._epoch[parts] == epoch)
        return found

    def positions(self, parts: IntArray, rows: IntArray) -> IntArray:
        """Where row ``rows[i]`` of held file ``parts[i]`` lies in the buffers."""
        found: IntArray = self._base[parts] + rows
        return found

    def take(self, name: str, positions: IntArray) -> npt.NDArray[Any]:
        """Field ``name``'s values at ``positions`` (one gather)."""
        return self._buffers[name][positions]

    def add(self, part: int, values: Mapping[str, npt.NDArray[Any]], epoch: int) -> bool:
        """Hold file ``part``'s rows ``values`` (every field, as many rows each) for pass
        ``epoch``; False (nothing held) if they do not fit the budget or the buffers."""
        n = len(values[self.fields[0]])
        shapes = {name: values[name].shape[1:] for name in self.fields}
        if not self._buffers:
            row = sum(
                int(np.prod(s, dtype=np.int64)) * self._dtypes[k].itemsize
                for k, s in shapes.items()
            )
            self._max_rows = self._budget // max(1, row)
            self._buffers = {k: np.empty((0, *s), self._dtypes[k]) for k, s in shapes.items()}
        fits = all(shapes[k] == b.shape[1:] for k, b in self._buffers.items())
        if not n or n > self._max_rows or not fits:
            return False
        start = self._room(n, epoch)
        for name in self.fields:
            self._buffers[name][start : start + n] = values[name]
        self._base[part], self._left[part], self._epoch[part] = start, n, epoch
        self._spans[part] = (start, start + n)
        return True

    def served(self, parts: IntArray, counts: IntArray) -> None:
        """Files ``parts`` served ``counts`` more rows: those that served every row are
        dropped (a loader's pass asks for none of them again)."""
        self._left[parts] -= counts
        for part in parts[self._left[parts] <= 0].tolist():
            self.drop(part)

    def drop(self, part: int) -> None:
        """Hold file ``part`` no longer."""
        if self._spans.pop(part, None) is not None:
            self._base[part] = -1

    def _room(self, n: int, epoch: int) -> int:
        """The first of ``n`` ring rows for a new file (the files there dropped): from the
        head on, past files this pass still reads, growing the ring only when no such room
        is left in it (at the budget, over the oldest)."""
        while True:
            start = self._free_from(self._head, n, epoch)
            if start is not None:
                break
            if self.capacity >= self._max_rows:
                start = self._head if self._head + n <= self.capacity else 0
                break
            self._grow(n)
        for part in [p for p, (a, b) in self._spans.items() if a < start + n and b > start]:
            self.drop(part)
        self._head = start + n
        return start

    def _free_from(self, head: int, n: int, epoch: int) -> int | None:
        """The first ``n`` rows from ``head`` on (wrapping once) that hold no file this pass
        still reads, or None. A file of this pass stays live until served whole, and a
        reader may serve only part of one (the files at the edges of its lanes are shared
        with a neighbour, which reads the rest): such files would block a ring that only
        wraps, and grow it to its budget, so the room is looked for past them."""
        live = sorted((a, b) for p, (a, b) in self._spans.items() if self._epoch[p] == epoch)
        start, wrapped = head, False
        while True:
            if start + n > self.capacity:
                if wrapped or head == 0:
                    return None
                start, wrapped = 0, True
            if wrapped and start >= head:
                return None
            end = max((b for a, b in live if a < start + n and b > start), default=None)
            if end is None:
                return start
            start = end

    def _grow(self, n: int) -> None:
        """Double the ring (at least ``8 * n`` rows, at most the budget); the next file goes
        into the new rows."""
        self._head = self.capacity
        rows = min(self._max_rows, max(2 * self.capacity, 8 * n))
        for name, old in self._buffers.items():
            new = np.empty((rows, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            self._buffers[name] = new
