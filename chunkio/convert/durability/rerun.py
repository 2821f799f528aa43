"""Idempotent reruns: a finished conversion, run again, returns at once.

A complete dataset records the :class:`Request` that made it in its root attribute
``chunkio_request``: ``kind`` (which conversion), ``source`` (a fingerprint of the source
listing - file paths, sizes and modification times, as resuming uses them - or of in-memory
array content), ``options`` (every option that shapes the result, as JSON) and a digest of the
``chunkio`` attribute it was written with. A conversion first builds its request - cheaply:
``convert_images`` stats its listing but decodes nothing - and :func:`reuse_complete` compares
it with the record at the destination:

- equal, and the layout unchanged since: the dataset is returned as it is
  (``ConversionResult.unchanged``), nothing read or written;
- anything else - other sources or options (each difference is named), a dataset appended to
  since, an incomplete one, one written before requests were recorded, something that is no
  dataset - is :class:`~chunkio.errors.DestinationExistsError` unless ``overwrite``.

As for resuming, a source file rewritten with the same size within its file system's
timestamp resolution goes unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...backends import Compression, Format, open_reader, storage_for
from ...errors import DestinationExistsError
from ...format.layout import ATTR_KEY, DatasetLayout
from ...util.messages import OVERWRITE, listing
from .staging import is_local

__all__ = [
    "REQUEST_KEY",
    "Request",
    "compression_option",
    "display",
    "file_listing",
    "reuse_complete",
]

#: the root attribute in which a complete dataset records the :class:`Request` that made it
REQUEST_KEY = "chunkio_request"
#: bump when the meaning of a recorded request changes: older records then never match
REQUEST_VERSION = 1


def file_listing(head: Any, files: Sequence[tuple[str, Any]]) -> str:
    """sha256 of ``head`` and each ``(path, info)`` with the file's size and mtime.

    One ``stat`` per file, nothing read: the cheap check a rerun affords. A file that cannot
    be stat'ed (gone since it was listed) counts as changed.
    """
    h = hashlib.sha256(repr(head).encode("utf-8", "surrogateescape"))
    for path, info in files:
        try:
            st = os.stat(path)
            stat: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
        except OSError:
            stat = None
        h.update(repr((os.path.abspath(path), info, stat)).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def compression_option(c: Compression) -> dict[str, Any]:
    """A :class:`~chunkio.backends.Compression` as a request option."""
    return {"codec": c.codec, "level": c.level, "checksum": c.checksum}


@dataclass(frozen=True)
class Request:
    """What a conversion was asked to do: compared with the record of a complete destination.

    ``kind`` names the conversion (``"images"``, ``"arrays"``, ``"volumes"``, ``"blocks"``);
    ``source`` fingerprints the source cheaply - file paths, sizes and modification times, or
    the content hash of in-memory arrays - and ``options`` holds every option that shapes the
    stored result, as JSON values (not ``workers`` or ``progress``, which do not).

    >>> a = Request("images", "f00d", {"size": [64, 64], "seed": 0})
    >>> a.differences(Request("images", "f00d", {"size": [128, 128], "seed": 0}))
    ['option size was [128, 128], now [64, 64]']
    """

    kind: str
    source: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:  # as stored (tuples become lists, keys strings), so equal options compare equal
            options = _as_stored(dict(self.options))
        except (TypeError, ValueError) as err:
            raise TypeError(f"request options must be JSON values; got {self.options!r}") from err
        object.__setattr__(self, "options", options)

    def record(self, layout: DatasetLayout) -> dict[str, Any]:
        """The JSON stored beside ``layout``: this request and a digest of that layout."""
        return {
            "version": REQUEST_VERSION,
            "kind": self.kind,
            "source": self.source,
            "options": dict(self.options),
            "layout": _digest(layout.to_attrs()),
        }

    @classmethod
    def from_record(cls, record: Any) -> Request | None:
        """The request in a stored record; ``None`` if there is none this version reads."""
        if not isinstance(record, Mapping) or record.get("version") != REQUEST_VERSION:
            return None
        try:
            return cls(str(record["kind"]), str(record["source"]), dict(record["options"]))
        except (KeyError, TypeError, ValueError):
            return None

    def differences(self, earlier: Request) -> list[str]:
        """What differs from ``earlier``, one phrase each ("option size was 64, now 128")."""
        if earlier.kind != self.kind:
            return [f"it was made by a {earlier.kind} conversion, not {self.kind}"]
        out = []
        if earlier.source != self.source:
            out.append(_SOURCE_CHANGED.get(self.kind, "the source changed"))
        for key in sorted({*earlier.options, *self.options}):
            old, new = earlier.options.get(key), self.options.get(key)
            if old != new:
                out.append(f"option {key} was {json.dumps(old)}, now {json.dumps(new)}")
        return out


_SOURCE_CHANGED = {
    "images": "the source listing changed (files added, removed, renamed or modified)",
    "volumes": "the source listing changed (files added, removed, renamed or modified)",
    "arrays": "the source arrays changed",
}


def _as_stored(value: Any) -> Any:
    """``value`` as it reads back from JSON attributes."""
    return json.loads(json.dumps(value))


def _digest(value: Any) -> str:
    text = json.dumps(_as_stored(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def reuse_complete(
    dst: Any, fmt: Format, request: Request, *, overwrite: bool
) -> DatasetLayout | None:
    """The layout of the complete dataset at ``dst`` if ``request`` itself made it.

    Cheap: it reads the root attributes only. ``None`` when ``overwrite`` or nothing is at
    ``dst`` (the conversion then runs as usual).

    Raises
    ------
    DestinationExistsError
        ``dst`` holds something else: a dataset made from other sources or options (the
        message names each difference), one changed since (appended to), an incomplete one,
        one without a record (written before chunkio recorded requests), or no dataset.
    """
    location = None if storage_for(fmt).in_memory else is_local(dst)
    where = display(dst)
    if overwrite or not _holds_something(location or dst, fmt):
        return None
    refuse = f"; pass {OVERWRITE} to replace it"
    try:
        reader = open_reader(location or dst)
        try:
            attrs = reader.attrs()
        finally:
            reader.close()
        layout = DatasetLayout.from_attrs(attrs, where=where)
    except Exception as err:  # not a complete chunkio dataset: never reused
        raise DestinationExistsError(f"{where} already exists ({err}){refuse}") from err
    earlier = Request.from_record(attrs.get(REQUEST_KEY))
    if earlier is None:
        raise DestinationExistsError(
            f"{where} already exists (it holds no record of the sources and options that "
            f"made it, so a rerun cannot tell whether it is up to date){refuse}"
        )
    changes = request.differences(earlier)
    if changes:
        raise DestinationExistsError(
            f"{where} already holds a dataset made otherwise: "
            f"{listing(changes, show=str, sep='; ', brackets=False, limit=4, budget=300)}{refuse}"
        )
    if attrs[REQUEST_KEY].get("layout") != _digest(attrs[ATTR_KEY]):
        raise DestinationExistsError(
            f"{where} was changed after it was made (e.g. appended to){refuse}"
        )
    return layout


def display(dst: Any) -> str:
    """How results and messages name ``dst``: a local path made absolute, else as given."""
    if isinstance(dst, (str, os.PathLike)):
        text = os.fspath(dst)
        return (None if text.startswith("memory://") else is_local(text)) or text
    return repr(dst)


def _holds_something(location: Any, fmt: Format) -> bool:
    if isinstance(location, str) and "://" not in location:
        return os.path.lexists(location)
    return storage_for(fmt).holds_data(location)
