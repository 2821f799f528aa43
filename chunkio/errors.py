"""Typed errors for chunkio.

Every error derives from :class:`ChunkioError` and, where one fits, from the matching
builtin too, so ordinary ``except KeyError`` / ``except FileNotFoundError`` clauses keep
working. Messages say what was expected, what arrived, and where (file, field, chunk,
sample).

The tree::

    ChunkioError
    ├── DatasetNotFoundError        (FileNotFoundError)  no dataset at the path
    ├── FormatError                 (ValueError)         the on-disk layout is not valid
    │   ├── IncompleteDatasetError                       completion marker missing
    │   ├── UnsupportedVersionError                      format version not understood
    │   ├── UnknownFormatError                           a location names no known format
    │   └── MissingFieldError       (KeyError)           a declared/requested field is absent
    ├── UnsafeInputError            (ValueError)         untrusted codec, link, filter or name
    ├── WindowError                 (ValueError)         windows, anchors or stats that do not fit
    ├── TransformError              (ValueError)         a transform that cannot apply to its field
    ├── ChunkReadError              (OSError)            a chunk could not be read or decoded
    │   ├── CorruptChunkError                            checksum mismatch / undecodable bytes
    │   ├── MissingChunkError                            the chunk is absent from the store
    │   └── RemoteError                                  an object store / HTTP read failed
    │       ├── RemoteNotFoundError (FileNotFoundError)  no such bucket, key or url
    │       ├── RemoteAccessError   (PermissionError)    403, invalid or expired credentials
    │       └── RemoteTimeoutError  (TimeoutError)       no answer in time, after retries
    ├── ConversionError             (RuntimeError)       a conversion could not finish
    │   ├── SourceError             (ValueError)         a source file is unreadable or invalid
    │   └── DestinationBusyError    (FileExistsError)    another writer holds the destination
    ├── DestinationExistsError      (FileExistsError)    refusing to overwrite existing data
    ├── LoaderError                 (RuntimeError)       a loader worker died, failed or timed out
    ├── IncompatibleStateError      (ValueError)         a resume state from another order
    └── OptionalDependencyError     (ImportError)        an optional package is not installed
"""

from __future__ import annotations

__all__ = [
    "ChunkReadError",
    "ChunkioError",
    "ConversionError",
    "CorruptChunkError",
    "DatasetNotFoundError",
    "DestinationBusyError",
    "DestinationExistsError",
    "FormatError",
    "IncompatibleStateError",
    "IncompleteDatasetError",
    "LoaderError",
    "MissingChunkError",
    "MissingFieldError",
    "OptionalDependencyError",
    "RemoteAccessError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteTimeoutError",
    "SourceError",
    "TransformError",
    "UnknownFormatError",
    "UnsafeInputError",
    "UnsupportedVersionError",
    "WindowError",
]


class ChunkioError(Exception):
    """Root of every error chunkio raises on purpose."""


class DatasetNotFoundError(ChunkioError, FileNotFoundError):
    """No chunkio dataset exists at the given path."""


class FormatError(ChunkioError, ValueError):
    """The dataset's on-disk layout does not follow the chunkio format."""


class IncompleteDatasetError(FormatError):
    """The dataset has no completion marker: a conversion is running or was interrupted."""


class UnsupportedVersionError(FormatError):
    """The dataset declares a format version this chunkio does not understand."""


class UnknownFormatError(FormatError):
    """A location that names no storage format chunkio knows (e.g. ``out.npz``, ``out``)."""


class MissingFieldError(FormatError, KeyError):
    """A field is declared or requested but its array is absent (a reader raises it where an
    array path names nothing; a group there is a plain :class:`FormatError`)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnsafeInputError(ChunkioError, ValueError):
    """Input that could execute code or escape the dataset root was refused."""


class WindowError(ChunkioError, ValueError):
    """Fields with steps (:class:`chunkio.Field`), anchors, a valid-mask or statistics that do
    not fit the dataset: the message names the field, the arrays and the values."""


class TransformError(ChunkioError, ValueError):
    """A dataset's transform that cannot apply to its field (a kind, shape, dtype or channel
    count it does not take, a field not selected): raised when the dataset is made, naming the
    field, the transform and what would work, never skipped in silence."""


class ChunkReadError(ChunkioError, OSError):
    """A chunk could not be read."""


class CorruptChunkError(ChunkReadError):
    """A chunk's bytes fail their checksum or cannot be decoded."""


class MissingChunkError(ChunkReadError):
    """A chunk that a complete dataset must hold is absent from the store."""


class RemoteError(ChunkReadError):
    """A remote (object store / HTTP) read failed; the message names the url."""


class RemoteNotFoundError(RemoteError, FileNotFoundError):
    """The bucket, key or url does not exist (404, NoSuchKey, NoSuchBucket)."""


class RemoteAccessError(RemoteError, PermissionError):
    """Access was refused (403, invalid / expired credentials)."""


class RemoteTimeoutError(RemoteError, TimeoutError):
    """The store did not answer in time, after the retries."""


class ConversionError(ChunkioError, RuntimeError):
    """A conversion could not finish."""


class SourceError(ConversionError, ValueError):
    """A source file cannot be decoded or does not match what the conversion expects."""


class DestinationBusyError(ConversionError, FileExistsError):
    """Another process is converting into the same destination."""


class DestinationExistsError(ChunkioError, FileExistsError):
    """The destination already holds data and overwriting was not requested."""


class LoaderError(ChunkioError, RuntimeError):
    """A loader worker died, raised, or did not answer in time."""


class IncompatibleStateError(ChunkioError, ValueError):
    """A sampler or loader state dict that does not belong to this order (data, batch, pool)."""


class OptionalDependencyError(ChunkioError, ImportError):
    """An optional dependency is needed for this feature but is not installed."""


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the calling function name the first
    frame outside chunkio: the user's line, however deep inside chunkio the warning is made
    (``warnings.warn(..., skip_file_prefixes=...)`` does this from Python 3.12 on).

    Frames are told by their module's name, not their file: a dataclass's generated
    ``__init__`` has no file of its own but runs in its module's globals."""
    import sys

    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and _inside(frame.f_globals.get("__name__")):
        frame = frame.f_back
        level += 1
    return level


def _inside(module: object) -> bool:
    return isinstance(module, str) and (module == "chunkio" or module.startswith("chunkio."))
