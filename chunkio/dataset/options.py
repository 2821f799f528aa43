""":class:`chunkio.ChunkDataset`'s option objects: how stored values become a batch's arrays
(:class:`Decoding`) and where a remote dataset keeps the chunks it fetched
(:class:`DownloadCache`). Frozen and validated when made, they pickle with the dataset.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..backends import ReaderOptions
from ..util.deprecated import Moved

__all__ = [
    "DEFAULT_DOWNLOAD_CACHE_BYTES",
    "MOVED_KEYWORDS",
    "Decoding",
    "DownloadCache",
    "checked",
    "reader_options",
]

T = TypeVar("T")

#: bytes a download cache keeps by default
DEFAULT_DOWNLOAD_CACHE_BYTES = 8 << 30


def _count(name: str, value: object, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``: ``TypeError`` for a non-int (a bool
    included), ``ValueError`` below it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Decoding:
    """How :class:`~chunkio.ChunkDataset` turns stored values into a batch's arrays.

    Parameters
    ----------
    threads
        Threads each process decodes encoded images and applies field transforms with (the
        decoders and torch's resampling release the GIL). 1 suits a loader with a worker per
        core; more helps a process that reads on its own (``num_workers=0``).
    channels_last
        Batches of images that chunkio decodes or transforms (encoded fields, the field
        transform's field) keep the ``(B, C, H, W)`` shape, laid out channels last in memory
        as decoders produce them (torch's ``channels_last`` format, which convolutions take
        as it is): no transposing copy per image. ``x.is_contiguous()`` is then false; use
        ``.reshape``, not ``.view``, or ``channels_last=False`` for contiguous batches.
    cf
        Decode CF-encoded arrays (``scale_factor``, ``add_offset``, ``_FillValue``,
        ``missing_value``) to float32 as xarray does, fill values as NaN
        (:mod:`chunkio.format.cf`).

    Examples
    --------
    >>> Decoding(threads=2, cf=True)
    Decoding(threads=2, channels_last=True, cf=True)
    >>> Decoding(threads=0)
    Traceback (most recent call last):
    ...
    ValueError: Decoding(threads) must be an int >= 1, got 0
    """

    threads: int = 1
    channels_last: bool = True
    cf: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "threads", _count("Decoding(threads)", self.threads, 1))
        object.__setattr__(self, "channels_last", bool(self.channels_last))
        object.__setattr__(self, "cf", bool(self.cf))


@dataclass(frozen=True)
class DownloadCache:
    """A local folder where a remote dataset (``s3://``, ``https://``...) keeps the chunks it
    fetched, shared safely by every process that reads it: later epochs then read locally.

    Parameters
    ----------
    folder
        The folder (made when missing).
    max_bytes
        The most bytes it keeps (least recently used dropped first; default 8 GiB).

    Examples
    --------
    >>> DownloadCache("/tmp/chunks", max_bytes=1 << 30).spec()
    ('/tmp/chunks', 1073741824)
    """

    folder: str | os.PathLike[str]
    max_bytes: int = DEFAULT_DOWNLOAD_CACHE_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_bytes", _count("DownloadCache(max_bytes)", self.max_bytes, 0))

    def spec(self) -> tuple[str, int]:
        """``(folder, max_bytes)``, as :class:`~chunkio.backends.ReaderOptions` holds it."""
        return os.fspath(self.folder), self.max_bytes


#: ChunkDataset's keywords that moved into its option objects (accepted one release, with a
#: ``DeprecationWarning`` at the caller's line: :func:`chunkio.util.deprecated.moved_keywords`)
MOVED_KEYWORDS = {
    "decode_threads": Moved("decoding", Decoding, "threads"),
    "channels_last": Moved("decoding", Decoding, "channels_last"),
    "decode_cf": Moved("decoding", Decoding, "cf"),
    "download_cache": Moved("download", DownloadCache, "folder"),
    "download_cache_bytes": Moved("download", DownloadCache, "max_bytes"),
}


def checked(value: T, cls: type[T], name: str) -> T:
    """``value``, an instance of option class ``cls`` (parameter ``name``), or a ``TypeError``
    naming both."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a chunkio.{cls.__name__}; got {value!r}")
    return value


def reader_options(
    storage_options: Mapping[str, Any] | None, trust_codecs: bool, download: DownloadCache | None
) -> ReaderOptions:
    """How every process of a dataset opens its reader, from the dataset's arguments."""
    if download is not None:
        checked(download, DownloadCache, "download")
    return ReaderOptions(
        storage_options=dict(storage_options) if storage_options else None,
        trust_codecs=bool(trust_codecs),
        download_cache=None if download is None else download.spec(),
    )
