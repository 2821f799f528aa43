"""The converters' option objects: :class:`Output` (how the dataset is stored) and
:class:`Execution` (how the conversion runs), shared by every converter with one set of
defaults; and what travels behind the entry points (:class:`ConversionOptions`,
:class:`Progress`).

The entry points (:func:`~chunkio.convert.write_arrays`, :func:`~chunkio.convert.convert_arrays`,
:func:`~chunkio.convert.images.convert_images`, :func:`~chunkio.convert.volumes.convert_volumes`,
:func:`~chunkio.convert.append_arrays`, :func:`~chunkio.convert.run_conversion`) take the
options a user touches as keywords and the rest as these frozen objects, which check their
values when they are made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import Compression, Format
from ..backends.codec_table import DEFAULT_CODEC
from ..util.deprecated import Moved
from .durability.rerun import Request
from .engine.chunking import DEFAULT_CHUNK_BYTES
from .engine.workers import check_workers

__all__ = [
    "DEFAULT_EXECUTION",
    "DEFAULT_OUTPUT",
    "MOVES",
    "ConversionOptions",
    "Execution",
    "Output",
    "Progress",
    "moved",
]

#: Compression is frozen, so one shared default is safe
_DEFAULT_COMPRESSION = Compression()


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")


def _json_dict(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(extra or {})
    try:
        json.dumps(out)
    except (TypeError, ValueError) as err:
        raise TypeError(f"extra must be JSON-serialisable; got {out!r}: {err}") from err
    return out


@dataclass(frozen=True)
class Output:
    """How a converter stores the dataset it writes: format, chunk size, compression.

    One object for every converter, with one set of defaults, so that
    ``out = Output(compression="zstd")`` can be passed to each of them.

    Parameters
    ----------
    format
        ``"zarr"``, ``"hdf5"`` or ``"memory"``; by default (``None``) from the destination
        (``.zarr``, ``.h5``/``.hdf5``, ``memory://``).
    chunks
        The chunk size, one spelling for every converter: for datasets of samples, the
        samples per chunk (an int); for volumes (:func:`~chunkio.convert_volumes`), the
        spatial chunk shape (an int for a cube, or three), one volume per chunk. ``None``
        (default): chosen by ``chunk_bytes``.
    chunk_bytes
        What the default chunk size aims at: uncompressed bytes per chunk, 1 MiB by default
        (:data:`~chunkio.convert.engine.chunking.DEFAULT_CHUNK_BYTES`), of the largest field's
        samples (stored bytes of encoded images); for volumes, the largest cube of
        power-of-two side holding at most this many float32 voxels, whatever the stored
        dtype (64^3 by default, which a 64^3 patch reads whole). Chunks are the unit of I/O,
        compression and checksumming: about 1 MiB keeps per-chunk overheads small and a
        random batch's reads close to what it needs.
    compression
        A codec name (``"lz4"``, the default; ``"zstd"``, ``"blosc-zstd"``, ``"blosc-lz4"``,
        ``"gzip"``, ``"none"``) or a :class:`~chunkio.Compression` (codec, level, checksum).
    checksum
        With a codec name: guard every chunk with crc32c (Zarr) or fletcher32 (HDF5); on by
        default. A :class:`~chunkio.Compression` carries its own.
    extra
        JSON-serialisable attributes stored with the dataset's layout
        (:func:`~chunkio.write_arrays` and :func:`~chunkio.convert_arrays`; the image and
        volume converters write their own).
    ome_zarr
        Volumes only (:func:`~chunkio.convert_volumes`): ``True`` writes the destination, a
        Zarr v3 group, as one OME-Zarr 0.5 image per volume (scale levels halving each axis
        until a level fits one chunk, the label image, the label index chunkio samples
        from; see :mod:`chunkio.convert.volume.ome`); an int: that many levels at most.
        ``False`` (default): a chunkio volume dataset.

    Examples
    --------
    >>> Output().compression_codec()
    Compression(codec='lz4', level=5, checksum=True)
    >>> Output(chunks=64, compression="zstd", checksum=False).compression_codec()
    Compression(codec='zstd', level=3, checksum=False)
    >>> Output(chunks=(32, 64, 64)).chunks
    (32, 64, 64)
    >>> Output(ome_zarr=3).ome_zarr
    3
    """

    format: Format | None = None
    chunks: int | tuple[int, ...] | None = None
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    compression: str | Compression = DEFAULT_CODEC
    checksum: bool = True
    extra: Mapping[str, Any] | None = None
    ome_zarr: bool | int = False

    def __post_init__(self) -> None:
        ome = self.ome_zarr
        if not isinstance(ome, bool) and (not isinstance(ome, int) or ome < 1):
            raise ValueError(f"ome_zarr must be a bool or a number of levels >= 1; got {ome!r}")
        chunks = self.chunks
        if chunks is not None and not isinstance(chunks, int):
            if isinstance(chunks, str) or not isinstance(chunks, Sequence):
                raise TypeError(
                    f"chunks must be None, an int or a sequence of ints; got {chunks!r}"
                )
            for c in chunks:
                _positive("chunks", c)
            object.__setattr__(self, "chunks", tuple(int(c) for c in chunks))
        elif chunks is not None:
            _positive("chunks", chunks)
        _positive("chunk_bytes", self.chunk_bytes)
        if not isinstance(self.checksum, bool):
            raise TypeError(f"checksum must be a bool; got {self.checksum!r}")
        self.compression_codec()  # an unknown codec or level fails here
        if self.extra is not None:
            object.__setattr__(self, "extra", _json_dict(self.extra))

    def compression_codec(self) -> Compression:
        """The :class:`~chunkio.Compression` every chunk is written with."""
        if isinstance(self.compression, Compression):
            return self.compression
        if not isinstance(self.compression, str):
            raise TypeError(
                f"compression must be a codec name or a Compression; got {self.compression!r}"
            )
        return Compression(codec=self.compression, checksum=self.checksum)

    def samples_per_chunk(self, what: str) -> int | None:
        """``chunks`` as samples per chunk (``None``: the default rule), for a dataset of
        samples; a shape, or OME-Zarr output, is refused, naming the converter ``what``."""
        if self.ome_zarr is not False:
            raise ValueError(
                f"{what}: Output(ome_zarr=...) is for volumes (convert_volumes); got "
                f"ome_zarr={self.ome_zarr!r}"
            )
        if self.chunks is None or isinstance(self.chunks, int):
            return self.chunks
        raise ValueError(
            f"{what}: Output(chunks=...) is the samples per chunk, an int; got {self.chunks!r} "
            "(a chunk shape is for volumes)"
        )

    def no_extra(self, what: str) -> None:
        """Refuse ``extra`` for converters that write their own."""
        if self.extra:
            raise ValueError(
                f"{what} writes its own extra attributes; Output(extra=...) is for "
                "write_arrays and convert_arrays"
            )


@dataclass(frozen=True)
class Execution:
    """How a conversion runs: worker processes (or a dask client), progress, overwriting.

    One object for every converter, with one set of defaults.

    Parameters
    ----------
    workers
        At most this many worker processes (``None``, the default: one per core; volumes at
        most :data:`~chunkio.convert.engine.workers.VOLUME_WORKERS`). A job estimated to take under
        :data:`~chunkio.convert.engine.workers.POOL_MIN_SECONDS` here, or to read under
        :data:`~chunkio.convert.engine.workers.POOL_MIN_BYTES`, runs in this process, since a pool
        costs about a second to start (:mod:`chunkio.convert.engine.workers`). ``1``: always this
        process.
    client
        A ``dask.distributed.Client`` to run the tasks on instead (always used).
    progress
        Show a progress bar on stderr: ``True``, ``False``, or ``None`` (the default): when
        stderr is a terminal, so that scripts and logs stay quiet and an interactive run
        shows its progress (the ``chunkio convert`` command shows it unless
        ``--no-progress``).
    overwrite
        Replace whatever ``dst`` holds (locally: only once the new dataset is complete).
        Without it (the default) a rerun of the same conversion resumes, or returns at once
        when it is complete, and anything else at ``dst`` is refused.

    Examples
    --------
    >>> Execution()
    Execution(workers=None, client=None, progress=None, overwrite=False)
    >>> Execution(workers=1).parallel, Execution(workers=4).parallel
    (False, True)
    """

    workers: int | None = None
    client: Any = None
    progress: bool | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        check_workers(self.workers, optional=True)
        if self.progress is not None and not isinstance(self.progress, bool):
            raise TypeError(f"progress must be None or a bool; got {self.progress!r}")
        if not isinstance(self.overwrite, bool):
            raise TypeError(f"overwrite must be a bool; got {self.overwrite!r}")

    @property
    def parallel(self) -> bool:
        """Whether tasks run outside this process (workers may then write themselves)."""
        return self.client is not None or (self.workers or 1) > 1


#: The defaults, shared (the objects are frozen)
DEFAULT_OUTPUT = Output()
DEFAULT_EXECUTION = Execution()

#: Every converter keyword that moved into :class:`Output` or :class:`Execution`: its new
#: place. Each converter still accepts, for one release, those it took
#: (:func:`chunkio.util.deprecated.moved_keywords`).
MOVES = {
    **{
        old: Moved("output", Output, new)
        for old, new in (
            ("format", "format"),
            ("samples_per_chunk", "chunks"),
            ("chunks", "chunks"),
            ("chunk_bytes", "chunk_bytes"),
            ("compression", "compression"),
            ("checksum", "checksum"),
            ("extra", "extra"),
        )
    },
    **{
        old: Moved("execution", Execution, old)
        for old in ("workers", "client", "progress", "overwrite")
    },
}


def moved(*names: str) -> dict[str, Moved]:
    """The entries of :data:`MOVES` for the old keywords ``names`` of one converter."""
    return {name: MOVES[name] for name in names}


@dataclass(frozen=True)
class Progress:
    """A progress bar of a job: ``total`` units (``unit``), ``done`` of them already;
    ``scale``: counts shown as 1.2k, 3.4M (samples)."""

    total: int
    unit: str
    label: str
    show: bool | None = True
    done: int = 0
    scale: bool = False


@dataclass(frozen=True)
class ConversionOptions:
    """What a conversion behind the entry points is asked, resolved (the chunk size, the
    codec, the worker count), besides the source and ``dst``; see
    :func:`~chunkio.convert.run_conversion`. Checked when made; ``extra`` must be
    JSON-serialisable.
    """

    format: Format | None = None
    samples_per_chunk: int | None = None
    compression: Compression = _DEFAULT_COMPRESSION
    class_names: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    execution: Execution = DEFAULT_EXECUTION
    block_chunks: int = 1
    request: Request | None = None
    pack: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.compression, Compression):
            raise TypeError(f"compression must be a Compression; got {self.compression!r}")
        _positive("block_chunks", self.block_chunks)
        if self.samples_per_chunk is not None:
            _positive("samples_per_chunk", self.samples_per_chunk)
        object.__setattr__(self, "extra", _json_dict(self.extra))
        if self.class_names is not None:
            names: Sequence[Any] = self.class_names
            object.__setattr__(self, "class_names", tuple(str(c) for c in names))
