"""The read plan (:mod:`chunkio.read.planning`) against models written out longhand: every field of
a plan, its dtype and shape, and every refusal with its message (found by mutation testing:
``make mutate``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio.format.grid import SampleGrid
from chunkio.format.volume_layout import VolumeSet
from chunkio.read.planning import (
    chunk_boxes,
    normalize_indices,
    normalize_keys,
    piece_slices,
    plan_batch,
    plan_patch_reads,
)

# -- samples --------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            st.just(n), st.integers(1, n + 3), st.lists(st.integers(-n, n - 1), max_size=30)
        )
    )
)
def test_plan_batch_equals_a_longhand_model(case) -> None:
    n, spc, indices = case
    plan = plan_batch(indices, SampleGrid(n, spc))
    idx = [i % n for i in indices]
    chunks = sorted({i // spc for i in idx})
    assert plan.indices.tolist() == idx
    assert plan.chunks.tolist() == chunks
    assert plan.chunk_pos.tolist() == [chunks.index(i // spc) for i in idx]
    assert plan.offsets.tolist() == [i % spc for i in idx]
    for name in ("indices", "chunks", "chunk_pos", "offsets"):
        arr = getattr(plan, name)
        assert arr.dtype == np.int64 and arr.ndim == 1, name


def test_normalize_indices_accepts_what_it_should() -> None:
    assert normalize_indices(np.array([[]]).reshape(0), 3).dtype == np.int64
    for empty in ([], np.zeros(0, np.float64), np.zeros((0,), np.int8)):
        got = normalize_indices(empty, 3)
        assert got.dtype == np.int64 and got.shape == (0,)
    for dtype in (np.int8, np.uint16, np.int32, np.int64, np.uint64):
        got = normalize_indices(np.array([2, 0, 1], dtype), 3)
        assert got.dtype == np.int64 and got.tolist() == [2, 0, 1]
    got = normalize_indices(np.int64(-1), 3)  # a 0-d array is one index
    assert got.tolist() == [2] and got.shape == (1,)
    assert normalize_indices([-3, -1, 0, 2], 3).tolist() == [0, 2, 0, 2]


@pytest.mark.parametrize(
    ("indices", "error", "message"),
    [
        ([[0, 1]], ValueError, "sample indices must be one-dimensional; got shape (1, 2)"),
        ([0.0, 1.0], TypeError, "sample indices must be integers; got dtype float64"),
        ([True, False], TypeError, "sample indices must be integers; got dtype bool"),
        ([0, 3], IndexError, "sample index 3 out of range for a dataset of 3 samples"),
        ([1, -4, 7], IndexError, "sample index -4 out of range for a dataset of 3 samples"),
    ],
)
def test_normalize_indices_refusals(indices, error, message) -> None:
    with pytest.raises(error) as info:
        normalize_indices(indices, 3)
    assert str(info.value) == message


# -- patches --------------------------------------------------------------------------------

VOLUMES = VolumeSet(shapes=((9, 7), (5, 8)), chunks=(4, 3), stacked=False)


def test_normalize_keys() -> None:
    got = normalize_keys([], VOLUMES)
    assert got.dtype == np.int64 and got.shape == (0, 3)
    got = normalize_keys(np.array([[1, -2, 3], [0, 0, 0]], np.int16), VOLUMES)
    assert got.dtype == np.int64 and got.tolist() == [[1, -2, 3], [0, 0, 0]]
    refusals = [
        ([(0.0, 1.0, 1.0)], TypeError, "patch keys must be integers (volume, *origin); got "
         "dtype float64"),
        ([(True, False, True)], TypeError, "patch keys must be integers (volume, *origin); "
         "got dtype bool"),
        ([(0, 1)], ValueError, "patch keys must be (volume, *origin) with 3 integers each; got "
         "an array of shape (1, 2)"),
        ([0, 1, 2], ValueError, "patch keys must be (volume, *origin) with 3 integers each; got "
         "an array of shape (3,)"),
        ([(0, 0, 0), (2, 0, 0)], IndexError, "patch key [2, 0, 0]: volume out of range for 2 "
         "volumes"),
        ([(-1, 0, 0)], IndexError, "patch key [-1, 0, 0]: volume out of range for 2 volumes"),
    ]  # fmt: skip
    for keys, error, message in refusals:
        with pytest.raises(error) as info:
            normalize_keys(keys, VOLUMES)
        assert str(info.value) == message


def _model(keys, size, volumes):
    """chunks (sorted) and, per patch, {chunk: (src slices, dst slices)}, voxel by voxel."""
    pieces: list[dict[tuple[int, ...], list[tuple[int, ...]]]] = []
    for v, *origin in keys:
        mine: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for offset in itertools.product(*map(range, size)):
            voxel = tuple(o + d for o, d in zip(origin, offset, strict=True))
            if all(0 <= x < n for x, n in zip(voxel, volumes.shapes[v], strict=True)):
                chunk = (v, *(x // c for x, c in zip(voxel, volumes.chunks, strict=True)))
                mine.setdefault(chunk, []).append(offset)
        pieces.append(mine)
    return sorted({c for p in pieces for c in p}), pieces


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.integers(-3, 4), st.integers(-3, 6)),
        min_size=1,
        max_size=5,
    ),
    st.tuples(st.integers(1, 5), st.integers(1, 4)),
)
def test_plan_patch_reads_equals_a_voxel_model(keys, size) -> None:
    chunks, pieces = _model(keys, size, VOLUMES)
    if not all(pieces):  # a patch with no voxel in its volume is refused
        with pytest.raises(ValueError, match="lies outside volume"):
            plan_patch_reads(keys, size, VOLUMES)
        return
    plan = plan_patch_reads(keys, size, VOLUMES)
    assert plan.keys.tolist() == [list(k) for k in keys] and plan.keys.dtype == np.int64
    assert [tuple(c) for c in plan.chunks.tolist()] == chunks
    assert plan.chunks.dtype == np.int64 and plan.chunks.shape == (len(chunks), 3)
    assert plan.pieces.dtype == np.int64 and plan.pieces.shape[1] == 2 + 3 * 2
    got: list[dict[tuple[int, ...], list[tuple[int, ...]]]] = [{} for _ in keys]
    for piece in plan.pieces.tolist():
        b, row, src, dst = piece_slices(piece, 2)
        chunk = tuple(plan.chunks[row].tolist())
        lo, hi = plan.chunk_box(row, VOLUMES)
        assert lo == tuple(c * s for c, s in zip(chunk[1:], VOLUMES.chunks, strict=True))
        assert hi == tuple(
            min(a + s, n) for a, s, n in zip(lo, VOLUMES.chunks, VOLUMES.shapes[chunk[0]],
                                             strict=True)
        )  # fmt: skip
        for s, d, a, z in zip(src, dst, lo, hi, strict=True):
            assert 0 <= s.start < s.stop <= z - a and s.stop - s.start == d.stop - d.start
        offsets = list(itertools.product(*(range(d.start, d.stop) for d in dst)))
        got[b].setdefault(chunk, []).extend(offsets)
    assert [{c: sorted(v) for c, v in p.items()} for p in got] == pieces
    for b, (v, *origin) in enumerate(keys):  # the in-volume part of each patch
        inner = plan.inner[b].tolist()
        shape = VOLUMES.shapes[v]
        want_lo = [max(0, o) - o for o in origin]
        want_hi = [min(o + p, n) - o for o, p, n in zip(origin, size, shape, strict=True)]
        assert inner == [want_lo, want_hi]
    bare = plan_patch_reads(keys, size, VOLUMES, pieces=False)
    assert bare.pieces.shape == (0, 8) and bare.chunks.tolist() == plan.chunks.tolist()


def test_plan_patch_reads_refusals() -> None:
    with pytest.raises(ValueError) as info:
        plan_patch_reads([(0, 0, 0)], (2, 0), VOLUMES)
    assert str(info.value) == "patch_size must be 2 positive ints; got (2, 0)"
    with pytest.raises(ValueError) as info:
        plan_patch_reads([(0, 0, 0)], (2, 2, 2), VOLUMES)
    assert str(info.value) == "patch_size must be 2 positive ints; got (2, 2, 2)"
    with pytest.raises(ValueError) as info:
        plan_patch_reads([(0, 1, 1), (1, 5, 0)], (2, 2), VOLUMES)
    assert str(info.value) == (
        "patch [1, 5, 0] of size [2, 2] lies outside volume 1 of shape [5, 8]"
    )
    with pytest.raises(ValueError, match=r"patch \[0, -2, 0\] .* outside volume 0"):
        plan_patch_reads([(0, -2, 0)], (2, 2), VOLUMES)  # touches the volume at no voxel
    empty = plan_patch_reads([], (2, 2), VOLUMES)
    assert empty.chunks.shape == (0, 3) and empty.pieces.shape == (0, 8)
    assert empty.chunks.dtype == empty.pieces.dtype == empty.keys.dtype == np.int64


@settings(max_examples=150, deadline=None)
@given(st.sets(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=12))
def test_chunk_boxes_cover_exactly_and_are_boxes(chunks) -> None:
    boxes = chunk_boxes(sorted(chunks))
    covered = [c for lo, hi in boxes for c in itertools.product(*map(range, lo, hi))]
    assert sorted(covered) == sorted(chunks) and len(covered) == len(set(covered))
    for lo, hi in boxes:
        assert all(a < b for a, b in zip(lo, hi, strict=True))
    if len(chunks) == 1 or all(len({c[k] for c in chunks}) == 1 for k in (0, 1)):
        assert len(boxes) == 1
    full = {(i, j) for i in range(2) for j in range(3)}
    assert chunk_boxes(sorted(full)) == [((0, 0), (2, 3))]  # a full box is one read
    assert chunk_boxes([(1, 1), (1, 1)]) == [((1, 1), (2, 2))]  # repeats read once


def test_chunk_boxes_are_python_ints_whatever_the_input_dtype() -> None:
    for coords in (np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([[0, 1], [1, 1]], np.int32)):
        boxes = chunk_boxes(coords)
        assert boxes == [((0, 1), (2, 2))]
        assert all(type(v) is int for box in boxes for corner in box for v in corner)


def test_piece_slices_in_one_two_and_three_dimensions() -> None:
    assert piece_slices([3, 1, 5, 0, 2], 1) == (3, 1, (slice(5, 7),), (slice(0, 2),))
    assert piece_slices([0, 4, 1, 2, 3, 4, 5, 6], 2) == (
        0, 4, (slice(1, 6), slice(2, 8)), (slice(3, 8), slice(4, 10)),
    )  # fmt: skip
    assert piece_slices([1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8], 3) == (
        1, 2, (slice(0, 6), slice(1, 8), slice(2, 10)), (slice(3, 9), slice(4, 11), slice(5, 13)),
    )  # fmt: skip
