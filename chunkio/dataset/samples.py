"""Which rows a dataset's samples are, and what reading them takes in memory.

A :class:`SampleIndex` belongs to one :class:`chunkio.ChunkDataset` (it pickles with it): the
samples' count and chunks, their rows (with windows, sample ``i`` is anchor row
``anchors[i]``: the read core asks for rows, the window fields add their steps), and the
decoded bytes of the chunks that reading them keeps in a reader's caches, which a loader's
memory budget is made of (:meth:`chunkio.ChunkDataset.for_loader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..format.grid import SampleGrid
from ..format.layout import DatasetLayout
from ..format.windows import WindowSet
from ..read.planning import normalize_indices
from ..read.windows import window_path
from ..util.numeric import IntArray
from ..util.shared_stack import HeldSegments

__all__ = ["ReadBudget", "SampleIndex"]


@dataclass(frozen=True)
class ReadBudget:
    """What each of a loader's readers keeps (:meth:`SampleIndex.budget`)."""

    #: bytes of decoded chunks each reader caches
    cache_bytes: int
    #: arrays at most this large are read whole, once (windows held: every array), else 0
    preload_bytes: int
    #: the shared-memory segments the workers hold windows' stacked arrays in, or ``None``
    segments: HeldSegments | None

    def held(self) -> dict[tuple[str, ...], str]:
        """The segments' names by their arrays, as the read core takes them."""
        return {} if self.segments is None else dict(self.segments.names)


class SampleIndex:
    """The samples of dataset ``location``: the rows of ``layout``'s sample axis, or with
    ``windows`` its valid anchors; ``fields`` are the fields a batch reads; ``file_chunks``:
    the chunks of each of many files read as one dataset."""

    def __init__(
        self,
        location: Any,
        layout: DatasetLayout,
        fields: Sequence[str],
        windows: WindowSet | None = None,
        file_chunks: IntArray | None = None,
    ) -> None:
        self.location = location
        self.layout = layout
        self.fields = tuple(fields)
        #: the valid anchors and their order chunks (``None``: no windows)
        self.windows = windows
        #: many files read as one dataset: each file's chunks, in order (the order keeps a
        #: file's chunks together: :mod:`chunkio.sampling.file_order`); else ``None``
        self.file_chunks = file_chunks

    def __len__(self) -> int:
        """Samples: the valid anchors with windows, else the rows of the sample axis."""
        return self.layout.num_samples if self.windows is None else len(self.windows.anchors)

    def chunk_sizes(self) -> IntArray:
        """Samples in each chunk along the sample axis, in storage order (windows: anchors
        per run of row chunks, :func:`chunkio.format.windows.anchor_groups`)."""
        if self.windows is not None:
            return self.windows.group_sizes
        if self.layout.order_sizes is not None:  # rows of a sparse matrix per data chunk
            return np.asarray(self.layout.order_sizes, dtype=np.int64)
        return SampleGrid(self.layout.num_samples, self.layout.samples_per_chunk).chunk_sizes()

    @property
    def anchors(self) -> npt.NDArray[np.int64] | None:
        """Windows: the row of each sample's anchor (sorted); ``None`` without windows."""
        return None if self.windows is None else self.windows.anchors

    @property
    def edge_chunks(self) -> int:
        """Row chunks beyond an order chunk that its windows reach (0 without windows)."""
        return 0 if self.windows is None else self.windows.edge_chunks

    def rows(self, indices: Any) -> Any:
        """Windows: sample indices -> anchor rows (other datasets: the indices as given)."""
        if self.windows is None:
            return indices
        try:
            idx = normalize_indices(indices, len(self.windows.anchors))
        except IndexError as err:  # name the dataset, as every other read error does
            raise IndexError(f"{self.location}: {err}") from err
        return self.windows.anchors[idx]

    def chunk_nbytes(self) -> int:
        """Decoded bytes of one full chunk of the selected fields; with windows, one row chunk
        of every array they read with the chunks beyond an order chunk that its windows reach
        (what a loader's cache must hold)."""
        windows = self.windows
        found = 0 if windows is None else self.cache_chunk_nbytes() * (1 + windows.edge_chunks)
        return found or self._dense_chunk_nbytes()

    def _dense_chunk_nbytes(self) -> int:
        sample = sum(self.layout.field(f).sample_nbytes for f in self.fields)
        return sample * self.layout.samples_per_chunk

    def held_nbytes(self) -> int:
        """Decoded bytes of every chunk a batch may read, counted as a reader's caches hold
        them (a loader keeps them all across epochs when they fit ``Workers(hold_bytes)``):
        as many cache slots as the finest-chunked array the fields read has chunks."""
        layout = self.layout
        rows = [
            r
            for f in layout.fields
            if f.name in self.fields
            for r in (getattr(f, "rows", ()) or (layout.rows_per_chunk(f),))
        ]
        chunks = -(-layout.num_samples // max(1, min(rows, default=layout.samples_per_chunk)))
        return self.cache_chunk_nbytes() * (chunks + 1)

    def cache_chunk_nbytes(self) -> int:
        """Bytes a field's cache holds per chunk: windows' arrays each count their own row
        chunks (one row chunk of every array), other fields the dataset's chunks."""
        if self.windows is None:
            return self._dense_chunk_nbytes()
        return self.windows.row_nbytes * self.layout.samples_per_chunk

    def budget(self, order_bytes: int, *, workers: int, hold_bytes: int) -> ReadBudget:
        """What each reader of a loader with ``workers`` worker processes keeps, for an order
        that asks it to hold ``order_bytes`` of chunks (its mixing pool's) and readers that may
        keep ``hold_bytes`` in all across epochs: every chunk (:meth:`held_nbytes`) when they
        all fit, so that later epochs decode nothing, else what the order asks. Windows are
        held once for all the workers in shared memory, or streamed
        (:func:`chunkio.read.windows.window_path` picks and logs it)."""
        held = self.held_nbytes()
        hold = held * max(1, workers) <= hold_bytes
        segments, needed, preload = None, order_bytes, 0
        if self.windows is not None:
            # windows held: each reader reads its arrays whole at once (one sequential pass,
            # then gathers only) rather than keeping chunks as their lanes reach them (3-4
            # epochs); past the budget, the first chunks that fit it beside the caches
            hold, segments, needed, preload = window_path(
                self.layout,
                self.fields,
                held=held,
                edge=self.windows.edge_chunks,
                hold_bytes=hold_bytes,
                workers=workers,
                cache_bytes=order_bytes,
            )
        return ReadBudget(max(needed, held) if hold else needed, preload, segments)
