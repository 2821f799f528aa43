"""In-memory reference backend: plain NumPy arrays, for tests and as the contract's model.

Stores live in a process-wide registry under ``memory://NAME``; forked children see a copy,
spawned ones see nothing. Every chunk read is logged so tests can count decodes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DatasetNotFoundError, FormatError, MissingChunkError, MissingFieldError
from ..util.numeric import ceil_div
from .base import (
    ArrayInfo,
    ArraySpec,
    CodecInfo,
    Compression,
    Reader,
    StageClock,
    Writer,
    check_region,
    check_rows,
)

__all__ = [
    "MemoryReader",
    "MemoryStore",
    "MemoryWriter",
    "delete_memory_store",
    "has_memory_store",
    "memory_store",
]

PREFIX = "memory://"


@dataclass
class _Array:
    data: npt.NDArray[Any]
    chunks: tuple[int, ...]
    compression: Compression
    written: set[int] = field(default_factory=set)


@dataclass
class MemoryStore:
    arrays: dict[str, _Array] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    #: (array name, chunk index) for every chunk decoded by a reader
    read_log: list[tuple[str, int]] = field(default_factory=list)


_STORES: dict[str, MemoryStore] = {}


def memory_store(location: str, *, create: bool = False) -> MemoryStore:
    """The store registered at ``memory://NAME`` (created when ``create``)."""
    if create:
        return _STORES.setdefault(location, MemoryStore())
    try:
        return _STORES[location]
    except KeyError as err:
        raise DatasetNotFoundError(f"no in-memory dataset at {location}") from err


def has_memory_store(location: str) -> bool:
    """Whether a store is registered at ``memory://NAME``."""
    return location in _STORES


def delete_memory_store(location: str) -> None:
    _STORES.pop(location, None)


class MemoryReader(Reader):
    #: an unwritten chunk raises MissingChunkError
    reports_missing_chunks = True

    def __init__(self, location: str, *, trust_codecs: bool = False) -> None:
        self.location = location
        self._store = memory_store(location)
        self.clock = StageClock()  # copies out of memory count as reads

    def attrs(self) -> dict[str, Any]:
        return dict(self._store.attrs)

    def array_names(self) -> list[str]:
        return sorted(self._store.arrays)

    def _get(self, name: str) -> _Array:
        try:
            return self._store.arrays[name]
        except KeyError as err:
            raise MissingFieldError(f"{self.location}: array {name!r} is missing") from err

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        self._get(name)  # memory stores hold arrays only
        return None

    def read_text(self, name: str) -> list[str]:
        self._get(name)
        raise FormatError(f"{self.location}: {name!r} is not an array of strings")

    def array_info(self, name: str) -> ArrayInfo:
        a = self._get(name)
        c = a.compression
        return ArrayInfo(
            name,
            a.data.shape,
            a.data.dtype,
            a.chunks,
            (c.codec,),
            compression=CodecInfo(c.codec, None if c.codec == "none" else c.level, None),
        )

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        a = self._get(name)
        check_rows(ranges, a.data.shape[0], f"{self.location}: array {name!r}")
        step = a.chunks[0]
        offset = 0
        for start, stop in ranges:
            for chunk in range(start // step, ceil_div(stop, step)):
                if chunk not in a.written:
                    raise MissingChunkError(
                        f"{self.location}: array {name!r}: chunk {chunk} is missing"
                    )
                self._store.read_log.append((name, chunk))
            t0 = time.perf_counter()
            out[offset : offset + stop - start] = a.data[start:stop]
            self.clock.read += time.perf_counter() - t0
            offset += stop - start

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        a = self._get(name)
        where = f"{self.location}: array {name!r}"
        if not check_region(region, a.data.shape, out, where):
            return
        step = a.chunks[0]
        for chunk in range(region[0].start // step, ceil_div(region[0].stop, step)):
            if chunk not in a.written:
                raise MissingChunkError(f"{where}: chunk {chunk} is missing")
            self._store.read_log.append((name, chunk))
        out[...] = a.data[region]

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        return (chunk if isinstance(chunk, int) else chunk[0]) in self._get(name).written

    def read_path(self, name: str) -> str:
        self._get(name)
        return "memory"

    def close(self) -> None:
        pass


class MemoryWriter(Writer):
    def __init__(self, location: str) -> None:
        self.location = location
        self._store = memory_store(location, create=True)

    def create(self, spec: ArraySpec) -> None:
        data = np.zeros(spec.shape, spec.dtype)
        self._store.arrays[spec.name] = _Array(data, spec.chunks, spec.compression)

    def write_block(self, name: str, start: int, data: npt.NDArray[Any]) -> None:
        a = self._store.arrays[name]
        a.data[start : start + len(data)] = data
        step = a.chunks[0]
        a.written.update(range(start // step, ceil_div(start + len(data), step)))

    def write_region(self, name: str, region: tuple[Any, ...], data: npt.NDArray[Any]) -> None:
        a = self._store.arrays[name]
        a.data[region] = data
        first = region[0] if region else slice(None)
        rows = [first] if isinstance(first, int) else range(*first.indices(len(a.data)))
        a.written.update(r // a.chunks[0] for r in rows)

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        self._store.attrs.update(attrs)

    def attrs(self) -> dict[str, Any]:
        return dict(self._store.attrs)

    def close(self) -> None:
        pass
