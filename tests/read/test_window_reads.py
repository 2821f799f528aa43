"""Window fields' reads beyond the values (those are tests/read/test_windows.py's): output
buffers, empty batches, the counters each variable's reader keeps, prefetch hints, the sizes a
loader's cache is given, and the errors, each against NumPy indexing of the arrays h5py wrote
or counted from their chunking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import chunkio
from chunkio import ChunkDataset, Field
from chunkio.errors import MissingFieldError
from chunkio.read.base import ReadRequest

T = 60
LONG = "deep/" + "v" * 130  # a path past the 120 characters a reader's name keeps


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    rng = np.random.default_rng(2)
    data = {
        "a": rng.standard_normal((T, 30)).astype(np.float32),  # chunks of 10 rows
        "g.x/b": rng.integers(0, 1000, (T, 2, 2)).astype(np.float64),  # chunks of 7
        LONG: rng.standard_normal((T, 30)).astype(np.float32),  # chunks of 15
        "one": np.arange(T, dtype=np.int8),  # chunks of 1 row
    }
    path = tmp_path_factory.mktemp("w") / "w.h5"
    with h5py.File(path, "w") as f:
        for (name, values), rows in zip(data.items(), (10, 7, 15, 1), strict=True):
            f.create_dataset(name, data=values, chunks=(rows, *values.shape[1:]))
    return path, data


def _windows(path: Path, **kw: Any) -> ChunkDataset:
    fields = {"w": Field(["a", LONG], steps=[-2, 0, 1]), "b": Field("g.x/b", steps=[1])}
    return ChunkDataset(path, fields=fields, **kw)


def _reference(data: dict[str, Any], anchors: Any) -> dict[str, Any]:
    w = np.stack([np.stack([data[v][anchors + s] for v in ("a", LONG)], 1) for s in (-2, 0, 1)], 1)
    return {"w": w, "b": data["g.x/b"][anchors + 1][:, None]}


def test_output_buffers_are_filled_contiguous_or_not(store: Any) -> None:
    path, data = store
    ds = _windows(path, preload_bytes=0)
    idx = [40, 3, 3, 17, 0]
    anchors = ds.anchors[idx]
    want = _reference(data, anchors)
    given = np.full((5, 3, 2, 30), np.nan, np.float32)
    strided = np.full((5, 2, 2, 2), np.nan)[:, :1]  # the batch's shape, not C-contiguous
    # steps and batch rows that cannot be merged into one axis without a copy
    apart = np.full((5, 4, 2, 30), np.nan, np.float32)[:, :3]
    assert not strided.flags.c_contiguous and not apart.flags.c_contiguous
    got = ds.read_batch(idx, {"w": given, "b": strided})
    assert got["w"] is given and got["b"] is strided
    np.testing.assert_array_equal(given, want["w"])
    np.testing.assert_array_equal(strided, want["b"])
    assert ds.read_batch(idx, {"w": apart})["w"] is apart
    np.testing.assert_array_equal(apart, want["w"])


@pytest.mark.parametrize("preload", [0, 1 << 30])
def test_buffers_of_another_shape_or_dtype_are_refused(store: Any, preload: int) -> None:
    ds = _windows(store[0], preload_bytes=preload)
    for bad, what in ((np.zeros((2, 3, 2, 30), np.float64), "(2, 3, 2, 30) float64"),
                      (np.zeros((2, 3, 30), np.float32), "(2, 3, 30) float32")):  # fmt: skip
        with pytest.raises(ValueError) as info:
            ds.read_batch([1, 2], {"w": bad})
        assert (
            str(info.value)
            == f"output buffer for field 'w' must be (2, 3, 2, 30) float32; got {what}"
        )


def test_an_empty_batch_reads_nothing(store: Any) -> None:
    ds = _windows(store[0], preload_bytes=0)
    got = ds.read_batch([])
    assert got["w"].shape == (0, 3, 2, 30) and got["b"].shape == (0, 1, 2, 2)
    assert got["b"].dtype == np.float64
    assert ds.read_stats().chunks_read == 0


def test_each_variable_counts_its_chunks_under_its_array_name(store: Any) -> None:
    path, _ = store
    ds = _windows(path, preload_bytes=0, cache_bytes=1 << 20)
    idx = np.array([0, 30, 31, 50])
    anchors = ds.anchors[idx]
    ds.read_batch(idx)
    rows = {"a": anchors[:, None] + [-2, 0, 1], LONG: anchors[:, None] + [-2, 0, 1],
            "g.x/b": anchors[:, None] + 1}  # fmt: skip
    chunks = {"a": 10, LONG: 15, "g.x/b": 7}
    names = {"a": "v_a", LONG: "v_" + ("deep_" + "v" * 130)[:120], "g.x/b": "v_g_x_b"}
    expected = {names[v]: len(np.unique(r // chunks[v])) for v, r in rows.items()}
    stats = ds.read_stats()
    assert {k: v for k, v in stats.per_field.items() if k.startswith("v_")} == expected
    assert stats.chunks_read == sum(expected.values())


def test_prefetch_names_each_variables_chunks_the_cache_lacks(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = store
    ds = _windows(path, preload_bytes=0, cache_bytes=1 << 20)
    ds.read_batch([0])  # anchor 2: rows 0..3 of every variable are held
    core = ds._handle()
    asked: list[tuple[str, list[int]]] = []
    # a reader that fetches ahead (a remote store's), as far as the dataset can tell
    monkeypatch.setattr(type(core.reader), "prefetches", property(lambda self: True))
    monkeypatch.setattr(core.reader, "prefetch", lambda a, c: asked.append((a, list(c))))
    idx = [50, 1, 22, 4]  # anchor 6: its window's step +1 (row 7) is in chunk 1 of "g.x/b"
    anchors = ds.anchors[idx]
    ds.prefetch(idx)
    window = np.unique(anchors[:, None] + [-2, 0, 1])
    assert sorted(asked) == sorted(
        [
            ("a", [c for c in np.unique(window // 10).tolist() if c != 0]),
            (LONG, [c for c in np.unique(window // 15).tolist() if c != 0]),
            ("g.x/b", [c for c in np.unique((anchors + 1) // 7).tolist() if c != 0]),
        ]
    )


def test_a_field_transform_is_refused_by_the_reader(store: Any) -> None:
    field = _windows(store[0])._handle().field("w")
    with pytest.raises(TypeError, match=r"^field 'w': a field transform cannot apply to a window"):
        field.read(np.array([3]), None, ReadRequest(transform=object()))  # type: ignore[arg-type]


def test_field_transforms_name_a_field_that_exists_and_is_not_a_window(store: Any) -> None:
    from chunkio.transforms import Compose, RandomHorizontalFlip

    path = store[0]
    flip = Compose([RandomHorizontalFlip()], field="w")
    with pytest.raises(TypeError) as info:
        _windows(path, transform=flip)
    assert str(info.value) == (
        f"{path}: field 'w' is a window; field transforms apply to images "
        "(normalise windows with chunkio.Normalize)"
    )
    with pytest.raises(MissingFieldError, match=rf"^{path}: no field 'nope'; the dataset has"):
        _windows(path, transform=Compose([RandomHorizontalFlip()], field="nope"))


def test_samples_are_anchors_and_out_of_range_ones_name_the_file(store: Any) -> None:
    path, data = store
    ds = _windows(path)
    np.testing.assert_array_equal(ds.anchors, np.arange(2, T - 1))
    assert len(ds) == T - 3
    np.testing.assert_array_equal(ds.read_batch([-1])["b"][0, 0], data["g.x/b"][T - 1])
    with pytest.raises(IndexError, match=rf"^{path}: .*{T - 3}"):
        ds.read_batch([T - 3])
    plain = ChunkDataset(path, fields=["a", "g.x/b"])
    assert plain.anchors is None and len(plain) == T
    np.testing.assert_array_equal(plain.read_batch([59, 7])["a"], data["a"][[59, 7]])
    with pytest.raises(IndexError, match=f"{T}"):
        plain.read_batch([T])
    assert plain.chunk_sizes().sum() == T
    assert set(plain.chunk_sizes()[:-1].tolist()) == {plain.samples_per_chunk}


def test_the_bytes_a_loaders_cache_is_sized_by(store: Any) -> None:
    """Windows: a slot holds one row chunk of every array the windows read (30 float32 + 4
    float64 + 30 float32 = 272 bytes a row), one order chunk and the chunks its windows reach;
    a loader holding every chunk needs a slot per chunk of the finest-chunked array (7 rows:
    9 chunks) and one more."""
    path, _ = store
    ds = _windows(path)
    spc, edge = ds.samples_per_chunk, ds.samples.edge_chunks
    assert spc != 7  # the order follows the bulk of the data, not the finest chunks
    assert ds.chunk_nbytes() == 272 * spc * (1 + edge)
    assert ds.held_nbytes() == 272 * spc * (9 + 1)
    only_a = ChunkDataset(path, fields={"w": Field("a", steps=[0, 1])})
    assert only_a.held_nbytes() == 120 * only_a.samples_per_chunk * (6 + 1)  # chunks of 10
    plain = ChunkDataset(path, fields=["a", "g.x/b"])
    assert plain.chunk_nbytes() == (120 + 32) * plain.samples_per_chunk
    rows = min(plain.layout.rows_per_chunk(f) for f in plain.layout.fields)
    assert plain.held_nbytes() == plain.chunk_nbytes() * (-(-T // rows) + 1)
    rowwise = ChunkDataset(path, fields=["a", "one"])  # an array in chunks of one row
    assert rowwise.held_nbytes() == rowwise.chunk_nbytes() * (T + 1)


def test_public_window_names() -> None:
    assert chunkio.Field is Field
