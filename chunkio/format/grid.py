"""The chunk grid along the sample axis."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..util.numeric import IntArray, ceil_div

__all__ = ["SampleGrid", "values_chunk_span"]


@dataclass(frozen=True)
class SampleGrid:
    """Regular chunking of ``num_samples`` samples into chunks of ``samples_per_chunk``.

    Chunk ``c`` holds samples ``[c * samples_per_chunk, min((c + 1) * samples_per_chunk, N))``;
    only the last chunk may be shorter.

    >>> g = SampleGrid(10, 4)
    >>> g.num_chunks, g.chunk_sizes().tolist(), g.bounds(2)
    (3, [4, 4, 2], (8, 10))
    """

    num_samples: int
    samples_per_chunk: int

    def __post_init__(self) -> None:
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise TypeError(f"num_samples must be an int; got {self.num_samples!r}")
        if self.num_samples < 0:
            raise ValueError(f"num_samples must be >= 0; got {self.num_samples}")
        spc = self.samples_per_chunk
        if isinstance(spc, bool) or not isinstance(spc, int) or spc < 1:
            raise ValueError(f"samples_per_chunk must be an int >= 1; got {spc!r}")

    @property
    def num_chunks(self) -> int:
        return ceil_div(self.num_samples, self.samples_per_chunk)

    def chunk_sizes(self) -> IntArray:
        sizes = np.full(self.num_chunks, self.samples_per_chunk, dtype=np.int64)
        if self.num_chunks:
            sizes[-1] = self.num_samples - (self.num_chunks - 1) * self.samples_per_chunk
        return sizes

    def bounds(self, chunk: int) -> tuple[int, int]:
        if not 0 <= chunk < self.num_chunks:
            raise IndexError(f"chunk {chunk} out of range for {self.num_chunks} chunks")
        start = chunk * self.samples_per_chunk
        return start, min(start + self.samples_per_chunk, self.num_samples)


def values_chunk_span(
    offsets: IntArray, grid: SampleGrid, chunk_len: int, first: int, stop: int
) -> tuple[int, int]:
    """Values chunks ``[a, b)`` that hold sample chunks ``[first, stop)``.

    >>> values_chunk_span(np.array([0, 3, 8, 10, 11]), SampleGrid(4, 2), 8, 0, 1)
    (0, 1)
    >>> values_chunk_span(np.array([0, 3, 8, 10, 11]), SampleGrid(4, 2), 8, 1, 2)
    (1, 2)
    """
    begin = int(offsets[grid.bounds(first)[0]])
    end = int(offsets[grid.bounds(stop - 1)[1]])
    return begin // chunk_len, ceil_div(end, chunk_len)
