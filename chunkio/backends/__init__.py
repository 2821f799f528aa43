"""Storage backends behind one small protocol (:mod:`chunkio.backends.base`).

``open_reader`` / ``open_writer`` pick the backend from the location (:func:`detect_format`):
``memory://NAME`` is the in-memory reference; ``.h5``/``.hdf5``/``.hdf``/``.he5`` paths (or
existing files starting with the HDF5 signature) are HDF5; ``.zarr`` paths, existing Zarr v3
group directories, URLs other than ``memory://`` and zarr store objects are Zarr v3. Any
other path is refused with :class:`UnknownFormatError` rather than guessed: ``out.npz``
silently becoming a Zarr directory is never what was meant.

Modules here may import :mod:`chunkio.util` and :mod:`chunkio.errors`; the registry
opens its implementations (:mod:`chunkio.backends.zarr`, :mod:`chunkio.backends.hdf5`,
:mod:`._memory`) lazily, so the protocol
stays cheap to import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import DatasetNotFoundError, UnknownFormatError
from .base import ArrayInfo, CodecInfo, Compression, Reader, Storage, Writer
from .zarr.sources import is_remote

__all__ = [
    "ACCEPTED_LOCATIONS",
    "ArrayInfo",
    "CodecInfo",
    "Compression",
    "Format",
    "Reader",
    "ReaderOptions",
    "Storage",
    "UnknownFormatError",
    "Writer",
    "detect_format",
    "open_reader",
    "read_over_network",
    "reader_documents",
    "open_writer",
    "storage_for",
]

Format = Literal["zarr", "hdf5", "memory"]

_HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
_ZARR_SUFFIXES = (".zarr",)
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: what :func:`detect_format` accepts, for error messages
ACCEPTED_LOCATIONS = (
    "a '.zarr' directory, an HDF5 file ('.h5', '.hdf5', '.hdf', '.he5'), 'memory://NAME', "
    "a URL zarr understands (s3://, gs://, ...) or a zarr store object"
)


def detect_format(location: Any) -> Format:
    """Which backend serves ``location``; :class:`UnknownFormatError` if none does.

    A path without a known suffix is accepted only where it already holds an HDF5 file or a
    Zarr v3 group; anything else (``out.npz``, ``out.tiff``, a new ``out``) is refused, with
    the accepted suffixes named.

    >>> detect_format("data/train.h5"), detect_format("data/train.zarr")
    ('hdf5', 'zarr')
    >>> detect_format("memory://x"), detect_format("s3://bucket/train")
    ('memory', 'zarr')
    """
    if not isinstance(location, (str, os.PathLike)):
        _refuse_open_object(location)
        return "zarr"  # a zarr Store object
    text = os.fspath(location)
    if text.startswith("memory://"):
        return "memory"
    name = text.rstrip("/").lower()  # "x.zarr/" names the directory x.zarr
    if name.endswith(_HDF5_SUFFIXES):
        return "hdf5"
    if name.endswith(_ZARR_SUFFIXES):
        return "zarr"
    if "://" in text and not text.startswith("file://"):
        return "zarr"  # a remote URL: zarr (fsspec) resolves it
    return _detect_local(text, text.removeprefix("file://"))


def _refuse_open_object(location: Any) -> None:
    """Refuse an open h5py file, group or dataset, zarr group or array, or Python file in
    place of a path, naming the path to pass: a dataset opens its files itself, in each
    process (h5py objects cannot be pickled into workers, and a handle the parent holds open
    while workers fork breaks HDF5 reads)."""
    kind = type(location)
    package = kind.__module__.split(".", 1)[0]
    if package == "h5py":
        path = getattr(getattr(location, "file", None), "filename", None)
        inner = getattr(location, "name", "/")
    elif package == "zarr" and hasattr(location, "store"):  # a group or array, not a store
        root = getattr(location.store, "root", None)
        path = None if root is None else os.path.join(str(root), location.path).rstrip("/")
        inner = "/"
    elif hasattr(location, "read") and isinstance(getattr(location, "name", None), str):
        path, inner = location.name, "/"  # an open Python file
    else:
        return
    what = f"an open {package if package in ('h5py', 'zarr') else 'Python'} {kind.__name__}"
    where = "" if inner in ("/", None) else f" (its array {inner!r} is named with fields)"
    target = f"its path, {path!r}{where}" if path else "the path or URL of its store"
    raise UnknownFormatError(
        f"got {what} where a path belongs; pass {target}: chunkio opens its files itself, "
        "once in each worker process (open handles cannot be sent to workers)"
    )


def _detect_local(text: str, path: str) -> Format:
    """An existing HDF5 file or Zarr v3 group without a telling suffix, or refuse ``text``."""
    found = "nothing exists there to look at"
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            if fh.read(8) == _HDF5_SIGNATURE:
                return "hdf5"
        found = "it is a file, but not an HDF5 file"
    elif os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "zarr.json")):
            return "zarr"
        found = "it is a directory, but not a Zarr v3 group (no zarr.json)"
    suffix = os.path.splitext(path.rstrip("/"))[1]
    what = f"the suffix {suffix!r}" if suffix else "a name without a suffix"
    raise UnknownFormatError(
        f"{text}: cannot tell the storage format from {what} ({found}); chunkio accepts "
        f"{ACCEPTED_LOCATIONS} (a conversion also takes format='zarr' or 'hdf5')"
    )


def _missing_local(location: Any) -> str | None:
    """The path of a local ``location`` that does not exist, else None."""
    if not isinstance(location, (str, os.PathLike)):
        return None
    text = os.fspath(location)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif "://" in text:
        return None
    return None if os.path.exists(text) else text


def open_reader(
    location: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
    download_cache: tuple[str, int] | None = None,
    documents: Mapping[str, Any] | None = None,
    fill_missing: bool = False,
) -> Reader:
    """Open ``location`` read-only with the backend :func:`detect_format` picks.

    ``download_cache``: ``(folder, byte limit)`` where a remote dataset's fetched chunks are
    kept (shared by processes; least recently used dropped first). ``documents``: a remote Zarr
    group's metadata as another reader read it (:func:`reader_documents`), so that this one
    opens without requests, or a local HDF5 file's arrays as another process described them
    (``HDF5Reader.description``: read without h5py while the file is unchanged); ignored
    elsewhere. ``fill_missing``: never-written chunks read as
    the fill value (Zarr's and HDF5's contract, for stores chunkio did not write) instead of
    raising :class:`~chunkio.errors.MissingChunkError`."""
    return ReaderOptions(
        storage_options=storage_options,
        trust_codecs=trust_codecs,
        download_cache=download_cache,
        documents=documents,
        fill_missing=fill_missing,
    ).open(location)


@dataclass(frozen=True)
class ReaderOptions:
    """How a process opens its reader of a dataset (:func:`open_reader`'s keywords, kept
    together: a dataset holds them, pickles them, and hands them to the read core it makes in
    each process). Frozen: change it with :func:`dataclasses.replace`.

    >>> import dataclasses
    >>> dataclasses.replace(ReaderOptions(trust_codecs=True), fill_missing=True)
    ... # doctest: +NORMALIZE_WHITESPACE
    ReaderOptions(storage_options=None, trust_codecs=True, download_cache=None,
                  fill_missing=True)
    """

    storage_options: Mapping[str, Any] | None = None
    trust_codecs: bool = False
    download_cache: tuple[str, int] | None = None
    #: left out of the repr: a file's description holds its chunk index (up to
    #: ``MAX_DESCRIBED_CHUNKS`` chunks of :mod:`chunkio.backends.hdf5.described`)
    documents: Mapping[str, Any] | None = field(default=None, repr=False)
    fill_missing: bool = False

    def open(self, location: Any) -> Reader:
        """:func:`open_reader`: ``location`` read-only, with these options."""
        missing = _missing_local(location)
        if missing is not None:
            raise DatasetNotFoundError(f"no dataset at {missing}")
        fmt = detect_format(location)
        if fmt == "memory":
            from ._memory import MemoryReader

            return MemoryReader(os.fspath(location), trust_codecs=self.trust_codecs)
        if fmt == "hdf5" and is_remote(location):
            from .hdf5.remote import RemoteHDF5Reader

            return RemoteHDF5Reader(
                os.fspath(location),
                storage_options=self.storage_options,
                trust_codecs=self.trust_codecs,
                fill_missing=self.fill_missing,
                download_cache=self.download_cache,
                documents=self.documents,
            )
        if fmt == "hdf5":
            from .hdf5.backend import HDF5Reader

            return HDF5Reader(
                os.fspath(location),
                trust_codecs=self.trust_codecs,
                fill_missing=self.fill_missing,
                documents=self.documents,  # a local file as the parent described it
            )
        from .zarr.backend import ZarrReader

        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        return ZarrReader(location, self)


def read_over_network(location: Any, documents: Mapping[str, Any] | None) -> bool:
    """Whether a dataset at ``location`` opened with these fetched ``documents`` is read over
    a network (its workers are then told the batches ahead, to fetch their chunks early). A
    local HDF5 file hands its description to the workers as documents too, but nothing of it
    is fetched: a local path (or ``file://``) is never read over a network.

    >>> read_over_network("s3://bucket/cells.h5ad", {}), read_over_network("/d/cells.h5ad", {})
    (True, False)
    """
    if documents is None:
        return False
    return not isinstance(location, (str, os.PathLike)) or is_remote(os.fspath(location))


def reader_documents(reader: Reader) -> dict[str, Any] | None:
    """The metadata documents ``reader`` fetched over a network (or a local HDF5 file's
    description), for ``open_reader(..., documents=)`` in another process; ``None`` when
    there is nothing to hand over."""
    documents = getattr(reader, "documents", None)
    return None if documents is None else documents()


def open_writer(
    location: Any, *, format: Format | None = None, storage_options: Mapping[str, Any] | None = None
) -> Writer:
    """Open (creating if needed) ``location`` for writing."""
    fmt = format or detect_format(location)
    if fmt == "memory":
        from ._memory import MemoryWriter

        return MemoryWriter(os.fspath(location))
    if fmt == "hdf5":
        from .hdf5.write import HDF5Writer

        return HDF5Writer(os.fspath(location))
    from .zarr.backend import ZarrWriter

    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    return ZarrWriter(location, storage_options=storage_options)


def storage_for(format: Format) -> Storage:
    """The capabilities and file steps of ``format`` (see :class:`~.base.Storage`)."""
    from ._storage import HDF5Storage, MemoryStorage, ZarrStorage

    storages: dict[str, Storage] = {
        "zarr": ZarrStorage(),
        "hdf5": HDF5Storage(),
        "memory": MemoryStorage(),
    }
    try:
        return storages[format]
    except KeyError:
        raise ValueError(f"format must be 'zarr', 'hdf5' or 'memory'; got {format!r}") from None
