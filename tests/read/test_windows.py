"""Fields with steps (chunkio.Field): every window equals ``arr[anchor + step]`` on stores
written by xarray, zarr-python v2 and v3, h5py and chunkio; each chunk is decoded once per
batch; gaps, splits and bad input."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from weather_stores import STORES, VARS, T, arrays

import chunkio
from chunkio import Anchors, ChunkDataset, Field
from chunkio.errors import MissingFieldError, WindowError


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return STORES[request.param](tmp_path_factory.mktemp("w"))


def _open(path: Path, fields: Any, **kw: Any) -> ChunkDataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata under v3
        return ChunkDataset(path, fields=fields, **kw)


def reference(f: Field, anchors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr[anchor + step]`` of each variable, laid out ``(B, steps?, variables?, ...)``."""
    a = arrays()
    per = np.stack(
        [np.stack([a[p][anchors + s] for p in f.paths], axis=1) for s in f.offsets], axis=1
    )  # (B, S, V, ...)
    if not f.stacked:
        per = per[:, :, 0]
    if f.steps is None:
        per = per[:, 0]
    return per


def test_the_shapes_users_ask_for(store: Path) -> None:
    ds = _open(store, [
        Field("t2m", steps=range(-2, 1)),
        Field(list(VARS), steps=range(-1, 1)),
        Field("t2m", steps=[1, 4]),
        "t2m",
        "time",
    ])  # fmt: skip
    assert ds.fields == ("t2m", "t2m_u10_v10", "t2m_2", "t2m_3", "time")
    b = ds.read_batch([0, 1, 2])
    assert b["t2m"].shape == (3, 3, 3, 4)
    assert b["t2m_u10_v10"].shape == (3, 2, 3, 3, 4)
    assert b["t2m_2"].shape == (3, 2, 3, 4)
    assert b["t2m_3"].shape == (3, 3, 4)
    # valid anchors: every step inside [0, T): t-2 needs anchor >= 2, t+4 anchor <= T - 5
    assert len(ds) == T - 2 - 4
    np.testing.assert_array_equal(b["time"], [2, 3, 4])  # the coordinate names the anchor
    x = ds[0]
    assert tuple(x[1].shape) == (2, 3, 3, 4)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.integers(-5, 5), min_size=1, max_size=4, unique=True),
    lead=st.lists(st.integers(1, 6), min_size=1, max_size=2, unique=True),
    stacked=st.booleans(),
    picks=st.lists(st.integers(0, 10_000), min_size=0, max_size=40),
    preload=st.booleans(),
)
def test_every_window_equals_the_numpy_reference(
    store: Path,
    steps: list[int],
    lead: list[int],
    stacked: bool,
    picks: list[int],
    preload: bool,
) -> None:
    fields = [
        Field(list(VARS) if stacked else "u10", steps=steps),
        Field(["level"], steps=lead),
        Field("t2m", steps=lead),
    ]
    ds = _open(store, fields, preload_bytes=(1 << 30) if preload else 0)
    lo, hi = min(0, *steps), max(0, *steps, *lead)
    valid = np.arange(max(0, -lo), T - hi)
    np.testing.assert_array_equal(ds.anchors, valid)
    idx = [p % len(ds) for p in picks]  # any order, repeats allowed
    got = ds.read_batch(idx)
    anchors = valid[idx]
    for f, name in zip(fields, ds.fields, strict=True):
        np.testing.assert_array_equal(got[name], reference(f, anchors), err_msg=name)


def test_each_chunk_is_decoded_once_per_batch_even_when_windows_span_two(store: Path) -> None:
    ds = _open(store, [Field(list(VARS), steps=range(-3, 1)), Field("t2m", steps=[1])],
               preload_bytes=0)  # fmt: skip
    idx = np.arange(10, 30)  # overlapping windows across chunk edges of every variable
    assert ds.anchors is not None
    a = ds.anchors[idx][:, None]
    ds.read_batch(idx)
    stats = ds.read_stats()
    chunks = {"t2m": 5, "u10": 3, "v10": 7}
    if "native" in str(store):
        chunks = dict.fromkeys(VARS, 5)
    last = {"t2m": 2, "u10": 1, "v10": 1}  # t2m is read at t+1 too
    needed = sum(len(np.unique((a + np.arange(-3, last[v])) // c)) for v, c in chunks.items())
    assert stats.chunks_read == needed  # t2m's chunks shared by both fields, read once


def test_stacked_variables_held_whole_are_read_once_and_shared(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held arrays of stacked variables are read once per process into one stack that every
    window field of the same variables gathers from; a field of one of them reads its lane,
    a field of them in another order gathers lane by lane: each array read once in all, and
    every window equals the reference (reads of a few rows at a time: chunk-sized pieces)."""
    import chunkio.read.windows as windows

    monkeypatch.setattr(windows, "BLOCK_BYTES", 1)
    fields = [
        Field(list(VARS), steps=range(-1, 1)),
        Field(list(VARS), steps=[1]),
        Field("u10", steps=[-2, 1]),
        Field(["v10", "t2m"], steps=[0]),
    ]
    ds = _open(store, fields, preload_bytes=1 << 30)
    idx = [0, 7, 7, len(ds) - 1, 20, 3]
    got = ds.read_batch(idx)
    assert ds.anchors is not None
    for f, name in zip(fields, ds.fields, strict=True):
        np.testing.assert_array_equal(got[name], reference(f, ds.anchors[idx]), err_msg=name)
    handle = ds._handle()
    stacks = [getattr(handle.field(name), "stack", None) for name in ds.fields]
    assert stacks[0] is not None and stacks[1] is stacks[0]
    assert stacks[2] is None and stacks[3] is None
    chunks = {"t2m": 5, "u10": 3, "v10": 7}
    if "native" in str(store):
        chunks = dict.fromkeys(VARS, 5)
    assert ds.read_stats().chunks_read == sum(-(-T // c) for c in chunks.values())


def test_gaps_are_skipped_by_a_mask_array_or_excluded_ranges(store: Path) -> None:
    f = Field("t2m", steps=[-1, 0, 1])
    whole = np.arange(1, T - 1)
    ok = arrays()["ok"]
    span_ok = np.array([ok[a - 1 : a + 2].all() for a in whole])
    ds = _open(store, [f], anchors=Anchors(valid="ok"))
    np.testing.assert_array_equal(ds.anchors, whole[span_ok])
    ds = _open(store, [f], anchors=Anchors(valid=ok))
    np.testing.assert_array_equal(ds.anchors, whole[span_ok])
    ds = _open(store, [f], anchors=Anchors(exclude=[(20, 21), (41, 43)]))
    np.testing.assert_array_equal(ds.anchors, whole[span_ok])
    got = ds.read_batch(np.arange(len(ds)))["t2m"]
    np.testing.assert_array_equal(got, reference(f, whole[span_ok]))


def test_anchors_split_by_time_in_one_argument(store: Path) -> None:
    f = [Field(list(VARS), steps=range(-1, 1)), Field("t2m", steps=[1]), "time"]
    train = _open(store, f, anchors=range(0, 40))
    val = _open(store, f, anchors=range(40, T))
    assert train.anchors is not None and val.anchors is not None
    np.testing.assert_array_equal(train.anchors, np.arange(1, 40))  # t-1 needs anchor >= 1
    np.testing.assert_array_equal(val.anchors, np.arange(40, T - 1))  # t+1 needs <= T - 2
    picked = _open(store, f, anchors=np.array([30, 5, 7]))
    np.testing.assert_array_equal(picked.read_batch([0, 1, 2])["time"], [5, 7, 30])
    plain = _open(store, "t2m", anchors=range(10, 20))  # anchors alone: rows of a subset
    assert len(plain) == 10 and tuple(plain[0].shape) == (3, 4)


def test_a_mapping_names_the_fields(store: Path) -> None:
    ds = _open(store, {"x": Field(list(VARS), steps=[-1, 0]), "y": Field(list(VARS), steps=[1]),
                       "t": "time"})  # fmt: skip
    assert ds.fields == ("x", "y", "t")
    _, y, t = ds[3]  # a tuple in the mapping's order, as for any mapping of fields
    assert int(t) == 4 and tuple(y.shape) == (1, 3, 3, 4)


# -- bad input: typed errors at construction, naming field, path and values ---------------------


def test_steps_that_leave_no_anchor(store: Path) -> None:
    with pytest.raises(WindowError, match=r"no valid anchor.*'t2m'.*steps \[-40, 30\]"):
        _open(store, [Field("t2m", steps=[-40, 30])])


def test_variables_of_different_shapes_in_one_field(store: Path) -> None:
    with pytest.raises(WindowError, match=r"field 'mixed' stacks variables.*level.*\(2, 3, 4\)"):
        _open(store, [Field(["t2m", "level"], steps=[0], name="mixed")])


@pytest.mark.parametrize(
    ("anchors", "message"),
    [
        (range(50, 70), r"anchors outside the 60 steps \[0, 60\): \[60, 61"),
        (np.array([-1, 3]), r"anchors outside.*\[-1\]"),
        (Anchors(valid=np.ones(59, bool)), r"valid-mask.*\(60,\); got shape \(59,\)"),
        (Anchors(valid=np.ones(60)), r"valid-mask.*must be boolean; got float64"),
        (Anchors(exclude=[(10, 70)]), r"excluded range \(10, 70\)"),
        (np.array([[1, 2]]), r"range or a 1-D int array"),
    ],
)
def test_bad_anchors(store: Path, anchors: Any, message: str) -> None:
    with pytest.raises(WindowError, match=message):
        _open(store, [Field("t2m", steps=[-1, 0])], anchors=anchors)


def test_a_missing_array_lists_what_is_there(store: Path) -> None:
    with pytest.raises(MissingFieldError, match="t3m"):
        _open(store, [Field(["t2m", "t3m"], steps=[0])])


@pytest.mark.parametrize(
    ("paths", "steps", "message"),
    [
        ("t2m", [], "steps must be distinct ints"),
        ("t2m", [0, 0], "steps must be distinct ints"),
        ("t2m", [0.5], "steps must be distinct ints"),
        ("t2m", [True], "steps must be distinct ints"),
        ([], [0], "non-empty array paths"),
        (3, [0], "paths must be a string"),
    ],
)
def test_bad_fields(paths: Any, steps: Any, message: str) -> None:
    with pytest.raises(WindowError, match=message):
        Field(paths, steps=steps)


@pytest.mark.parametrize("preload_bytes", [0, 1 << 30])
def test_large_rows_of_stacked_variables_equal_the_reference(
    tmp_path: Path, preload_bytes: int
) -> None:
    """Rows of at least ``ROW_COPY_BYTES`` (images of each step) are copied into the batch
    row by row: the same windows as the gather, duplicates and overlaps included."""
    from chunkio.read.windows import ROW_COPY_BYTES

    rng = np.random.default_rng(5)
    data = {v: rng.standard_normal((30, 2, 16, 16)).astype(np.float32) for v in ("a", "b")}
    assert data["a"][0].nbytes >= ROW_COPY_BYTES
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f.create_dataset(k, data=v, chunks=(4, 2, 16, 16))
    ds = _open(path, [Field(["a", "b"], steps=[-2, 0, 1])], preload_bytes=preload_bytes)
    idx = [5, 0, 5, 26, 13, 14]
    got = ds.read_batch(idx)["a_b"]
    anchors = ds.anchors[idx]
    want = np.stack(
        [np.stack([data[v][anchors + s] for v in ("a", "b")], 1) for s in (-2, 0, 1)], 1
    )
    np.testing.assert_array_equal(got, want)


def test_field_transforms_do_not_apply_to_windows(store: Path) -> None:
    from chunkio.transforms import Compose, RandomHorizontalFlip

    with pytest.raises(TypeError, match="is a window"):
        _open(store, [Field("t2m", steps=[0])], transform=Compose([RandomHorizontalFlip()],
                                                                field="t2m"))  # fmt: skip


def test_public_names() -> None:
    assert chunkio.Field is Field and chunkio.Anchors is Anchors
