"""The chunk grid along the sample axis, and where each sample's values lie in a flat array.

A ragged, sparse or encoded field stores its samples end to end in one flat array (values,
or encoded bytes) and says where each one lies (offsets and shapes, or spans): stored numbers
that a hostile or damaged file can set to anything. :func:`checked_runs`,
:func:`sample_sizes` and :func:`checked_image_shapes` check them against the placement
chunkio's writers give (:mod:`chunkio.convert.engine.ragged`) before any of them sizes a
read or an allocation, vectorized over every sample at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import FormatError
from ..util.numeric import IntArray, ceil_div

__all__ = [
    "IMAGE_SIDES",
    "MAX_IMAGE_PIXELS",
    "SampleGrid",
    "checked_encoded",
    "checked_image_shapes",
    "checked_ragged",
    "checked_runs",
    "checked_spans",
    "image_rule",
    "image_shapes_ok",
    "sample_sizes",
    "values_chunk_span",
]


@dataclass(frozen=True)
class SampleGrid:
    """Regular chunking of ``num_samples`` samples into chunks of ``samples_per_chunk``.

    Chunk ``c`` holds samples ``[c * samples_per_chunk, min((c + 1) * samples_per_chunk, N))``;
    only the last chunk may be shorter.

    >>> g = SampleGrid(10, 4)
    >>> g.num_chunks, g.chunk_sizes().tolist(), g.bounds(2)
    (3, [4, 4, 2], (8, 10))
    """

    num_samples: int
    samples_per_chunk: int

    def __post_init__(self) -> None:
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise TypeError(f"num_samples must be an int; got {self.num_samples!r}")
        if self.num_samples < 0:
            raise ValueError(f"num_samples must be >= 0; got {self.num_samples}")
        spc = self.samples_per_chunk
        if isinstance(spc, bool) or not isinstance(spc, int) or spc < 1:
            raise ValueError(f"samples_per_chunk must be an int >= 1; got {spc!r}")

    @property
    def num_chunks(self) -> int:
        return ceil_div(self.num_samples, self.samples_per_chunk)

    def chunk_sizes(self) -> IntArray:
        sizes = np.full(self.num_chunks, self.samples_per_chunk, dtype=np.int64)
        if self.num_chunks:
            sizes[-1] = self.num_samples - (self.num_chunks - 1) * self.samples_per_chunk
        return sizes

    def bounds(self, chunk: int) -> tuple[int, int]:
        if not 0 <= chunk < self.num_chunks:
            raise IndexError(f"chunk {chunk} out of range for {self.num_chunks} chunks")
        start = chunk * self.samples_per_chunk
        return start, min(start + self.samples_per_chunk, self.num_samples)


def values_chunk_span(
    offsets: IntArray, grid: SampleGrid, chunk_len: int, first: int, stop: int
) -> tuple[int, int]:
    """Values chunks ``[a, b)`` that hold sample chunks ``[first, stop)``.

    >>> values_chunk_span(np.array([0, 3, 8, 10, 11]), SampleGrid(4, 2), 8, 0, 1)
    (0, 1)
    >>> values_chunk_span(np.array([0, 3, 8, 10, 11]), SampleGrid(4, 2), 8, 1, 2)
    (1, 2)
    """
    begin = int(offsets[grid.bounds(first)[0]])
    end = int(offsets[grid.bounds(stop - 1)[1]])
    return begin // chunk_len, ceil_div(end, chunk_len)


def checked_runs(
    starts: npt.ArrayLike,
    counts: npt.ArrayLike,
    grid: SampleGrid,
    chunk_len: int,
    total: int,
    *,
    where: str,
    end: int | None = None,
) -> IntArray:
    """Where each sample's values stop: sample ``i`` is ``[starts[i], starts[i] + counts[i])``
    of a flat array of ``total`` values in chunks of ``chunk_len``; ``end`` (ragged and sparse
    fields: the last offset) is where the last sample ends.

    Checked against the placement chunkio's writers give, else a
    :class:`~chunkio.errors.FormatError` naming ``where`` (file and field) and the first bad
    sample: no count below 0 and every run inside the array; the samples of one sample chunk
    end to end, in order; each sample chunk starting on a chunk boundary, at or after the
    previous sample's end (padding may follow a chunk's last sample). So no sample reads
    another's values, and nothing read is sized by more than the array holds.

    >>> grid = SampleGrid(4, 2)
    >>> checked_runs([0, 2, 8, 9], [2, 3, 1, 0], grid, 4, 9, where="x").tolist()
    [2, 5, 9, 9]
    >>> checked_runs([0, 3, 8, 9], [2, 3, 1, 0], grid, 4, 9, where="x")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: x: sample 1 starts at 3, not where sample 0 ends (2): the \
samples of one chunk lie end to end (offsets, spans or shapes corrupt)
    """
    start = np.asarray(starts, dtype=np.int64).reshape(-1)
    count = np.asarray(counts, dtype=np.int64).reshape(-1)
    n = grid.num_samples
    if len(start) != n or len(count) != n:
        raise FormatError(
            f"{where}: expected where each of {n} samples lies; got {len(start)} starts and "
            f"{len(count)} sizes"
        )
    # one unsigned comparison each (a number below 0 is a huge one there): every count and
    # start from 0 to the total, so that start + count cannot wrap around
    i = _first(count.view(np.uint64) > total)
    if i is not None:
        raise FormatError(
            f"{where}: sample {i} holds {count[i]} values; expected 0 to the {total} stored"
        )
    i = _first(start.view(np.uint64) > total)
    if i is not None:
        raise FormatError(
            f"{where}: sample {i} lies at [{start[i]}, {int(start[i]) + int(count[i])}), "
            f"outside the {total} stored values"
        )
    stop: IntArray = start + count
    if not n:
        _check_end(end, 0, total, where)
        return stop
    # gap[i - 1]: from where sample i - 1 ends to where sample i starts; 0 inside a chunk
    gap = start[1:] - stop[:-1]
    step = grid.samples_per_chunk
    heads = np.arange(0, n, step)
    before_head = np.concatenate([[0], gap[heads[1:] - 1]])
    gap[heads[1:] - 1] = 0
    inner = np.flatnonzero(gap)
    bad_head = heads[(before_head < 0) | (start[heads] % max(1, chunk_len) != 0)]
    firsts = ([int(inner[0]) + 1] if inner.size else []) + bad_head[:1].tolist()
    if firsts:
        i = min(firsts)
        before = int(stop[i - 1]) if i else 0
        if i % step:
            raise FormatError(
                f"{where}: sample {i} starts at {start[i]}, not where sample {i - 1} ends "
                f"({before}): the samples of one chunk lie end to end (offsets, spans or "
                "shapes corrupt)"
            )
        raise FormatError(
            f"{where}: sample {i} (the first of sample chunk {i // step}) starts at "
            f"{start[i]}: expected a multiple of the chunk length {chunk_len} at or after "
            f"{before}, where the samples before it end"
        )
    # in order and end to end, so the last sample ends furthest
    if stop[-1] > total:
        raise FormatError(
            f"{where}: sample {n - 1} lies at [{start[-1]}, {stop[-1]}), outside the "
            f"{total} stored values"
        )
    _check_end(end, int(stop[-1]), total, where)
    return stop


def _check_end(end: int | None, last: int, total: int, where: str) -> None:
    if end is not None and not last <= end <= total:
        raise FormatError(
            f"{where}: the last offset is {end}; expected where the last sample ends ({last}), "
            f"within the {total} stored values"
        )


def _first(bad: npt.NDArray[np.bool_] | np.bool_) -> int | None:
    """The first sample flagged in ``bad``, if any."""
    found = np.flatnonzero(bad)
    return int(found[0]) if found.size else None


def checked_spans(
    spans: npt.ArrayLike, grid: SampleGrid, chunk_len: int, total: int, *, where: str
) -> IntArray:
    """An encoded field's spans (N x 2: each sample's ``[start, stop)`` in ``total`` bytes in
    chunks of ``chunk_len``) as int64, checked as :func:`checked_runs` checks runs, and none
    empty (an encoded image is at least one byte).

    >>> checked_spans([[0, 5], [5, 9], [16, 20]], SampleGrid(3, 2), 8, 24, where="x").tolist()
    [[0, 5], [5, 9], [16, 20]]
    >>> checked_spans([[0, 5], [5, 5]], SampleGrid(2, 2), 8, 24, where="x")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: x: sample 1 has the bytes [5, 5): expected 0 <= start < stop \
<= 24 (the stored bytes)
    """
    found = np.asarray(spans, dtype=np.int64)
    if found.ndim != 2 or found.shape[1] != 2:
        raise FormatError(f"{where}: spans must be (samples, 2); got {found.shape}")
    start, stop = found[:, 0], found[:, 1]
    i = _first((start < 0) | (stop <= start) | (stop > total))
    if i is not None:
        raise FormatError(
            f"{where}: sample {i} has the bytes [{start[i]}, {stop[i]}): expected 0 <= start "
            f"< stop <= {total} (the stored bytes)"
        )
    checked_runs(start, stop - start, grid, chunk_len, total, where=where)
    return found


def sample_sizes(shapes: npt.ArrayLike, total: int, *, where: str) -> IntArray:
    """Values per sample of the stored ``shapes`` (N x ndim), checked: no side below 0, no
    sample larger than the ``total`` values stored (the product is bounded before it is
    taken, so sides of 2**21, 2**21 and 2**22 never wrap around to 0 values).

    >>> sample_sizes([[2, 3], [0, 5]], 6, where="x").tolist()
    [6, 0]
    >>> sample_sizes([[2**21, 2**21, 2**22]], 6, where="x")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: x: sample 0 has shape (2097152, 2097152, 4194304): 1.84e+19 \
values, more than the 6 stored
    """
    found = np.asarray(shapes, dtype=np.int64)
    if found.ndim != 2:
        raise FormatError(f"{where}: shapes must be (samples, ndim); got {found.shape}")
    if found.shape[1] == 1:  # a sparse row's count: one unsigned comparison (see checked_runs)
        sizes: IntArray = np.ascontiguousarray(found[:, 0])
        i = _first(sizes.view(np.uint64) > total)
        if i is not None and sizes[i] < 0:
            raise FormatError(f"{where}: sample {i} has shape ({sizes[i]},): a side below 0")
        if i is not None:
            raise FormatError(
                f"{where}: sample {i} has shape ({sizes[i]},): {float(sizes[i]):.3g} values, "
                f"more than the {total} stored"
            )
        return sizes
    i = _first((found < 0).any(axis=1))
    if i is not None:
        raise FormatError(f"{where}: sample {i} has shape {_shape(found[i])}: a side below 0")
    approx = np.prod(found.astype(np.float64), axis=1)
    i = _first(approx > total)
    if i is not None:
        raise FormatError(
            f"{where}: sample {i} has shape {_shape(found[i])}: {approx[i]:.3g} values, more "
            f"than the {total} stored"
        )
    product: IntArray = np.prod(found, axis=1, dtype=np.int64)
    return product


def _shape(row: IntArray) -> tuple[int, ...]:
    return tuple(int(s) for s in row)


#: the most pixels an encoded image may declare (``H * W``): the count Pillow refuses as a
#: decompression bomb by default (twice ``PIL.Image.MAX_IMAGE_PIXELS``), so no stored shape
#: sizes a decode buffer that the decoders would refuse to fill
MAX_IMAGE_PIXELS = 2 * 89_478_485
#: the largest side each encoding can hold (JPEG: 16-bit sizes; WebP: 14-bit; PNG: 31-bit)
IMAGE_SIDES = {"jpeg": 65_535, "webp": 16_383, "png": 2**31 - 1, "yuv420": 2**31 - 1}


def image_shapes_ok(
    shapes: IntArray, encoding: str, max_pixels: int = MAX_IMAGE_PIXELS
) -> npt.NDArray[np.bool_]:
    """Which ``(C, H, W)`` rows of ``shapes`` an image of ``encoding`` can have (see
    :func:`image_rule`)."""
    side = IMAGE_SIDES.get(encoding, 2**31 - 1)
    c, h, w = shapes.T
    sides = (h >= 1) & (w >= 1) & (h <= side) & (w <= side)
    pixels = np.where(sides, h, 0) * np.where(sides, w, 0)  # sides < 2**31: no wrap around
    ok: npt.NDArray[np.bool_] = (c >= 1) & (c <= 4) & sides & (pixels <= max_pixels)
    return ok


def image_rule(encoding: str, max_pixels: int = MAX_IMAGE_PIXELS) -> str:
    """What :func:`image_shapes_ok` accepts, for error messages."""
    side = IMAGE_SIDES.get(encoding, 2**31 - 1)
    return f"(channels 1-4, height, width) with sides 1..{side} and at most {max_pixels} pixels"


def checked_image_shapes(
    shapes: npt.ArrayLike,
    sample_shape: tuple[int, ...] | None,
    encoding: str,
    *,
    where: str,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> IntArray:
    """The stored shapes of an encoded image field (N x 3) as int64, checked, else a
    :class:`~chunkio.errors.FormatError` naming ``where`` and the first bad sample: each
    ``(C, H, W)`` with 1 to 4 channels, sides from 1 to what ``encoding`` can hold and at
    most ``max_pixels`` pixels, equal to the field's ``sample_shape`` when it declares one.

    >>> checked_image_shapes([[3, 8, 6], [3, 8, 6]], (3, 8, 6), "png", where="x").shape
    (2, 3)
    >>> checked_image_shapes([[3, 8, 6], [3, 0, 6]], None, "png", where="x")
    Traceback (most recent call last):
    ...
    chunkio.errors.FormatError: x: sample 1 has shape (3, 0, 6): expected (channels 1-4, \
height, width) with sides 1..2147483647 and at most 178956970 pixels
    """
    found = np.asarray(shapes, dtype=np.int64)
    if found.ndim != 2 or found.shape[1] != 3:
        raise FormatError(f"{where}: shapes must be (samples, 3): (C, H, W); got {found.shape}")
    i = _first(~image_shapes_ok(found, encoding, max_pixels))
    if i is not None:
        raise FormatError(
            f"{where}: sample {i} has shape {_shape(found[i])}: expected "
            f"{image_rule(encoding, max_pixels)}"
        )
    if sample_shape is not None:
        declared = np.asarray(sample_shape, dtype=np.int64)
        i = _first((found != declared).any(axis=1) if declared.shape == (3,) else found[:, 0] > -1)
        if i is not None:
            raise FormatError(
                f"{where}: sample {i} has shape {_shape(found[i])}; the field declares every "
                f"sample {tuple(sample_shape)}"
            )
    return found


def checked_ragged(
    offsets: npt.ArrayLike,
    shapes: npt.ArrayLike,
    grid: SampleGrid,
    chunk_len: int,
    total: int,
    *,
    where: str,
) -> IntArray:
    """Where each sample of a ragged or native sparse field stops in its ``total`` values
    (chunks of ``chunk_len``), from its stored ``offsets`` (N + 1) and ``shapes`` (N x ndim;
    a sparse row's: its count), checked by :func:`sample_sizes` and :func:`checked_runs`.

    >>> checked_ragged([0, 2, 4, 7], [[2], [2], [3]], SampleGrid(3, 2), 4, 7, where="x").tolist()
    [2, 4, 7]
    """
    found = np.asarray(offsets, dtype=np.int64).reshape(-1)
    if len(found) != grid.num_samples + 1:
        raise FormatError(f"{where}: expected {grid.num_samples + 1} offsets; got {len(found)}")
    sizes = sample_sizes(shapes, total, where=where)
    return checked_runs(found[:-1], sizes, grid, chunk_len, total, where=where, end=int(found[-1]))


def checked_encoded(
    spans: npt.ArrayLike,
    shapes: npt.ArrayLike,
    grid: SampleGrid,
    chunk_len: int,
    total: int,
    *,
    sample_shape: tuple[int, ...] | None,
    encoding: str,
    where: str,
) -> None:
    """An encoded image field's stored ``spans`` (N x 2, in ``total`` bytes in chunks of
    ``chunk_len``) and ``shapes`` (N x 3), checked by :func:`checked_spans` and
    :func:`checked_image_shapes` (``sample_shape`` and ``encoding``: the field's), one of
    each per sample."""
    checked_spans(spans, grid, chunk_len, total, where=where)
    found = checked_image_shapes(shapes, sample_shape, encoding, where=where)
    if len(found) != grid.num_samples:
        raise FormatError(
            f"{where}: expected a shape for each of {grid.num_samples} samples; got {len(found)}"
        )
