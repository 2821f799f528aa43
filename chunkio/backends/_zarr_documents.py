"""The ``zarr.json`` documents of a remote Zarr v3 group, fetched by chunkio and shareable.

Opening a remote group through zarr costs a request per question (a HEAD before each GET, a
listing, every member's ``zarr.json`` one after the other), and every process that opens the
dataset asks them all again: a loader with 2 workers paid ~40 requests and ~1 s before its first
batch (``benchmarks/bench_remote.py``). :class:`RemoteDocuments` fetches the root document with
one GET, the members' documents with one concurrent round of GETs (the arrays the chunkio layout
declares: no listing), and hands what it read to other processes as a plain dict
(:meth:`RemoteDocuments.snapshot`): a ``ChunkDataset`` reads them once in the main process, and
its workers open their readers without a metadata request.

A snapshot is what the store held when the dataset was opened; like a reader opened then, it
does not follow a dataset rewritten in place later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import DatasetNotFoundError, FormatError
from ..remote import RangeFetcher, RemoteNotFoundError

__all__ = ["RemoteDocuments"]

#: the group's own document in a snapshot
ROOT = ""


class RemoteDocuments:
    """``zarr.json`` of a remote group (key :data:`ROOT`) and of its members, by name;
    ``None`` for a member that does not exist."""

    def __init__(
        self,
        fetcher: RangeFetcher,
        where: str,
        snapshot: Mapping[str, Any] | None = None,
    ) -> None:
        self.fetcher = fetcher
        self.where = where
        self._docs: dict[str, dict[str, Any] | None] = dict(snapshot or {})
        if ROOT not in self._docs:
            try:
                self.load([ROOT])
            except RemoteNotFoundError as err:  # e.g. the bucket does not exist
                raise DatasetNotFoundError(f"no Zarr v3 dataset at {where}: {err}") from err
        root = self._docs[ROOT]
        if root is None:
            raise DatasetNotFoundError(f"no Zarr v3 dataset at {where} (no zarr.json)")
        if root.get("zarr_format") != 3 or root.get("node_type") != "group":
            raise FormatError(
                f"{where}: cannot open as a Zarr v3 group: zarr.json declares "
                f"zarr_format={root.get('zarr_format')!r}, node_type={root.get('node_type')!r}"
            )

    @staticmethod
    def _key(name: str) -> str:
        return f"{name}/zarr.json" if name else "zarr.json"

    def attrs(self) -> dict[str, Any]:
        """The group's attributes."""
        root = self._docs[ROOT] or {}
        attrs = root.get("attributes") or {}
        return dict(attrs) if isinstance(attrs, dict) else {}

    def load(self, names: Iterable[str]) -> None:
        """Fetch the documents of ``names`` not known yet, concurrently (one round trip)."""
        todo = sorted({n for n in names if n not in self._docs})
        if not todo:
            return
        blobs = self.fetcher.get_objects([self._key(n) for n in todo])
        for name, blob in zip(todo, blobs, strict=True):
            self._docs[name] = None if blob is None else self._parse(name, blob)

    def get(self, name: str) -> dict[str, Any] | None:
        """Member ``name``'s document (fetched on first use)."""
        self.load([name])
        return self._docs[name]

    def snapshot(self) -> dict[str, dict[str, Any] | None]:
        """Every document read so far (plain JSON values: pickles, and serves another
        process's :class:`RemoteDocuments` without a request)."""
        return dict(self._docs)

    def _parse(self, name: str, blob: bytes) -> dict[str, Any] | None:
        key = self._key(name)
        try:
            doc = json.loads(blob)
        except ValueError as err:
            raise FormatError(f"{self.where}: {key} is not valid JSON: {err}") from err
        if name == ROOT and not isinstance(doc, dict):
            raise FormatError(f"{self.where}: {key} is not a JSON object")
        return doc if isinstance(doc, dict) else None
