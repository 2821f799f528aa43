"""The per-process read core: one backend reader, and the reads of each field, by kind.

A :class:`ReadCore` belongs to exactly one process. It opens the backend handle
(:class:`~chunkio.backends.Reader`), holds the counters and the decode threads, and maps each
field to the reader of its kind (:data:`FIELD_KINDS`: adding a kind is one module and one
entry there). Both datasets use it: :class:`chunkio.ChunkDataset` for samples and
:class:`chunkio.patches.PatchDataset` for patches. Each makes one lazily in each process and
never pickles it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Reader, ReaderOptions
from ..errors import TransformError
from ..format.grid import SampleGrid
from ..format.layout import DatasetLayout, FieldInfo
from ..transforms.sample import FieldTransform, stored_output_shape
from ..util.handles import PerProcessHandle
from ..util.messages import listing
from .base import CFDecodedReads, DecodeThreads, FieldReads, ReadContext, ReadRequest, ReadStats
from .dense import ColumnReads, dense_reads
from .encoded import EncodedReads
from .patches import PatchReads
from .planning import normalize_indices
from .ragged import RaggedReads
from .sparse import SparseReads
from .windows import WindowReads, check_field_transform

__all__ = ["FIELD_KINDS", "TRANSFORMABLE_KINDS", "ReadCore", "ReadCoreDataset", "check_transform"]

#: field kind -> the reader of one such field, made once per process on the field's first read
FIELD_KINDS: dict[str, Callable[[ReadContext, FieldInfo], FieldReads]] = {
    "dense": dense_reads,
    "ragged": RaggedReads,
    "encoded": EncodedReads,
    "window": WindowReads,
    "sparse": SparseReads,
    "column": ColumnReads,
}

#: field kinds whose readers apply a field transform to each sample (windows, sparse rows and
#: CF-decoded fields refuse one when the dataset is made: :func:`check_transform`)
TRANSFORMABLE_KINDS = ("dense", "column", "ragged", "encoded")


def check_transform(
    transform: FieldTransform, layout: DatasetLayout, fields: Sequence[str], reader: Reader
) -> None:
    """Raise a :class:`~chunkio.errors.TransformError` unless ``transform`` applies to every
    sample of its field: the field is one of ``fields`` (else the transform would never run),
    of a kind that takes transforms, of the dtype the transform takes (its optional
    ``input_dtype``), and its samples' shapes (a dense field's, or the first stored sample's
    of a field of several sizes: ``reader`` reads it) fit ``output_shape``. A transform whose
    ``fixed_size`` is ``None`` (an output size that follows the input's) cannot make one batch
    of images of several sizes, so it is refused there too. Called when a dataset is made,
    before any worker starts: the reads never skip a transform in silence."""
    where, name = str(reader.location), transform.field
    check_field_transform(layout, name, where)  # a window: its own message
    about = f"{where}: the transform of field {name!r} ({transform!r})"
    if name not in fields:
        raise TransformError(
            f"{about} would never run: the dataset reads fields {listing(fields)}; select "
            f"{name!r} too, or give the transform the field it is for"
        )
    info = layout.field(name, where=where)
    if info.cf is not None or info.kind not in TRANSFORMABLE_KINDS:
        kind = "CF-decoded (Decoding(cf=True))" if info.cf is not None else info.kind
        raise TransformError(
            f"{about} cannot apply: the field is {kind}; field transforms apply to the samples "
            f"of {', '.join(TRANSFORMABLE_KINDS)} fields (images). Normalise numbers with "
            "chunkio.Normalize, or transform the batches yourself"
        )
    want = getattr(transform, "input_dtype", None)
    if want is not None and info.dtype != np.dtype(want):
        raise TransformError(
            f"{about} takes {np.dtype(want)} images; field {name!r} is {info.dtype}. Convert "
            f"the images to {np.dtype(want)}, or transform the batches yourself"
        )
    stored = info.sample_shape
    if stored is None:
        if getattr(transform, "fixed_size", ()) is None:
            raise TransformError(
                f"{about} makes images of each input's size, and field {name!r} holds images "
                "of several sizes: a batch needs one. End the Compose with a fixed-size op "
                "(RandomResizedCrop(size), CenterCrop(size) or Resize((height, width))), or "
                "read the field without a transform (a list of images)"
            )
        stored = _first_stored_shape(reader, info)
        if stored is None:
            return  # no samples
    try:
        stored_output_shape(transform, tuple(stored))
    except (TypeError, ValueError) as err:
        raise TransformError(
            f"{about} cannot apply to its samples ({info.kind}, {info.dtype}, shape "
            f"{tuple(stored)}): {err}"
        ) from err


def _first_stored_shape(reader: Reader, info: FieldInfo) -> tuple[int, ...] | None:
    """The stored shape of sample 0 of a ragged or encoded field (its shapes array's first
    row, read from its first chunk), or ``None`` for a field with no samples."""
    name = info.roles.shapes
    found = reader.array_info(name)
    if not int(found.shape[0]):
        return None
    first = np.empty(
        (min(int(found.chunks[0]), int(found.shape[0])), *found.shape[1:]), found.dtype
    )
    reader.read_into(name, [(0, len(first))], first)
    return tuple(int(s) for s in first[0])


class ReadCore:
    """Serves batches of one dataset in the current process.

    ``cache_chunks``: sample-axis chunks each dense field's cache keeps (at least a batch's);
    ``cache_bytes``: decoded bytes the patch caches keep besides a batch's chunks; ``held``:
    shared-memory segments of stacked window variables (:attr:`ReadContext.held`).
    """

    def __init__(
        self,
        location: Any,
        layout: DatasetLayout,
        *,
        cache_chunks: int = 0,
        cache_bytes: int = 0,
        preload_bytes: int = 0,
        decode_threads: int = 1,
        reader: ReaderOptions = ReaderOptions(),  # noqa: B008 - a frozen value object
        held: Mapping[tuple[str, ...], str] | None = None,
    ) -> None:
        self.pid = os.getpid()
        self.threads = DecodeThreads(decode_threads)
        self.layout = layout
        self.reader = reader.open(location)
        self.stats = ReadStats(clock=self.reader.clock)
        self.ctx = ReadContext(
            reader=self.reader,
            layout=layout,
            grid=SampleGrid(layout.num_samples, layout.samples_per_chunk),
            stats=self.stats,
            cache_chunks=cache_chunks,
            preload_bytes=preload_bytes,
            map_rows=self.threads.map,
            held=held or {},
        )
        self.cache_bytes = cache_bytes
        self._fields: dict[str, FieldReads] = {}
        self._patches: PatchReads | None = None

    def close(self) -> None:
        self.threads.close()
        self.reader.close()

    def field(self, name: str) -> FieldReads:
        """The reader of field ``name`` in this process (made on first use)."""
        found = self._fields.get(name)
        if found is None:
            info = self.layout.field(name, where=self.reader.location)
            reads = FIELD_KINDS[info.kind]
            if info.cf is not None:  # decode_cf: read as stored, then decoded
                found = self._fields[name] = CFDecodedReads(self.ctx, info, reads)
            else:
                found = self._fields[name] = reads(self.ctx, info)
        return found

    def read(
        self,
        fields: Sequence[str],
        indices: Sequence[int] | npt.ArrayLike,
        out: Mapping[str, npt.NDArray[Any]] | None = None,
        *,
        once: bool = False,
        transform: FieldTransform | None = None,
        epoch: int = 0,
        first: int = 0,
    ) -> dict[str, Any]:
        """Read ``indices`` of each field; dense fields as one array, ragged as a list (as one
        array when transformed), encoded fields decoded (as one array when their samples share
        a shape or are transformed).

        ``once``: no later read asks for these samples again (a loader's epoch order), so a
        chunk the batch uses whole, in order, is decoded straight into the output and not
        kept. ``transform`` (of field ``transform.field``) is applied to each sample, keyed
        by ``epoch`` and its index (plus ``first``: this store's first sample's index in a
        dataset of many files), on its way into the output.
        """
        try:
            idx = normalize_indices(indices, self.layout.num_samples)
        except IndexError as err:  # name the dataset, as every other read error does
            raise IndexError(f"{self.reader.location}: {err}") from err
        result: dict[str, Any] = {}
        plain = ReadRequest(once=once, epoch=epoch, first=first)  # fields not transformed
        for name in fields:
            how = plain
            if transform is not None and transform.field == name:
                how = ReadRequest(once=once, transform=transform, epoch=epoch, first=first)
            result[name] = self.field(name).read(idx, None if out is None else out.get(name), how)
        self.stats.samples += len(idx)
        self.stats.batches += 1
        return result

    def encoded(
        self, name: str, indices: Sequence[int] | npt.ArrayLike
    ) -> tuple[list[npt.NDArray[np.uint8]], npt.NDArray[np.int64]]:
        """The encoded bytes and stored shapes of samples ``indices`` of encoded field
        ``name``, undecoded (see :meth:`chunkio.read.encoded.EncodedReads.encoded`)."""
        idx = normalize_indices(indices, self.layout.num_samples)
        reader = self.field(name)
        encoded = getattr(reader, "encoded", None)
        if encoded is None:
            kind = self.layout.field(name).kind
            raise TypeError(
                f"{self.reader.location}: field {name!r} is {kind}, not an encoded image field"
            )
        data, shapes = encoded(idx)
        return data, shapes

    @property
    def prefetches(self) -> bool:
        """Whether :meth:`prefetch` does anything (remote readers fetch ahead)."""
        return self.reader.prefetches

    def prefetch(self, fields: Sequence[str], indices: Sequence[int] | npt.ArrayLike) -> None:
        """Start fetching the chunks a later read of ``indices`` needs and this process does
        not hold (remote datasets fetch them in the background; local ones ignore it)."""
        if not self.prefetches:
            return  # a local dataset: nothing to fetch ahead (ring workers ask every batch)
        idx = normalize_indices(indices, self.layout.num_samples)
        for name in fields:
            self.field(name).prefetch(idx)

    @property
    def patches(self) -> PatchReads:
        """The patch reads of this process (made on first use)."""
        if self._patches is None:
            self._patches = PatchReads(self.ctx, self.cache_bytes)
        return self._patches


class ReadCoreDataset(PerProcessHandle[ReadCore]):
    """Mixin of :class:`chunkio.patches.PatchDataset`: it reads through this process's
    :class:`ReadCore` (:class:`chunkio.ChunkDataset` holds its own)."""

    def read_stats(self) -> ReadStats:
        """Read counters of *this* process (workers keep their own)."""
        return self._handle().stats
