"""The array converters: :func:`write_arrays` (NumPy, dask, h5py, zarr or scipy CSR arrays
-> a chunkio dataset, in one call) and :func:`convert_arrays` (an existing HDF5 file or Zarr
store -> a chunkio dataset, streamed).

``convert_arrays`` reads anything ``ChunkDataset(src, fields=...)`` reads in place (HDF5, Zarr
v2/v3, sharded or not, local or remote) through chunkio's own readers
(:class:`~chunkio.convert.store_source.StoreSource`) in source-order blocks, so each source
chunk is decoded once. The write-time shuffle of a source larger than memory is external
(:mod:`chunkio.convert.shuffle.spill`): one pass spills the source, grouped by destination
block, into the destination's staging directory; the blocks are then built from the spill.
Everything else is the one conversion pipeline: parallel, resumable, atomic, idempotent on
rerun. (``convert_arrays`` was in ``chunkio.convert.stores``, which still imports it, with a
``DeprecationWarning``, for one release.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..backends import detect_format
from ..format.foreign import FieldSelection, field_arrays
from ..util.deprecated import moved_keywords
from ..util.numeric import ceil_div
from .array_source import ArraySource
from .durability.rerun import Request, compression_option
from .engine.chunking import chunk_samples
from .engine.workers import Work, worker_count
from .options import (
    DEFAULT_EXECUTION,
    DEFAULT_OUTPUT,
    ConversionOptions,
    Execution,
    Output,
    moved,
)
from .pipeline import ConversionResult, convert_source
from .shuffle.order import check_order_options, order_extra, shuffled
from .shuffle.spill import ExternalShuffle
from .store_source import StoreSource, check_apart

__all__ = [
    "ARRAY_MOVES",
    "STORE_BLOCK_BYTES",
    "STORE_READ_BYTES",
    "ArrayWrite",
    "convert_arrays",
    "write_arrays",
]

#: Decoded bytes per block written (about; whole chunks): the unit of work, of resume and of
#: memory, and in a shuffled conversion the bucket that each spill file is grouped by.
STORE_BLOCK_BYTES = 32 << 20
#: Decoded bytes per source block that the shuffle's first pass reads in order and spills
#: (about; whole chunks of the source's costliest field). A worker holds it twice.
STORE_READ_BYTES = 32 << 20


#: write_arrays' and convert_arrays' keywords that moved into the option objects
ARRAY_MOVES = moved(
    "format",
    "samples_per_chunk",
    "chunk_bytes",
    "compression",
    "checksum",
    "extra",
    "workers",
    "client",
    "progress",
    "overwrite",
)


@moved_keywords("write_arrays", ARRAY_MOVES)
def write_arrays(
    dst: Any,
    arrays: Mapping[str, Any],
    *,
    class_names: Sequence[str] | None = None,
    shuffle: bool = True,
    seed: int = 0,
    output: Output | None = None,
    execution: Execution | None = None,
) -> ConversionResult:
    """Write named arrays (same length along axis 0) as a chunkio dataset.

    The keywords that moved into :class:`~chunkio.Output` (``format``,
    ``samples_per_chunk`` -> ``chunks``, ``chunk_bytes``, ``compression``, ``checksum``,
    ``extra``) and :class:`~chunkio.Execution` (``workers``, ``client``, ``progress``,
    ``overwrite``) are still accepted for one release, with a ``DeprecationWarning``.

    Parameters
    ----------
    dst
        A ``.zarr`` directory or ``.h5`` file (written atomically and resumably), a
        ``memory://NAME``, a URL zarr understands or a zarr Store.
    arrays
        Field name -> array: NumPy (or anything :func:`numpy.asarray` takes), dask (computed
        block by block), h5py dataset, zarr array, or a scipy CSR matrix (``csr_matrix`` or
        ``csr_array``: a *sparse* field, stored as its rows' values and columns and read back
        as dense rows, see :mod:`chunkio.format.sparse`; other sparse formats are refused:
        pass ``matrix.tocsr()``). Axis 0 indexes samples.
    class_names
        Names of the label values 0, 1, ... (stored in the layout).
    shuffle, seed
        Store the samples in the order ``perm = np.random.default_rng(seed).permutation(N)``
        (stored row ``i`` holds sample ``perm[i]``), so that every chunk is a random subset,
        and add the field ``source_index`` (= ``perm``). ``shuffle=False`` keeps the order
        (time series, volumes) and adds no field. See :mod:`chunkio.convert.shuffle.order`. Shuffled
        reads of dask, h5py and zarr arrays are random-access: each block of at least
        :data:`~chunkio.convert.array_source.SHUFFLED_BLOCK_BYTES` reads rows from all over
        the source.
    output
        How the dataset is stored (:class:`~chunkio.Output`: format, ``chunks`` = samples
        per chunk, the same for every field, by default ``chunk_bytes`` (1 MiB) of the
        largest field's samples; compression, checksums, ``extra`` attributes).
    execution
        How the conversion runs (:class:`~chunkio.Execution`). Worker processes read,
        compress and write blocks (h5py files are reopened read-only there, so they must not
        be open for writing); by default, up to one per core for inputs of at least
        :data:`~chunkio.convert.engine.workers.POOL_MIN_BYTES`. When every input is a NumPy array
        the write runs in this process whatever ``workers`` says: there is nothing to read,
        and a pool was measured slower (1 GiB on 2 cores, when zarr-python still wrote the
        chunks: 3.2x the time with the arrays pickled to each worker, 1.2x with them in
        shared memory; not measured again since chunkio writes them). Setting
        :data:`chunkio.convert.engine.workers.POOL_MIN_SECONDS` to ``0.0`` forces the pool.

    Returns
    -------
    ConversionResult
        ``unchanged`` when ``dst`` already holds this very dataset: the same arrays (NumPy
        content; h5py files by size and modification time; zarr and dask arrays by their
        metadata and graph) written with the same options. Anything else at ``dst`` raises
        :class:`~chunkio.errors.DestinationExistsError` unless ``Execution(overwrite=True)``.

    Examples
    --------
    >>> import numpy as np
    >>> from chunkio import Output
    >>> r = write_arrays("memory://doc", {"x": np.zeros((10, 3), "f4"), "y": np.arange(10)},
    ...                  output=Output(chunks=4))
    >>> r.num_samples, r.samples_per_chunk, [f.name for f in r.fields]
    (10, 4, ['x', 'y', 'source_index'])
    >>> r = write_arrays("memory://doc2", {"y": np.arange(10)}, shuffle=False)
    >>> [f.name for f in r.fields]
    ['y']
    """
    output = DEFAULT_OUTPUT if output is None else output
    execution = DEFAULT_EXECUTION if execution is None else execution
    check_order_options(shuffle, seed)
    source = ArraySource(arrays)
    asked = output.samples_per_chunk("write_arrays")
    spc = chunk_samples(source.fields, source.num_samples, asked, output.chunk_bytes)
    block_chunks = source.block_chunks(spc, shuffled=shuffle)
    nbytes = source.num_samples * sum(f.sample_nbytes for f in source.fields)
    # NumPy inputs: nothing to read, a pool cannot pay (see chunkio.convert.engine.workers.Work);
    # by default (no workers asked for) a pool only for enough bytes to read
    given = execution.workers is not None
    work = Work(nbytes=None if given else nbytes, reads=not source.in_memory)
    workers = worker_count(execution.workers, client=execution.client, work=lambda: work)
    write = ArrayWrite(output, spc, class_names, shuffle, seed).options(
        source.fingerprint(),
        dst,
        execution=replace(execution, workers=workers),
        block_chunks=block_chunks,
        num_samples=source.num_samples,
    )
    return convert_source(shuffled(source, shuffle=shuffle, seed=seed), dst, write)


@dataclass(frozen=True)
class ArrayWrite:
    """What the caller of an array conversion asked for (what ``write_arrays`` and
    ``convert_arrays`` share), with the samples per chunk resolved, before the workers are
    known."""

    output: Output
    samples_per_chunk: int
    class_names: Sequence[str] | None
    shuffle: bool
    seed: int

    def options(
        self,
        fingerprint: str,
        dst: Any,
        *,
        execution: Execution,
        block_chunks: int,
        num_samples: int,
        more: Mapping[str, Any] | None = None,
    ) -> ConversionOptions:
        """The conversion's options, with the request a rerun compares: the source's
        ``fingerprint`` and every option that shapes the result (``more``: a caller's own,
        such as the arrays a store's fields name); ``num_samples`` picks the order's method
        (:class:`~chunkio.convert.shuffle.order.StoredOrder`)."""
        compression = self.output.compression_codec()
        spc = self.samples_per_chunk
        shuffle, seed, extra = self.shuffle, self.seed, self.output.extra
        options = {
            "format": self.output.format or detect_format(dst),
            "samples_per_chunk": spc,
            "compression": compression_option(compression),
            "shuffle": bool(shuffle),
            "seed": int(seed) if shuffle else None,
            "class_names": None if self.class_names is None else [str(c) for c in self.class_names],
            "extra": dict(extra or {}),
            **dict(more or {}),
        }
        return ConversionOptions(
            format=self.output.format,
            samples_per_chunk=spc,
            compression=compression,
            class_names=None if self.class_names is None else tuple(self.class_names),
            extra=order_extra(extra, shuffle=shuffle, seed=seed, num_samples=num_samples),
            execution=execution,
            block_chunks=block_chunks,
            request=Request("arrays", fingerprint, options),
        )


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
