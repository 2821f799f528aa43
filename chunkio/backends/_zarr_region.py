"""Direct decoding of sub-boxes of Zarr v3 arrays chunked along several axes, on local disk.

The N-D counterpart of :mod:`chunkio.backends._zarr_local` (whose :class:`ChunkFiles` it
uses): volume patches are read as boxes of chunks, and zarr-python's synchronous API
costs milliseconds per call in event-loop round trips, more than decoding a 32^3 chunk. For
the encodings chunkio writes (``bytes`` -> one compressor -> ``crc32c``, C order, regular grid,
default chunk keys, no sharding) each chunk file is read, checked and decoded here, in the
calling thread; anything else goes through zarr. The backend contract tests run both paths.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._zarr_local import ChunkFiles
from .base import StageClock

__all__ = ["RegionDecoder"]


@dataclass(frozen=True)
class RegionDecoder:
    """Reads boxes of one local Zarr v3 array, decoding each chunk of the box once."""

    files: ChunkFiles

    @classmethod
    def build(cls, array_dir: str, name: str, meta: dict[str, Any]) -> RegionDecoder | None:
        """A decoder when the array's encoding is one this path handles, else None."""
        files = ChunkFiles.build(array_dir, name, meta)
        return None if files is None else cls(files)

    def chunk_path(self, coords: tuple[int, ...]) -> str:
        return self.files.path(coords)

    def read_region(
        self, region: tuple[slice, ...], out: npt.NDArray[Any], clock: StageClock | None = None
    ) -> None:
        """Decode the chunks of ``region`` and copy their part of it into ``out``."""
        chunks = self.files.chunks
        spans = [range(s.start // c, -(-s.stop // c)) for s, c in zip(region, chunks, strict=True)]
        buf = np.empty(chunks, self.files.dtype)
        for coords in itertools.product(*spans):
            self.files.decode(coords, buf, what=str(coords), clock=clock)
            lo = [c * n for c, n in zip(coords, chunks, strict=True)]
            a = [max(s.start, x) for s, x in zip(region, lo, strict=True)]
            z = [min(s.stop, x + n) for s, x, n in zip(region, lo, chunks, strict=True)]
            src = tuple(slice(p - x, q - x) for p, q, x in zip(a, z, lo, strict=True))
            dst = tuple(
                slice(p - s.start, q - s.start) for p, q, s in zip(a, z, region, strict=True)
            )
            out[dst] = buf[src]
