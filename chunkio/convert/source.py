"""What a conversion reads (:class:`BlockSource`) and reports (:class:`ConversionResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy.typing as npt

from ..backends import Format
from ..layout import FieldInfo

__all__ = ["BlockSource", "ConversionResult"]


@runtime_checkable
class BlockSource(Protocol):
    """Samples to convert, read in contiguous blocks; must pickle to run with workers.

    ``read_block(start, stop)`` returns one array per field, each of shape
    ``(stop - start, *sample_shape)`` and the field's dtype (or one that casts to it safely).
    Bad input raises :class:`~chunkio.errors.SourceError` naming the item (file, sample).
    ``fingerprint()`` identifies the source's content: an interrupted conversion resumes only
    when it is unchanged.
    """

    @property
    def num_samples(self) -> int: ...

    @property
    def fields(self) -> tuple[FieldInfo, ...]: ...

    def fingerprint(self) -> str: ...

    def read_block(self, start: int, stop: int) -> dict[str, npt.NDArray[Any]]: ...


@dataclass(frozen=True)
class ConversionResult:
    """What :func:`run_conversion` wrote, and how much of it an earlier run had done.

    ``unchanged`` is true when the destination already held this very conversion, complete
    (same sources, same options): nothing was read or written, ``written_blocks`` is 0 and
    ``resumed_blocks`` counts every block (:func:`~chunkio.convert.images.convert_images`,
    which decides its blocks only after checking every file: every chunk).
    """

    path: str
    format: Format
    num_samples: int
    samples_per_chunk: int
    fields: tuple[FieldInfo, ...]
    resumed_blocks: int
    written_blocks: int
    seconds: float
    unchanged: bool = False
