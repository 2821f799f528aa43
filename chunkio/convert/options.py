"""Options that travel together, validated once where a user's call enters the package.

The entry points (:func:`~chunkio.convert.run_conversion`, :func:`~chunkio.convert.write_arrays`,
:func:`~chunkio.convert.images.convert_images`, :func:`~chunkio.convert.volumes.convert_volumes`,
:func:`~chunkio.convert.append_arrays`) take flat keyword arguments; everything behind them
takes these frozen objects, which check their values when they are made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import Compression, Format
from .durability.rerun import Request
from .engine.workers import check_workers

__all__ = ["ConversionOptions", "Execution", "Progress"]

#: Compression is frozen, so one shared default is safe
_DEFAULT_COMPRESSION = Compression()


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")


@dataclass(frozen=True)
class Execution:
    """Where a job's tasks run: ``client`` (a ``dask.distributed.Client``) if given, else
    ``workers`` processes (1: this process)."""

    workers: int = 1
    client: Any = None

    def __post_init__(self) -> None:
        check_workers(self.workers)

    @property
    def parallel(self) -> bool:
        """Whether tasks run outside this process (workers may then write themselves)."""
        return self.client is not None or self.workers > 1


@dataclass(frozen=True)
class Progress:
    """A progress bar of a job: ``total`` units (``unit``), ``done`` of them already;
    ``scale``: counts shown as 1.2k, 3.4M (samples)."""

    total: int
    unit: str
    label: str
    show: bool = True
    done: int = 0
    scale: bool = False


@dataclass(frozen=True)
class ConversionOptions:
    """What :func:`~chunkio.convert.run_conversion` is asked, besides the source and ``dst``
    (its docstring describes each). Checked when made; ``extra`` must be JSON-serialisable.
    """

    format: Format | None = None
    samples_per_chunk: int | None = None
    compression: Compression = _DEFAULT_COMPRESSION
    class_names: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    execution: Execution = field(default_factory=Execution)
    progress: bool = True
    block_chunks: int = 1
    request: Request | None = None
    pack: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.compression, Compression):
            raise TypeError(f"compression must be a Compression; got {self.compression!r}")
        _positive("block_chunks", self.block_chunks)
        if self.samples_per_chunk is not None:
            _positive("samples_per_chunk", self.samples_per_chunk)
        extra = dict(self.extra or {})
        try:
            json.dumps(extra)
        except (TypeError, ValueError) as err:
            raise TypeError(f"extra must be JSON-serialisable; got {extra!r}: {err}") from err
        object.__setattr__(self, "extra", extra)
        if self.class_names is not None:
            names: Sequence[Any] = self.class_names
            object.__setattr__(self, "class_names", tuple(str(c) for c in names))
