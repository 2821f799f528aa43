"""Stitch per-patch predictions back into full volumes, averaging where patches overlap.

Streaming: the output is accumulated per output chunk - a sum and a count per voxel - and
each chunk is written (sum / count) and dropped from memory as soon as the last patch
touching it has arrived, so volumes larger than memory work. With a grid in storage order
only about one slab of patches' chunks is in memory at a time. Every write covers whole
output chunks, so a chunk is written exactly once.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..backends import Compression, Writer, detect_format, open_writer, storage_for
from ..convert.durability.staging import publish
from ..convert.engine.core import drive
from ..convert.options import Execution, Progress
from ..errors import DestinationExistsError
from ..format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, FieldInfo
from ..format.volume_layout import VOLUMES_KEY, VolumeSet
from ..read.planning import piece_slices, plan_patch_reads
from ..util.numeric import IntArray
from .samplers import PatchSampler

__all__ = ["stitch"]

Key = tuple[int, ...]
_DEFAULT_COMPRESSION = Compression()


def stitch(
    predictions: Iterable[Any],
    dst: Any,
    sampler: PatchSampler,
    *,
    dtype: npt.DTypeLike = np.float32,
    field: str = "prediction",
    like: Any = None,
    compression: Compression = _DEFAULT_COMPRESSION,
    overwrite: bool = False,
) -> Any:
    """Write per-patch predictions into full-size volumes, averaging overlaps.

    Parameters
    ----------
    predictions
        Batches ``(volume, origin, prediction)``: ``volume`` ``(B,)``, ``origin`` ``(B,
        ndim)`` (as a :class:`~chunkio.patches.PatchDataset` batch gives them) and
        ``prediction`` ``(B, [C,] *patch_size)``; NumPy arrays or tensors. Every patch of
        ``sampler`` must come exactly once, in any order.
    dst
        A path (a new ``.zarr``/``.h5`` volume dataset with field ``field``, chunked like the
        source), an array ``(N, [C,] *spatial)`` (NumPy, zarr, h5py) or a sequence of one
        array ``([C,] *spatial)`` per volume.
    sampler
        The bound sampler that produced the patches (usually a
        :class:`~chunkio.patches.GridSampler`, ``world_size=1``).
    dtype, compression, overwrite
        Of the new dataset when ``dst`` is a path.
    like
        A :class:`~chunkio.patches.PatchDataset` whose volume metadata (affines, spacing,
        source files) the new dataset copies.

    Returns
    -------
    The path or array(s) written. Voxels no patch covers are 0.
    """
    if sampler.world_size != 1:
        raise ValueError(
            f"stitch needs every patch: use a sampler with world_size=1 (got "
            f"{sampler.world_size}); ranks would otherwise write the same chunks"
        )
    volumes, size = sampler.volumes, sampler.patch_size
    keys = sampler.keys()
    first = None
    stream = iter(predictions)
    for batch in stream:
        first = _batch(batch, volumes.ndim)
        break
    if first is None:
        raise ValueError("stitch got no predictions")
    pred = first[1]
    channels = pred.shape[1] if pred.ndim == volumes.ndim + 2 else None
    target = _Target.open(dst, volumes, channels, dtype, field, like, compression, overwrite)
    try:
        acc = _Accumulator(volumes, size, keys, target, pred.shape[1 : pred.ndim - volumes.ndim])
        # Each output chunk is a task of the conversion engine, run here as soon as its last
        # patch arrived; the engine has the target write it.
        drive(
            _Averaged(),
            _chunks(acc, first, stream, volumes.ndim),
            execution=Execution(workers=1),
            sink=_Written(target),
            progress=Progress(0, "chunk", "stitch", show=False),
            destination=None,  # errors as they are
            resumable=False,
        )
    except BaseException:
        target.abort()
        raise
    return target.close()


@dataclass(frozen=True)
class _Chunk:
    """One output chunk, complete: ``values`` for ``lo .. hi`` of volume ``volume``."""

    volume: int
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    values: npt.NDArray[Any]

    def describe(self) -> str:
        return f"volume {self.volume}, voxels {self.lo}..{self.hi}"


class _Averaged:
    """The engine's job: a chunk is done once averaged (by :class:`_Accumulator`)."""

    def run(self, chunk: _Chunk) -> npt.NDArray[Any]:
        return chunk.values

    def written(self, result: Any) -> bool:
        return False


@dataclass(frozen=True)
class _Written:
    """The engine's task sink: each finished chunk into the target."""

    target: _Target

    def write(self, chunk: _Chunk, values: npt.NDArray[Any]) -> None:
        self.target.write(chunk.volume, chunk.lo, chunk.hi, values)

    def done(self, chunk: _Chunk, values: npt.NDArray[Any]) -> int:
        return 1


def _chunks(
    acc: _Accumulator,
    first: tuple[npt.NDArray[np.int64], npt.NDArray[Any]],
    stream: Iterator[Any],
    ndim: int,
) -> Iterator[_Chunk]:
    """The output chunks, each as soon as its last patch has arrived, then the chunks no patch
    touches."""
    yield from acc.add(*first)
    for batch in stream:
        yield from acc.add(*_batch(batch, ndim))
    yield from acc.rest()


def _numpy(x: Any) -> npt.NDArray[Any]:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _batch(batch: Any, ndim: int) -> tuple[IntArray, npt.NDArray[Any]]:
    if isinstance(batch, Mapping):
        batch = (batch["volume"], batch["origin"], batch["prediction"])
    volume, origin, pred = (_numpy(x) for x in batch)
    keys = np.column_stack([volume.reshape(-1), origin.reshape(-1, ndim)]).astype(np.int64)
    if pred.ndim in (ndim, ndim + 1) and len(keys) == 1 and pred.shape[0] != 1:
        pred = pred[None]  # one unbatched patch
    if len(pred) != len(keys):
        raise ValueError(f"got {len(keys)} patch keys but {len(pred)} predictions in a batch")
    return keys, pred


class _Accumulator:
    """Sum and count per output chunk; writes a chunk once all its patches have arrived."""

    def __init__(
        self,
        volumes: VolumeSet,
        size: tuple[int, ...],
        keys: IntArray,
        target: Any,
        lead: tuple[int, ...],
    ) -> None:
        self.out = VolumeSet(volumes.shapes, target.chunks, volumes.stacked)
        self.lead = lead  # channel dims of a prediction
        self.size, self.target = size, target
        plan = plan_patch_reads(keys, size, self.out)
        self.expected = {
            tuple(c): int(n)
            for c, n in zip(
                plan.chunks.tolist(), np.bincount(plan.pieces[:, 1]).tolist(), strict=False
            )
        }
        self.known = {tuple(k) for k in keys.tolist()}
        self.seen: set[Key] = set()
        self.sums: dict[Key, npt.NDArray[Any]] = {}
        self.counts: dict[Key, npt.NDArray[np.int32]] = {}
        self.received: dict[Key, int] = {}

    def add(self, keys: IntArray, pred: npt.NDArray[Any]) -> list[_Chunk]:
        """Add a batch of predictions; returns the chunks it completed."""
        for key in map(tuple, keys.tolist()):
            if key not in self.known or key in self.seen:
                why = "is not one of the sampler's patches" if key not in self.known else "twice"
                raise ValueError(f"prediction for patch {key} {why}")
            self.seen.add(key)
        plan = plan_patch_reads(keys, self.size, self.out)
        complete = []
        for piece in plan.pieces.tolist():
            b, row, src, dst = piece_slices(piece, self.out.ndim)
            chunk = tuple(plan.chunks[row].tolist())
            total, count = self._buffers(chunk, pred)
            into: tuple[Any, ...] = (Ellipsis, *src)
            take: tuple[Any, ...] = (b, Ellipsis, *dst)
            total[into] += pred[take]
            count[src] += 1
            self.received[chunk] = self.received.get(chunk, 0) + 1
            if self.received[chunk] == self.expected[chunk]:
                complete.append(self._averaged(chunk))
        return complete

    def _buffers(
        self, chunk: Key, pred: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
        if chunk not in self.sums:
            lo, hi = self._box(chunk)
            box = tuple(b - a for a, b in zip(lo, hi, strict=True))
            acc = np.float64 if pred.dtype == np.float64 else np.float32
            self.sums[chunk] = np.zeros((*self.lead, *box), acc)
            self.counts[chunk] = np.zeros(box, np.int32)
        return self.sums[chunk], self.counts[chunk]

    def _box(self, chunk: Key) -> tuple[tuple[int, ...], tuple[int, ...]]:
        v, coords = chunk[0], chunk[1:]
        lo = tuple(c * s for c, s in zip(coords, self.out.chunks, strict=True))
        shape = self.out.shapes[v]
        return lo, tuple(min(a + s, n) for a, s, n in zip(lo, self.out.chunks, shape, strict=True))

    def _averaged(self, chunk: Key) -> _Chunk:
        total, count = self.sums.pop(chunk), self.counts.pop(chunk)
        mean = total / np.maximum(count, 1)  # uncovered voxels stay 0
        lo, hi = self._box(chunk)
        return _Chunk(chunk[0], lo, hi, mean)

    def rest(self) -> Iterator[_Chunk]:
        """Check every patch came; then zeros for the output chunks no patch touches."""
        missing = self.known - self.seen
        if missing:
            raise ValueError(
                f"stitch got {len(self.seen)} of {len(self.known)} patches (e.g. "
                f"{min(missing)} is missing); the output is incomplete"
            )
        for v in range(self.out.count):
            for coords in itertools.product(*(range(g) for g in self.out.chunk_grid(v))):
                if (v, *coords) not in self.expected:
                    lo, hi = self._box((v, *coords))
                    box = tuple(b - a for a, b in zip(lo, hi, strict=True))
                    yield _Chunk(v, lo, hi, np.zeros((*self.lead, *box), np.float32))


class _Target:
    """Where stitched chunks go: per volume, an array and the index prefix selecting the
    volume in it (``(v,)`` in a stacked array, ``(0,)`` in a one-sample field, ``()``)."""

    def __init__(
        self, slots: Sequence[tuple[Any, tuple[int, ...]]], result: Any, chunks: tuple[int, ...]
    ) -> None:
        self.slots, self.result, self.chunks = slots, result, chunks

    @staticmethod
    def open(
        dst: Any,
        volumes: VolumeSet,
        channels: int | None,
        dtype: npt.DTypeLike,
        field: str,
        like: Any,
        compression: Compression,
        overwrite: bool,
    ) -> _Target:
        if isinstance(dst, str | os.PathLike):
            return _DatasetTarget(
                os.fspath(dst),
                volumes,
                channels,
                np.dtype(dtype),
                field,
                like,
                compression,
                overwrite,
            )
        if isinstance(dst, Sequence) and not hasattr(dst, "shape"):
            arrays = list(dst)
            if len(arrays) != volumes.count:
                raise ValueError(
                    f"need one output array per volume ({volumes.count}); got {len(arrays)}"
                )
            return _Target([(a, ()) for a in arrays], arrays, _array_chunks(arrays[0], volumes))
        if len(dst.shape) != volumes.ndim + 1 + (channels is not None):
            raise ValueError(
                f"output array of shape {dst.shape} does not hold "
                f"{volumes.count} volumes of {volumes.ndim} dims, channels {channels}"
            )
        slots = [(dst, (v,)) for v in range(volumes.count)]
        return _Target(slots, dst, _array_chunks(dst, volumes))

    def write(
        self, volume: int, lo: tuple[int, ...], hi: tuple[int, ...], block: npt.NDArray[Any]
    ) -> None:
        array, prefix = self.slots[volume]
        array[(*prefix, Ellipsis, *(slice(a, b) for a, b in zip(lo, hi, strict=True)))] = block

    def close(self) -> Any:
        return self.result

    def abort(self) -> None:
        """Stitching failed: drop what is not published (arrays passed in keep their writes)."""


def _array_chunks(arr: Any, volumes: VolumeSet) -> tuple[int, ...]:
    chunks = getattr(arr, "chunks", None)
    if isinstance(chunks, tuple) and len(chunks) >= volumes.ndim:
        return tuple(int(c) for c in chunks[-volumes.ndim :])
    return volumes.chunks


class _Region:
    """``array[region] = values`` on a writer's array: what :class:`_Target` writes through."""

    def __init__(self, writer: Writer, name: str) -> None:
        self.writer, self.name = writer, name

    def __setitem__(self, region: tuple[Any, ...], values: npt.NDArray[Any]) -> None:
        self.writer.write_region(self.name, region, values)


class _DatasetTarget(_Target):
    """A new chunkio volume dataset, written through the backend writer (codecs, checksums)
    in a sibling staging directory and published whole by :meth:`close`: an existing dataset
    at ``path`` (with ``overwrite``) stays intact until the new one is complete."""

    def __init__(
        self,
        path: str,
        volumes: VolumeSet,
        channels: int | None,
        dtype: np.dtype[Any],
        field: str,
        like: Any,
        compression: Compression,
        overwrite: bool,
    ) -> None:
        if os.path.lexists(path) and not overwrite:
            raise DestinationExistsError(f"{path} already exists; pass overwrite=True")
        self.path, self.format = os.path.abspath(path), detect_format(path)
        self.storage = storage_for(self.format)
        if self.storage.in_memory:
            raise ValueError(f"stitch writes zarr or HDF5 datasets; got {path!r}")
        parent, name = os.path.split(self.path)
        self.staging = os.path.join(parent, f".{name}.chunkio-stitch")
        self.data = os.path.join(self.staging, "data")
        self.volumes = VolumeSet(
            volumes.shapes, volumes.chunks, volumes.stacked, channels, image=field
        )
        sources = (like.layout.extra.get(VOLUMES_KEY) or {}).get("sources") if like else None
        self.layout = DatasetLayout(
            volumes.count if volumes.stacked else 1,
            1,
            self._fields(dtype),
            extra={VOLUMES_KEY: {**self.volumes.to_json(), "sources": sources}},
        )
        self.writer = self._create(compression)
        regions = [_Region(self.writer, n) for n in self.volumes.field_names("image")]
        if volumes.stacked:
            slots = [(regions[0], (v,)) for v in range(volumes.count)]
        else:
            slots = [(r, (0,)) for r in regions]
        super().__init__(slots, path, volumes.chunks)

    def _fields(self, dtype: np.dtype[Any]) -> tuple[FieldInfo, ...]:
        vs = self.volumes
        return tuple(
            FieldInfo(name, dtype, vs.item_shape("image", vs.shapes[v]))
            for v, name in enumerate(vs.field_names("image"))
        )

    def _create(self, compression: Compression) -> Writer:
        shutil.rmtree(self.staging, ignore_errors=True)  # an interrupted stitch: never published
        os.makedirs(self.staging)
        writer = open_writer(self.data, format=self.format)
        try:
            writer.set_attrs({ATTR_KEY: self.layout.to_attrs(), COMPLETE_KEY: False})
            chunks = (1, *self.volumes.item_shape("image", self.volumes.chunks))
            for f in self.layout.fields:
                shape = (self.layout.num_samples, *(f.sample_shape or ()))
                writer.create_array(
                    f.name, shape=shape, dtype=f.dtype, chunks=chunks, compression=compression
                )
        except BaseException:
            writer.close()
            raise
        return writer

    def close(self) -> Any:
        try:
            self.writer.flush()
            self.writer.set_attrs({COMPLETE_KEY: True})  # strictly last
        finally:
            self.writer.close()
        names = self.volumes.field_names("image")
        self.storage.sync_chunks(self.data, names, 0, self.layout.num_samples)
        self.storage.seal(self.data, os.path.join(self.staging, "canonical"))
        publish(self.data, self.path, self.staging)
        shutil.rmtree(self.staging)
        return self.result

    def abort(self) -> None:
        self.writer.close()
        shutil.rmtree(self.staging, ignore_errors=True)
