"""The metadata documents of a remote Zarr group (v3 ``zarr.json``, v2 ``.zgroup``/``.zarray``),
fetched by chunkio and shareable.

Opening a remote group through zarr costs a request per question (a HEAD before each GET, a
listing, every member's ``zarr.json`` one after the other), and every process that opens the
dataset asks them all again: a loader with 2 workers paid ~40 requests and ~1 s before its first
batch (``benchmarks/bench_remote.py``). :class:`RemoteDocuments` fetches the root document with
one GET, the members' documents with one concurrent round of GETs (the arrays asked for: no
listing), and hands what it read to other processes as a plain dict
(:meth:`RemoteDocuments.snapshot`): a ``ChunkDataset`` reads them once in the main process, and
its workers open their readers without a metadata request.

Consolidated metadata (v3: ``consolidated_metadata`` inside the root ``zarr.json``, as
zarr-python 3 writes it; v2: ``.zmetadata``) is used when present, as zarr-python uses it: every
member's document comes with the root's, in the same request(s). A member the consolidation
does not list (an array added after it) is fetched on its own, so a stale or absent
consolidation still reads; for the members it lists it is trusted, as zarr-python trusts it.

Every document is kept in one normalised form: v3 documents as stored; a v2 array's
``.zarray`` with ``zarr_format: 2`` and ``node_type: "array"`` added (what
:class:`~.chunks.ChunkFiles` reads); a v2 group as ``{"zarr_format": 2, "node_type":
"group", "attributes": ...}``. A snapshot is what the store held when the dataset was opened;
like a reader opened then, it does not follow a dataset rewritten in place later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import DatasetNotFoundError, FormatError
from ...remote import RangeFetcher, RemoteNotFoundError

__all__ = ["RemoteDocuments", "v2_array_document"]

#: the group's own document in a snapshot
ROOT = ""

Document = dict[str, Any]


def v2_array_document(zarray: Mapping[str, Any]) -> Document:
    """A v2 ``.zarray`` in the normalised form (see the module docstring)."""
    return {**zarray, "zarr_format": 2, "node_type": "array"}


def _v2_group_document(attributes: object) -> Document:
    return {
        "zarr_format": 2,
        "node_type": "group",
        "attributes": dict(attributes) if isinstance(attributes, Mapping) else {},
    }


class RemoteDocuments:
    """The documents of a remote group (key :data:`ROOT`) and of its members, by name;
    ``None`` for a member that does not exist."""

    def __init__(
        self,
        fetcher: RangeFetcher,
        where: str,
        snapshot: Mapping[str, Any] | None = None,
    ) -> None:
        self.fetcher = fetcher
        self.where = where
        self._docs: dict[str, Document | None] = dict(snapshot or {})
        #: the members a consolidation listed (None: the store has none, or a snapshot)
        self.consolidated: list[str] | None = None
        if ROOT not in self._docs:
            try:
                self._open_root()
            except RemoteNotFoundError as err:  # e.g. the bucket does not exist
                raise DatasetNotFoundError(f"no Zarr dataset at {where}: {err}") from err
        root = self._docs[ROOT]
        if root is None:
            raise DatasetNotFoundError(f"no Zarr dataset at {where} (no zarr.json, no .zgroup)")
        if root.get("zarr_format") not in (2, 3) or root.get("node_type") != "group":
            raise FormatError(
                f"{where}: cannot open as a Zarr group: its metadata declares "
                f"zarr_format={root.get('zarr_format')!r}, node_type={root.get('node_type')!r}"
            )

    @property
    def zarr_format(self) -> int:
        return int((self._docs[ROOT] or {}).get("zarr_format", 3))

    def _open_root(self) -> None:
        """The root document: ``zarr.json``, else (a second round) v2's ``.zgroup``,
        ``.zattrs`` and ``.zmetadata`` together; members a consolidation lists with it."""
        (v3,) = self.fetcher.get_objects(["zarr.json"])
        if v3 is not None:
            root = self._parse("zarr.json", v3)
            if root is None:
                raise FormatError(f"{self.where}: zarr.json is not a JSON object")
            consolidated = root.pop("consolidated_metadata", None)
            self._docs[ROOT] = root
            if isinstance(consolidated, Mapping) and consolidated.get("kind") == "inline":
                members = consolidated.get("metadata") or {}
                if not isinstance(members, Mapping):
                    raise FormatError(
                        f"{self.where}: zarr.json 'consolidated_metadata'.'metadata' must be an "
                        f"object of members' documents; got {members!r}"
                    )
                self._consolidate({str(k): v for k, v in members.items() if isinstance(v, Mapping)})
            return
        zgroup, zattrs, zmetadata = self.fetcher.get_objects([".zgroup", ".zattrs", ".zmetadata"])
        if zgroup is None:
            self._docs[ROOT] = None
            return
        group = self._parse(".zgroup", zgroup) or {}
        attrs = {} if zattrs is None else self._parse(".zattrs", zattrs)
        self._docs[ROOT] = {**_v2_group_document(attrs), "zarr_format": group.get("zarr_format")}
        if zmetadata is not None:
            self._consolidate(_v2_members(self._parse(".zmetadata", zmetadata) or {}, self.where))

    def _consolidate(self, members: Mapping[str, Mapping[str, Any]]) -> None:
        for name, doc in members.items():
            doc = dict(doc)
            doc.pop("consolidated_metadata", None)  # a nested group's (empty) copy
            self._docs[name.strip("/")] = doc
        self.consolidated = sorted(name.strip("/") for name in members)

    def attrs(self) -> dict[str, Any]:
        """The group's attributes."""
        root = self._docs[ROOT] or {}
        attrs = root.get("attributes") or {}
        return dict(attrs) if isinstance(attrs, dict) else {}

    def arrays(self) -> list[str] | None:
        """The arrays a consolidation lists, by path (None: no consolidation)."""
        if self.consolidated is None:
            return None
        return [
            n for n in self.consolidated if (self._docs.get(n) or {}).get("node_type") == "array"
        ]

    def load(self, names: Iterable[str]) -> None:
        """Fetch the documents of ``names`` not known yet, concurrently (one round trip; v2:
        a second one for the names with no ``.zarray``, which may be groups)."""
        todo = sorted({n for n in names if n not in self._docs})
        if not todo:
            return
        if self.zarr_format == 3:
            for name, doc in zip(todo, self._fetch(todo, "zarr.json"), strict=True):
                self._docs[name] = doc
            return
        arrays = self._fetch(todo, ".zarray")
        groups = [n for n, doc in zip(todo, arrays, strict=True) if doc is None]
        found = dict(zip(groups, self._fetch(groups, ".zgroup"), strict=True)) if groups else {}
        for name, doc in zip(todo, arrays, strict=True):
            if doc is not None:
                self._docs[name] = v2_array_document(doc)
            else:
                self._docs[name] = None if found.get(name) is None else _v2_group_document({})

    def _fetch(self, names: list[str], document: str) -> list[Document | None]:
        keys = [f"{n}/{document}" if n else document for n in names]
        blobs = self.fetcher.get_objects(keys)
        return [None if b is None else self._parse(k, b) for k, b in zip(keys, blobs, strict=True)]

    def get(self, name: str) -> Document | None:
        """Member ``name``'s document (fetched on first use)."""
        self.load([name])
        return self._docs[name]

    def snapshot(self) -> dict[str, Document | None]:
        """Every document read so far (plain JSON values: pickles, and serves another
        process's :class:`RemoteDocuments` without a request)."""
        return dict(self._docs)

    def _parse(self, key: str, blob: bytes) -> Document | None:
        try:
            doc = json.loads(blob)
        except ValueError as err:
            raise FormatError(f"{self.where}: {key} is not valid JSON: {err}") from err
        return doc if isinstance(doc, dict) else None


def _v2_members(zmetadata: Mapping[str, Any], where: str) -> dict[str, Document]:
    """Members' documents from a v2 ``.zmetadata`` (keys ``path/.zarray``, ``path/.zgroup``,
    ``path/.zattrs``), normalised; the root's own entries left out (fetched themselves)."""
    entries = zmetadata.get("metadata") or {}
    if not isinstance(entries, Mapping):
        raise FormatError(f"{where}: .zmetadata 'metadata' must be an object; got {entries!r}")
    out: dict[str, Document] = {}
    for key, doc in entries.items():
        path, _, document = str(key).rpartition("/")
        if not path or not isinstance(doc, Mapping):
            continue
        if document == ".zarray":
            out[path] = v2_array_document(doc)
        elif document == ".zgroup":
            out[path] = _v2_group_document(entries.get(f"{path}/.zattrs"))
    return out
