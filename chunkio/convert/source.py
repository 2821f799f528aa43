"""What a conversion reads (:class:`BlockSource`) and reports (:class:`ConversionResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy.typing as npt

from ..backends import Format
from ..format.layout import DatasetLayout, FieldInfo

__all__ = ["BlockSource", "ConversionResult"]

_Result = TypeVar("_Result", bound="ConversionResult")


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

    @classmethod
    def of_layout(
        cls: type[_Result],
        path: str,
        fmt: Format,
        layout: DatasetLayout,
        *,
        resumed_blocks: int,
        written_blocks: int,
        seconds: float,
        **more: Any,
    ) -> _Result:
        """The result of a conversion that left ``layout`` at ``path`` (``more``: the other
        fields, e.g. ``unchanged`` or a subclass's)."""
        return cls(
            path=path,
            format=fmt,
            num_samples=layout.num_samples,
            samples_per_chunk=layout.samples_per_chunk,
            fields=layout.fields,
            resumed_blocks=resumed_blocks,
            written_blocks=written_blocks,
            seconds=seconds,
            **more,
        )
