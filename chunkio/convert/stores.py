"""``convert_arrays``: an existing HDF5 file or Zarr store -> a chunkio dataset, streamed.

The source is anything ``ChunkDataset(src, fields=...)`` reads in place (HDF5, Zarr v2/v3,
sharded or not, local or remote), read through chunkio's own readers
(:class:`~chunkio.convert.store_source.StoreSource`) in source-order blocks, so each source
chunk is decoded once. The write-time shuffle of a source larger than memory is external
(:mod:`chunkio.convert.shuffle.spill`): one pass spills the source, grouped by destination block,
into
the destination's staging directory; the blocks are then built from the spill. Everything
else is the one conversion pipeline: parallel, resumable, atomic, idempotent on rerun.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..format.foreign import FieldSelection, field_arrays
from ..util.deprecated import moved_keywords
from ..util.numeric import ceil_div
from .arrays import ARRAY_MOVES, ArrayWrite
from .engine.chunking import chunk_samples
from .engine.workers import Work, worker_count
from .options import DEFAULT_EXECUTION, DEFAULT_OUTPUT, Execution, Output
from .pipeline import ConversionResult, convert_source
from .shuffle.order import check_order_options
from .shuffle.spill import ExternalShuffle
from .store_source import StoreSource, check_apart

__all__ = ["STORE_BLOCK_BYTES", "STORE_READ_BYTES", "convert_arrays"]

#: Decoded bytes per block written (about; whole chunks): the unit of work, of resume and of
#: memory, and in a shuffled conversion the bucket that each spill file is grouped by.
STORE_BLOCK_BYTES = 32 << 20
#: Decoded bytes per source block that the shuffle's first pass reads in order and spills
#: (about; whole chunks of the source's costliest field). A worker holds it twice.
STORE_READ_BYTES = 32 << 20


@moved_keywords("convert_arrays", ARRAY_MOVES)
def convert_arrays(
    src: Any,
    dst: Any,
    *,
    fields: FieldSelection,
    storage_options: Mapping[str, Any] | None = None,
    trust_codecs: bool = False,
    class_names: Sequence[str] | None = None,
    shuffle: bool = True,
    seed: int = 0,
    output: Output | None = None,
    execution: Execution | None = None,
) -> ConversionResult:
    """Rewrite the arrays ``fields`` names in an existing HDF5 file or Zarr store as a
    chunkio dataset, streaming: a bounded number of blocks in memory, whatever the source's
    size.

    Memory per process is ``O(blocks in flight + chunks)``, never ``O(rows)``: a block is
    about :data:`STORE_BLOCK_BYTES` of decoded samples, this process keeps at most two per
    worker in flight and each worker holds one at a time (shuffled: a source block of about
    :data:`STORE_READ_BYTES` twice, or a destination block and one spill piece, each with 8
    bytes a row of that block); per chunk a few numbers (the manifest, the block list). The
    stored order costs no memory per row above
    :data:`~chunkio.convert.shuffle.order.WHOLE_ORDER_MAX` samples and at most 64 MiB below
    it. The shuffle's spill is on disk: the source's decoded size. A sparse field's row
    offsets (8 bytes a row, as stored) are the exception: read whole to plan where rows go.

    The keywords that moved into :class:`~chunkio.Output` and :class:`~chunkio.Execution`
    are accepted for one release with a ``DeprecationWarning``, as for
    :func:`~chunkio.convert.write_arrays`.

    Parameters
    ----------
    src
        An HDF5 file, a Zarr v2 or v3 store (sharded or not), local or a URL (with
        ``storage_options``), or a list of them, concatenated along the sample axis: what
        ``ChunkDataset(src, fields=...)`` reads (an ``.h5ad`` file or AnnData Zarr store
        included). Never written. A field naming a CSR matrix (AnnData's ``X``) is stored
        sparse, never densified (read back as dense rows, or CSR batches); a categorical
        ``obs`` column is stored as its codes with its categories (across a list of files:
        their union, each file's codes remapped), so ``ChunkDataset(dst).categories(name)``
        lists them.
    dst
        As for :func:`~chunkio.convert.write_arrays`; not ``src``, nor inside it.
    fields
        Field name -> array path (``{"image": "train/images", "label": "train/labels"}``),
        or a list of array paths (each field named by the path's last part). Axis 0 of every
        array is the sample axis; all must have the same length.
    storage_options, trust_codecs
        As for :class:`~chunkio.ChunkDataset`, for reading ``src``.
    class_names, shuffle, seed, output
        As for :func:`~chunkio.convert.write_arrays`. ``shuffle`` stores source sample
        ``perm[i]`` at row ``i`` and adds the field ``source_index``; it costs a first pass
        that spills the source (its decoded size, on the destination's disk, in its staging
        directory) and is removed at the end (:mod:`chunkio.convert.shuffle.spill`).
    execution
        :class:`~chunkio.Execution`: processes that read, spill and write blocks (by
        default every core; one process when the source is under
        :data:`~chunkio.convert.engine.workers.POOL_MIN_BYTES`), a client, progress, overwriting.

    Returns
    -------
    ConversionResult
        ``unchanged`` when ``dst`` already holds this conversion, complete. An interrupted
        conversion (killed, disk full) resumes when called again: spilled source blocks and
        written blocks are kept.

    Examples
    --------
    >>> import h5py, numpy as np, os, tempfile
    >>> from chunkio import Output
    >>> folder = tempfile.mkdtemp()
    >>> with h5py.File(os.path.join(folder, "user.h5"), "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(40).reshape(20, 2), chunks=(4, 2))
    ...     _ = f.create_dataset("y", data=np.arange(20))
    >>> r = convert_arrays(os.path.join(folder, "user.h5"), os.path.join(folder, "out.zarr"),
    ...                    fields={"x": "x", "y": "y"}, output=Output(chunks=8))
    >>> r.num_samples, [f.name for f in r.fields]
    (20, ['x', 'y', 'source_index'])
    """
    output = DEFAULT_OUTPUT if output is None else output
    execution = DEFAULT_EXECUTION if execution is None else execution
    check_order_options(shuffle, seed)
    for one in src if isinstance(src, list | tuple) else [src]:
        check_apart(one, dst)
    source = StoreSource(src, fields, storage_options=storage_options, trust_codecs=trust_codecs)
    asked = output.samples_per_chunk("convert_arrays")
    spc = chunk_samples(source.fields, source.num_samples, asked, output.chunk_bytes)
    chunk_nbytes = max(1, spc * sum(f.sample_nbytes for f in source.fields))
    block_chunks = max(1, STORE_BLOCK_BYTES // chunk_nbytes)
    nbytes = source.num_samples * sum(f.sample_nbytes for f in source.fields)
    workers = worker_count(
        execution.workers, client=execution.client, work=lambda: Work(nbytes=nbytes)
    )
    write = ArrayWrite(output, spc, class_names, shuffle, seed).options(
        source.fingerprint(),
        dst,
        execution=replace(execution, workers=workers),
        block_chunks=block_chunks,
        num_samples=source.num_samples,
        more={"fields": field_arrays(fields, str(source.location))},
    )
    if not shuffle:
        return convert_source(source, dst, write)
    row = max(1, sum(f.sample_nbytes for f in source.fields))
    read_samples = source.read_chunk * max(1, ceil_div(STORE_READ_BYTES // row, source.read_chunk))
    spill = ExternalShuffle(
        source, seed, read_samples=read_samples, spill_samples=block_chunks * max(1, spc)
    )
    return convert_source(spill, dst, write)
