"""Zarr v3 backend: local paths, URLs zarr understands (with ``storage_options``), or stores."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr
from zarr.storage import LocalStore

from ...errors import (
    ChunkReadError,
    CorruptChunkError,
    DatasetNotFoundError,
    FormatError,
    MissingChunkError,
    MissingFieldError,
)
from ...util.numeric import ceil_div
from .. import ReaderOptions
from ..base import ArrayInfo, Reader, StageClock, check_region, check_rows, coalesce
from ..codec_names import zarr2_codec_info, zarr2_codecs, zarr_codec_info
from .documents import RemoteDocuments, v2_array_document
from .engine import ArrayEngine
from .metadata import check_array_document, check_codecs
from .nodes import ZARR_DECODE_ERRORS, array_attrs, group_attrs, read_text
from .shard import shard_layout
from .shard_index import ShardIndexes
from .sources import ByteSource, LocalFiles, RemoteObjects, describe, is_remote
from .writing import CHUNK_KEY_ENCODING, ZarrWriter

__all__ = ["CHUNK_KEY_ENCODING", "ZarrReader", "ZarrWriter"]


def _declared_arrays(attrs: Mapping[str, Any]) -> list[str]:
    """The arrays a chunkio layout attribute declares (for stores that cannot list)."""
    from ...format.layout import ATTR_KEY, DatasetLayout

    try:
        layout = DatasetLayout.from_attrs(attrs, where="", require_complete=False)
    except (FormatError, KeyError, TypeError, ValueError):
        return list((attrs.get(ATTR_KEY) or {}).get("fields") or {})
    return [a for f in layout.fields for a in f.array_names()]


class _Described:
    """What a reader needs of an array it reads itself (a remote one): shape, dtype, chunks
    and its ``zarr.json`` (or v2 ``.zarray``), without zarr opening it."""

    def __init__(self, meta: dict[str, Any], engine: ArrayEngine) -> None:
        self.meta = meta
        self.shape = tuple(engine.files.shape)
        self.dtype = engine.files.dtype
        self.chunks = tuple(engine.chunks)
        self.ndim = len(self.shape)

    @property
    def metadata(self) -> _Described:
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.meta


class ZarrReader(Reader):
    """Read-only access to a chunkio Zarr v3 group."""

    #: a chunk absent from the store is an error, never the fill value
    reports_missing_chunks = True

    def __init__(
        self,
        location: Any,
        options: ReaderOptions = ReaderOptions(),  # noqa: B008 - a frozen value object
        *,
        use_engine: bool = True,
    ) -> None:
        """``options``: as :func:`~chunkio.backends.open_reader` takes them. ``use_engine=False``
        reads every array through zarr-python, the general path (tests compare the engine with
        it)."""
        self.location = describe(location)
        self._trust = options.trust_codecs
        self._use_engine = use_engine
        self._fill_missing = options.fill_missing
        self._url = location
        storage_options = options.storage_options
        self._storage_options = None if storage_options is None else dict(storage_options)
        self._remote: Any = None
        self._docs: RemoteDocuments | None = None
        self._zgroup: Any = None
        if is_remote(location):  # chunks and zarr.json documents fetched by chunkio itself
            from ...remote import RangeFetcher

            cache_dir, cache_bytes = options.download_cache or (None, 0)
            self._remote = RangeFetcher(
                location.rstrip("/"),
                storage_options=storage_options,
                cache_dir=cache_dir,
                cache_bytes=cache_bytes,
            )
            self._docs = RemoteDocuments(self._remote, self.location, options.documents)
        else:
            self._zgroup = self._open_group()
        self._arrays: dict[str, Any] = {}
        #: per array, chunkio's read engine (None: zarr-python reads it)
        self._fast: dict[str, ArrayEngine | None] = {}
        #: per sharded array zarr-python reads, where its inner chunks are (presence checks)
        self._shard_indexes: dict[str, ShardIndexes] = {}
        self._infos: dict[str, ArrayInfo] = {}
        self._metas: dict[str, dict[str, Any] | None] = {}
        self._names: list[str] | None = None
        self.clock = StageClock()

    def _open_group(self) -> Any:
        try:
            # Not through a consolidation: chunkio reads the members' documents itself (remote:
            # the consolidated ones, :mod:`.documents`), and zarr opening an array a
            # stale consolidation does not list would fail ("not found in consolidated metadata")
            return zarr.open_group(
                store=self._url,
                mode="r",
                storage_options=self._storage_options,
                use_consolidated=False,
            )
        except FileNotFoundError as err:
            raise DatasetNotFoundError(f"no Zarr v3 dataset at {self.location}") from err
        except Exception as err:  # zarr raises several types for "not a v3 group"
            raise FormatError(f"{self.location}: cannot open as a Zarr v3 group: {err}") from err

    @property
    def _group(self) -> Any:
        """zarr's group (remotely opened only for what chunkio does not read itself)."""
        if self._zgroup is None:
            self._zgroup = self._open_group()
        return self._zgroup

    def documents(self) -> dict[str, dict[str, Any] | None] | None:
        """A remote group's documents read so far, for another process (None: local)."""
        return None if self._docs is None else self._docs.snapshot()

    def attrs(self) -> dict[str, Any]:
        if self._docs is not None:
            return self._docs.attrs()
        return dict(self._group.attrs)

    def array_names(self) -> list[str]:
        if self._names is None:
            self._names = self._list_arrays()
        return list(self._names)

    def _list_arrays(self) -> list[str]:
        if self._docs is not None:
            consolidated = self._docs.arrays()
            if consolidated is not None:  # every member's document came with the root's
                return sorted(consolidated)
            declared = _declared_arrays(self.attrs())
            if declared:  # a chunkio dataset: its arrays' documents in one round, no listing
                self._docs.load(declared)
                return sorted(
                    n for n in declared if (self._raw_meta(n) or {}).get("node_type") == "array"
                )
        # From the raw zarr.json documents: zarr's own listing parses every member's codecs,
        # and an unknown or unsafe codec must be refused by _array, not crash a listing.
        from zarr.core.sync import sync

        group = self._group  # opened here: zarr cannot open a group inside its own loop

        async def children(prefix: str) -> list[str]:
            path = "/".join(p for p in (group.path, prefix) if p)
            return [k async for k in group.store.list_dir(path)]

        found: list[str] = []
        todo = [""]  # groups to list, by path below this one: arrays in groups by their path
        while todo:
            prefix = todo.pop()
            try:
                names = sync(children(prefix))
            except Exception:  # e.g. HTTP: no listing
                names = []
            for n in names:
                name = "/".join(p for p in (prefix, n.rstrip("/")) if p)  # HTTP: folders "x/"
                if n in ("zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"):
                    continue
                if (self._raw_meta(name) or {}).get("node_type") == "array":
                    found.append(name)
                elif self._is_group(name):
                    todo.append(name)
        if not found:  # a store that cannot list: the arrays the chunkio layout declares
            declared = _declared_arrays(self.attrs())
            found = [n for n in declared if (self._raw_meta(n) or {}).get("node_type") == "array"]
        return sorted(found)

    def _is_group(self, name: str) -> bool:
        """Whether member ``name`` is a group (v3 ``zarr.json``, or a v2 ``.zgroup``)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        for document in ("zarr.json", ".zgroup"):
            key = "/".join(p for p in (self._group.path, name, document) if p)
            buf = sync(self._group.store.get(key, prototype=default_buffer_prototype()))
            if buf is not None:
                meta = {} if document == ".zgroup" else json.loads(buf.to_bytes())
                return document == ".zgroup" or meta.get("node_type") == "group"
        return False

    def _raw_meta(self, name: str) -> dict[str, Any] | None:
        """The member's zarr.json as plain JSON (None if absent), read once, unparsed by zarr."""
        if self._docs is not None:
            return self._docs.get(name)
        if name in self._metas:
            return self._metas[name]
        meta = self._fetch_meta(name)
        self._metas[name] = meta
        return meta

    def _fetch_meta(self, name: str) -> dict[str, Any] | None:
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        for document in ("zarr.json", ".zarray"):  # v3, else a v2 array
            key = "/".join(p for p in (self._group.path, name, document) if p)
            buf = sync(self._group.store.get(key, prototype=default_buffer_prototype()))
            if buf is not None:
                break
        else:
            return None
        try:
            meta = json.loads(buf.to_bytes())
        except ValueError as err:
            raise FormatError(f"{self.location}: {key} is not valid JSON: {err}") from err
        if not isinstance(meta, dict):
            return None
        return v2_array_document(meta) if document == ".zarray" else meta

    def _array(self, name: str) -> Any:
        arr = self._arrays.get(name)
        if arr is None:
            raw = self._raw_meta(name)
            if raw is None and self._docs is None and self._is_group(name):  # v2: a .zgroup
                raw = {"node_type": "group"}
            if raw is None:
                raise MissingFieldError(f"{self.location}: array {name!r} is missing")
            if raw.get("node_type") == "group":
                raise FormatError(f"{self.location}: {name!r} is a group, not an array")
            # its fields typed, then its codecs, before zarr builds or decodes anything
            check_array_document(raw, where=f"{self.location}: array {name!r}")
            check_codecs(raw, name, self.location, trust=self._trust)
            engine = self._engine(name, raw) if self._remote is not None else None
            if engine is not None:  # no zarr array needed (nor its metadata requests)
                self._fast[name] = engine
                self._arrays[name] = arr = _Described(raw, engine)
                return arr
            try:
                arr = self._group[name]
            except Exception as err:  # e.g. zarr's UnknownCodecError under trust_codecs
                raise FormatError(
                    f"{self.location}: array {name!r} cannot be opened by zarr: {err}"
                ) from err
            meta = arr.metadata.to_dict()
            self._arrays[name] = arr
            self._fast[name] = self._engine(name, meta)
        return arr

    def _engine(self, name: str, meta: dict[str, Any]) -> ArrayEngine | None:
        """chunkio's engine for the array, where its store and codecs allow one."""
        source = self._source(name) if self._use_engine else None
        if source is None:
            return None
        return ArrayEngine.build(source, name, meta, fill_missing=self._fill_missing)

    def _source(self, name: str) -> ByteSource | None:
        """Array ``name``'s objects as chunkio reads them (None: only zarr-python does)."""
        if self._remote is not None:
            return RemoteObjects(self._remote, name)  # keys below the url
        store = self._group.store
        if not isinstance(store, LocalStore):
            return None
        return LocalFiles(os.path.join(str(store.root), self._group.path, name))

    def _zarr_array(self, name: str) -> Any:
        """The zarr array itself (remote arrays chunkio reads alone are opened only here)."""
        arr = self._array(name)
        if isinstance(arr, _Described):
            arr = self._group[name]
        return arr

    def group_attrs(self, name: str) -> dict[str, Any] | None:
        raw = self._raw_meta(name)
        if raw is not None and raw.get("node_type") == "array":
            return None
        return group_attrs(self._group, name, self.location)

    def read_text(self, name: str) -> list[str]:
        return read_text(self._group, name, self.location)

    def array_info(self, name: str) -> ArrayInfo:
        info = self._infos.get(name)
        if info is None:
            arr = self._array(name)
            meta = arr.metadata.to_dict()
            v2 = meta.get("zarr_format") == 2
            codecs = zarr2_codecs(meta) if v2 else meta.get("codecs") or []
            info = ArrayInfo(
                name=name,
                shape=tuple(arr.shape),
                dtype=np.dtype(arr.dtype),
                chunks=tuple(arr.chunks),
                codecs=tuple(json.dumps(c, sort_keys=True) for c in codecs),
                stored_nbytes=None,  # a listing of every chunk: asked for by reports alone
                compression=zarr2_codec_info(meta) if v2 else zarr_codec_info(codecs),
            )
            self._infos[name] = info
        return info

    def array_attrs(self, name: str) -> dict[str, Any]:
        return array_attrs(self._raw_meta(name) or {}, lambda: self._zarr_array(name).attrs)

    def stored_nbytes(self, name: str) -> int:
        """Bytes the array's chunks take in the store (remotely: a listing)."""
        return int(self._zarr_array(name).nbytes_stored())

    @contextlib.contextmanager
    def _errors_named(self) -> Iterator[None]:
        """Chunk errors from the engine, re-raised with the dataset's location first."""
        try:
            yield
        except ChunkReadError as err:
            raise type(err)(f"{self.location}: {err}") from err

    def read_into(
        self, name: str, ranges: Sequence[tuple[int, int]], out: npt.NDArray[Any]
    ) -> None:
        arr = self._array(name)
        check_rows(ranges, arr.shape[0], f"{self.location}: array {name!r}")
        engine = self._fast[name]
        if engine is not None:
            try:  # as _errors_named, inline: a read of one chunk is called per chunk
                engine.read_rows(ranges, out, self.clock)
            except ChunkReadError as err:
                raise type(err)(f"{self.location}: {err}") from err
            return
        step = int(arr.chunks[0])
        start_time = time.perf_counter()
        try:
            for start, stop, offset in coalesce(ranges):
                self._require_chunks(arr, name, start, stop, step)
                try:
                    out[offset : offset + stop - start] = arr[start:stop]
                except ZARR_DECODE_ERRORS as err:
                    raise CorruptChunkError(
                        f"{self.location}: array {name!r}, samples {start}..{stop - 1} "
                        f"(chunks {start // step}..{(stop - 1) // step}) cannot be decoded: {err}"
                    ) from err
        finally:
            self.clock.decode += time.perf_counter() - start_time  # zarr does all stages

    @property
    def prefetches(self) -> bool:
        """Whether :meth:`prefetch` does anything (chunks fetched over a network)."""
        return self._remote is not None

    def prefetch(self, name: str, chunks: list[int]) -> None:
        """Start fetching sample-axis ``chunks`` of ``name`` ahead of their read (remote
        datasets; elsewhere nothing to do)."""
        self._array(name)
        engine = self._fast[name]
        if engine is not None:
            engine.prefetch(chunks)

    def _require_chunks(self, arr: Any, name: str, start: int, stop: int, step: int) -> None:
        if self._fill_missing:
            return  # zarr-python reads them as the fill value, as asked
        # Missing chunks would read back as the fill value; a complete dataset has them all.
        for chunk in range(start // step, ceil_div(stop, step)):
            if not self._stored(name, arr, (chunk,) + (0,) * (arr.ndim - 1)):
                raise MissingChunkError(
                    f"{self.location}: array {name!r}: chunk {chunk} is missing from the store"
                )

    def read_region(self, name: str, region: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        arr = self._array(name)
        where = f"{self.location}: array {name!r}"
        if not check_region(region, tuple(arr.shape), out, where):
            return
        engine = self._fast[name]
        if engine is not None:
            with self._errors_named():
                engine.read_region(region, out, self.clock)
            return
        spans = [
            range(s.start // c, ceil_div(s.stop, c))
            for s, c in zip(region, arr.chunks, strict=True)
        ]
        for coords in itertools.product(*spans):
            # Missing chunks would read back as the fill value; a complete dataset has them all.
            if not self._fill_missing and not self._stored(name, arr, coords):
                raise MissingChunkError(f"{where}: chunk {coords} is missing from the store")
        try:
            out[...] = arr[region]
        except ZARR_DECODE_ERRORS as err:
            box = [(s.start, s.stop) for s in region]
            msg = f"{where}: a chunk of box {box} cannot be decoded: {err}"
            raise CorruptChunkError(msg) from err

    def _stored(self, name: str, arr: Any, coords: tuple[int, ...]) -> bool:
        """Whether chunk ``coords`` of a zarr-python-read array is stored: its object, and for
        an inner chunk of a shard, its entry in the shard's index."""
        if arr.shards is None:
            key = f"{arr.path}/{arr.metadata.encode_chunk_key(coords)}"
        else:
            shards = self._shard_indexes.get(name)
            source = self._source(name)
            if shards is None and source is not None:
                layout = shard_layout(arr.metadata.to_dict(), where=f"array {name!r}")
                if layout is not None:
                    encode = arr.metadata.encode_chunk_key
                    shards = self._shard_indexes[name] = ShardIndexes(source, layout, encode, name)
            if shards is not None:
                return shards.stored(coords)
            shard = tuple(
                c * n // s for c, n, s in zip(coords, arr.chunks, arr.shards, strict=True)
            )
            key = f"{arr.path}/{arr.metadata.encode_chunk_key(shard)}"
        from zarr.core.sync import sync

        return bool(sync(arr.store.exists(key)))

    def chunk_exists(self, name: str, chunk: int | tuple[int, ...]) -> bool:
        arr = self._array(name)
        engine = self._fast[name]
        if engine is not None:
            return engine.exists(chunk)
        coords = (chunk,) + (0,) * (arr.ndim - 1) if isinstance(chunk, int) else chunk
        return self._stored(name, arr, coords)

    def read_path(self, name: str) -> str:
        self._array(name)
        return "zarr-python" if self._fast[name] is None else "engine"

    def close(self) -> None:
        for engine in self._fast.values():
            if engine is not None:
                engine.close()
        self._arrays.clear()
        self._fast.clear()
        self._shard_indexes.clear()
        if self._remote is not None:
            self._remote.close()
