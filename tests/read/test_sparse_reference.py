"""Sparse rows against scipy: any index list, both batch kinds, the caches' counters, hints.

Random CSR matrices (rows of 0 to 8 values; canonical, or with columns unsorted and repeated)
are written by h5py with ``data`` and ``indices`` chunked apart (rows cross chunks, some span
several). Every batch (unsorted, repeated, empty; dense and ``"csr"``; decoded-chunk cache on
and off) equals scipy's ``m[idx]``: densified, or its ``indptr``, ``indices`` and ``data``.
The chunks a batch decodes, the cache hits and the prefetch hints are counted from scipy's
``indptr``, not from the reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chunkio
from chunkio.errors import ChunkReadError, FormatError
from chunkio.read.base import ReadRequest
from chunkio.read.sparse import CSRBatch


def _write(path: Path, m: sp.csr_matrix, data_chunk: int, indices_chunk: int) -> str:
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": list(m.shape)})
        g.create_dataset("data", data=m.data, chunks=(data_chunk,), maxshape=(None,))
        g.create_dataset("indices", data=m.indices, chunks=(indices_chunk,), maxshape=(None,))
        g.create_dataset("indptr", data=m.indptr)
    return str(path)


@st.composite
def matrices(draw: st.DrawFn) -> sp.csr_matrix:
    rows, cols = draw(st.integers(1, 20)), draw(st.integers(1, 9))
    canonical = draw(st.booleans())
    indptr, indices = [0], []
    for _ in range(rows):
        if canonical:
            row = sorted(draw(st.sets(st.integers(0, cols - 1), max_size=min(cols, 8))))
        else:  # unsorted, repeated columns (scipy adds repeats up when densifying)
            row = draw(st.lists(st.integers(0, cols - 1), max_size=8))
        indices += row
        indptr.append(len(indices))
    data = np.arange(1, len(indices) + 1, dtype=np.float32) * 3
    return sp.csr_matrix(
        (data, np.asarray(indices, np.int32), np.asarray(indptr, np.int64)), shape=(rows, cols)
    )


@settings(max_examples=40, deadline=None)
@given(
    m=matrices(),
    data_chunk=st.integers(1, 9),
    indices_chunk=st.integers(1, 9),
    picks=st.lists(st.integers(0, 10_000), max_size=30),
    cache=st.booleans(),
)
def test_any_rows_equal_scipys_rows_dense_and_csr(
    m: sp.csr_matrix, data_chunk: int, indices_chunk: int, picks: list[int], cache: bool
) -> None:
    idx = [p % m.shape[0] for p in picks]
    expected = m[idx] if idx else sp.csr_matrix((0, m.shape[1]), dtype=m.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp) / "m.h5", m, data_chunk, indices_chunk)
        kw: dict[str, Any] = {"fields": {"m": "m"}, "cache_bytes": (1 << 20) * cache}
        ds = chunkio.ChunkDataset(path, **kw)
        ds.read_batch([])  # opens the handle (indptr read whole)
        base = ds.read_stats().chunks_read
        dense = ds.read_batch(idx)["m"]
        positions = [p for r in idx for p in range(m.indptr[r], m.indptr[r + 1])]
        chunks = {p // data_chunk for p in positions}, {p // indices_chunk for p in positions}
        assert ds.read_stats().chunks_read - base == len(chunks[0]) + len(chunks[1])
        csr = chunkio.ChunkDataset(path, sparse_batches="csr", **kw).read_batch(idx)["m"]
    assert dense.dtype == np.float32 and dense.shape == (len(idx), m.shape[1])
    np.testing.assert_array_equal(dense, expected.toarray())
    assert isinstance(csr, CSRBatch) and csr.shape == (len(idx), m.shape[1])
    assert csr.indptr.dtype == csr.indices.dtype == np.int64
    np.testing.assert_array_equal(csr.indptr, expected.indptr)
    np.testing.assert_array_equal(csr.indices, expected.indices)
    np.testing.assert_array_equal(csr.data, expected.data)
    np.testing.assert_array_equal(csr.toarray(), expected.toarray())


# -- one fixed matrix: counters, buffers, hints ---------------------------------------------------


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[str, sp.csr_matrix]:
    """40 rows of 0-6 values over 12 columns; data in chunks of 5, indices in chunks of 7."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 7, 40)
    lengths[[4, 5, 6]] = 0  # empty rows
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(12, n, replace=False)) for n in lengths])
    data = rng.integers(1, 50, indptr[-1]).astype(np.int16)
    m = sp.csr_matrix((data, indices.astype(np.int32), indptr), shape=(40, 12))
    return _write(tmp_path / "t.h5", m, 5, 7), m


def _chunks(m: sp.csr_matrix, idx: list[int], step: int) -> list[int]:
    """The chunks of ``step`` values that rows ``idx`` of ``m`` store values in."""
    positions = [p for r in idx for p in range(m.indptr[r], m.indptr[r + 1])]
    return sorted({p // step for p in positions})


def test_each_chunk_is_decoded_once_and_then_served_from_the_cache(tiny: Any) -> None:
    path, m = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    ds.read_batch([])  # opens the handle, which reads indptr whole
    before = ds.read_stats()
    base = (before.chunks_read, before.rows_decoded, before.cache_hits)
    idx = [33, 2, 17, 2, 30, 9]
    data, indices = _chunks(m, idx, 5), _chunks(m, idx, 7)
    np.testing.assert_array_equal(ds.read_batch(idx)["m"], m[idx].toarray())
    stats = ds.read_stats()
    assert stats.chunks_read - base[0] == len(data) + len(indices)
    decoded = sum(min(5, m.nnz - 5 * c) for c in data) + sum(min(7, m.nnz - 7 * c) for c in indices)
    assert stats.rows_decoded - base[1] == decoded
    assert stats.cache_hits == base[2]
    assert stats.per_field["m/data"] == len(data) and stats.per_field["m/indices"] == len(indices)
    read, hits = stats.chunks_read, stats.cache_hits
    np.testing.assert_array_equal(ds.read_batch(idx[::-1])["m"], m[idx[::-1]].toarray())
    again = ds.read_stats()
    assert again.chunks_read == read  # nothing decoded twice
    assert again.cache_hits - hits == len(data) + len(indices)
    assert again.per_field["m/data"] == len(data)  # counts add up over batches
    assert again.per_field["m/indices"] == len(indices)


def test_rows_without_values_read_as_zeros(tiny: Any) -> None:
    path, _ = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    got = ds.read_batch([5, 4, 6])["m"]
    assert got.dtype == np.int16 and got.shape == (3, 12) and not got.any()
    assert ds.read_batch([])["m"].shape == (0, 12)
    csr = chunkio.ChunkDataset(path, fields={"m": "m"}, sparse_batches="csr").read_batch([4, 6])
    assert csr["m"].indptr.tolist() == [0, 0, 0] and csr["m"].data.dtype == np.int16


def test_an_output_buffer_is_cleared_and_filled_or_refused(tiny: Any) -> None:
    path, m = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    buf = np.full((3, 12), 99, np.int16)
    got = ds.read_batch([1, 5, 39], {"m": buf})["m"]
    assert got is buf
    np.testing.assert_array_equal(buf, m[[1, 5, 39]].toarray())
    for bad, what in ((np.zeros((3, 11), np.int16), "(3, 11) int16"),
                      (np.zeros((3, 12), np.int32), "(3, 12) int32")):  # fmt: skip
        with pytest.raises(ValueError) as info:
            ds.read_batch([1, 5, 39], {"m": bad})
        assert str(info.value) == f"output buffer for field 'm' must be (3, 12) int16; got {what}"


def test_a_field_transform_is_refused_for_sparse_rows(tiny: Any) -> None:
    path, _ = tiny
    field = chunkio.ChunkDataset(path, fields={"m": "m"})._handle().field("m")
    with pytest.raises(TypeError, match=r"^field 'm': a field transform cannot apply to a sparse"):
        field.read(np.array([1]), None, ReadRequest(transform=object()))  # type: ignore[arg-type]


def test_prefetch_names_the_chunks_of_both_arrays_the_caches_lack(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, m = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    ds.read_batch([0])  # row 0's chunks are held
    core = ds._handle()
    asked: list[tuple[str, list[int]]] = []
    # a reader that fetches ahead (a remote store's), as far as the dataset can tell
    monkeypatch.setattr(type(core.reader), "prefetches", property(lambda self: True))
    monkeypatch.setattr(core.reader, "prefetch", lambda a, c: asked.append((a, list(c))))
    idx = [38, 0, 21, 21, 7]
    ds.prefetch(idx)
    held_d, held_i = set(_chunks(m, [0], 5)), set(_chunks(m, [0], 7))
    assert asked == [
        ("m/data", [c for c in _chunks(m, idx, 5) if c not in held_d]),
        ("m/indices", [c for c in _chunks(m, idx, 7) if c not in held_i]),
    ]
    assert ds.read_stats().chunks_read == len(held_d) + len(held_i) + 1  # + indptr: no reads
    fresh = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    reader = fresh._handle().reader
    monkeypatch.setattr(reader, "prefetch", lambda a, c: asked.append((a, list(c))))
    asked.clear()
    fresh.prefetch([4, 5, 6])  # rows without values, no chunk held: nothing to fetch
    assert asked == [("m/data", []), ("m/indices", [])]


def test_a_prefetch_hint_to_a_reader_that_cannot_prefetch_does_nothing(tiny: Any) -> None:
    path, _ = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    core = ds._handle()
    assert not core.reader.prefetches  # a local file: the default, nothing fetched ahead
    field = core.field("m")  # reads indptr
    read = ds.read_stats().chunks_read
    field.prefetch(np.array([0, 9, 33]))
    assert ds.read_stats().chunks_read == read


def test_a_corrupt_chunk_is_an_error_and_never_served_from_the_cache(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    m = sp.random(30, 10, density=0.5, format="csr", dtype=np.float64, random_state=rng)
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": list(m.shape)})
        g.create_dataset("data", data=m.data, chunks=(10,), fletcher32=True)
        g.create_dataset("indices", data=m.indices, chunks=(10,))
        g.create_dataset("indptr", data=m.indptr)
    with h5py.File(path, "r") as f:
        info = f["m/data"].id.get_chunk_info_by_coord((20,))  # data chunk 2
        offset = int(info.byte_offset) + 3
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0xFF]))
    ds = chunkio.ChunkDataset(str(path), fields={"m": "m"}, cache_bytes=1 << 20)
    rows = [r for r in range(30) if m.indptr[r] < 40 and m.indptr[r + 1] > m.indptr[r]]
    with pytest.raises(ChunkReadError):
        ds.read_batch(rows)  # data chunks 0..3 in one run, chunk 2 corrupt
    good = [r for r in rows if m.indptr[r + 1] <= 20]  # rows in data chunks 0 and 1 only
    assert good
    np.testing.assert_array_equal(ds.read_batch(good)["m"], m[good].toarray())
    with pytest.raises(ChunkReadError):
        ds.read_batch(rows)


def test_a_row_longer_than_several_chunks(tmp_path: Path) -> None:
    # row 1 holds 23 values: data chunks of 4 and indices chunks of 3 it spans whole
    lengths = [2, 23, 0, 5, 1]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.arange(n) * 2 for n in lengths]).astype(np.int32)
    m = sp.csr_matrix((np.arange(indptr[-1], dtype=np.float64) + 1, indices, indptr), (5, 50))
    path = _write(tmp_path / "long.h5", m, 4, 3)
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    ds.read_batch([])
    base = ds.read_stats().chunks_read
    for idx in ([1], [3, 1], [4, 1, 0], [2]):
        np.testing.assert_array_equal(ds.read_batch(idx)["m"], m[idx].toarray())
    assert ds.read_stats().chunks_read - base == len(_chunks(m, [0, 1, 3, 4], 4)) + len(
        _chunks(m, [0, 1, 3, 4], 3)
    )


def test_csr_batches_densify_and_become_torch_tensors_with_repeated_columns() -> None:
    # 5 columns, the last two empty: the shape comes from the matrix, not from the values
    batch = CSRBatch(np.array([0, 3, 3, 4]), np.array([2, 0, 2, 1]), np.array([1, 2, 4, 8]), (3, 5))
    expected = [[2, 0, 5, 0, 0], [0, 0, 0, 0, 0], [0, 8, 0, 0, 0]]
    dense = batch.toarray()
    assert dense.dtype == batch.data.dtype and dense.tolist() == expected
    t = batch.to_torch()
    assert t.layout == torch.sparse_csr and tuple(t.shape) == (3, 5)
    assert t.to_dense().tolist() == expected


def test_to_torch_keeps_torchs_beta_notice_out_of_a_fresh_process() -> None:
    # torch warns once per process: only a fresh one shows whether to_torch lets it through
    code = (
        "import numpy as np; from chunkio.read.sparse import CSRBatch; "
        "CSRBatch(np.array([0, 1]), np.array([0]), np.array([1.0]), (1, 2)).to_torch()"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_with_the_cache_off_a_chunk_is_decoded_again_after_another(tiny: Any) -> None:
    path, m = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=0)
    first = [r for r in range(40) if m.indptr[r + 1] <= 5 and m.indptr[r + 1] > m.indptr[r]]
    later = [r for r in range(40) if m.indptr[r] >= 35 and m.indptr[r + 1] <= 40]
    assert first and later  # rows in data chunk 0 only, and in data chunk 7 only
    ds.read_batch([])
    counts = []
    for idx in (first, later, first):
        np.testing.assert_array_equal(ds.read_batch(idx)["m"], m[idx].toarray())
        counts.append(ds.read_stats().per_field["m/data"])
    assert counts == [1, 2, 3]  # one slot: chunk 0 is gone when chunk 7 came


def _matrix_file(tmp_path: Path, indices: list[int], indptr: list[int], cols: int) -> str:
    path = tmp_path / "h.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("m")
        g.attrs.update({"encoding-type": "csr_matrix", "shape": [len(indptr) - 1, cols]})
        g.create_dataset("data", data=np.arange(1, len(indices) + 1, dtype=np.float32))
        g.create_dataset("indices", data=np.asarray(indices, np.int32))
        g.create_dataset("indptr", data=np.asarray(indptr, np.int64))
    return str(path)


def test_two_values_of_one_row_in_one_column_add_up(tmp_path: Path) -> None:
    path = _matrix_file(tmp_path, [1, 1, 0], [0, 2, 3], 3)
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    assert ds.read_batch([0])["m"].tolist() == [[0.0, 3.0, 0.0]]  # 1 + 2, as scipy adds them


def test_a_column_index_equal_to_the_column_count_names_its_row(tmp_path: Path) -> None:
    path = _matrix_file(tmp_path, [0, 1, 2, 4, 1], [0, 3, 4, 5], 4)
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    assert ds.read_batch([0, 2])["m"].tolist() == [[1, 2, 3, 0], [0, 5, 0, 0]]
    with pytest.raises(FormatError) as info:
        ds.read_batch([2, 1])
    assert str(info.value) == (
        f"{path}: sparse group 'm', row 1: column index 4 is outside the matrix's 4 columns "
        "(a corrupt indices array)"
    )


def test_a_cache_of_one_order_chunk_holds_its_data_and_indices_chunks(tmp_path: Path) -> None:
    """``cache_bytes = chunk_nbytes()`` holds one order chunk: the ``order_group + 1`` data
    chunks its rows reach (the last row runs into the next) and the indices chunks over the
    same values; reading another order chunk's rows evicts them."""
    lengths = np.ones(2048, np.int64)
    lengths[510], lengths[1532] = 3, 5  # values 510..512 and 1534..1538: into the next chunk
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = (np.arange(indptr[-1]) % 7).astype(np.int32)
    m = sp.csr_matrix((np.ones(indptr[-1], np.float32), indices, indptr), shape=(2048, 7))
    path = _write(tmp_path / "o.h5", m, 512, 256)
    probe = chunkio.ChunkDataset(path, fields={"m": "m"})
    assert probe.layout.field("m").order_group == 1  # 512 rows a data chunk
    ds = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=probe.chunk_nbytes())
    ds.read_batch([])
    first = [r for r in range(2048) if indptr[r] < 512]  # order chunk 0: data chunks 0, 1
    third = [r for r in range(2048) if 1024 <= indptr[r] < 1536]  # data chunks 2, 3
    stats = ds.read_stats()
    decoded = []
    for idx in (first[:200], first[200:], first, third, first):
        before = (stats.per_field.get("m/data", 0), stats.per_field.get("m/indices", 0))
        np.testing.assert_array_equal(ds.read_batch(idx)["m"], m[idx].toarray())
        after = (stats.per_field["m/data"], stats.per_field["m/indices"])
        decoded.append((after[0] - before[0], after[1] - before[1]))
    # indices: order chunk 0's values 0..512 lie in chunks 0, 1, 2 of 256; the third order
    # chunk's 1024..1538 in 4, 5, 6: three slots, then all three evicted
    assert decoded == [(1, 1), (1, 2), (0, 0), (2, 3), (2, 3)]


def test_rows_crossing_into_chunks_held_in_slots_apart(tmp_path: Path) -> None:
    """A row's values are read as one run of the cache from its first value while the chunks
    it crosses into sit in the next slots; when they sit elsewhere (a chunk held from an
    earlier batch, the next one decoded into another slot) its values are found one by one."""
    lengths = [3, 3, 3, 3, 8, 3]  # chunks of 5 values: row 3 crosses 1 -> 2, row 4 2 -> 3 -> 4
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([(np.arange(n) * 3 + n) % 11 for n in lengths]).astype(np.int32)
    m = sp.csr_matrix((np.arange(indptr[-1], dtype=np.float32) + 1, indices, indptr), (6, 11))
    path = _write(tmp_path / "apart.h5", m, 5, 5)
    dense = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20)
    csr = chunkio.ChunkDataset(path, fields={"m": "m"}, cache_bytes=1 << 20, sparse_batches="csr")
    for ds in (dense, csr):
        for idx in ([2], [0], [3], [1, 3, 0], [5], [4], [4, 3, 2, 1, 0, 5]):
            got = ds.read_batch(idx)["m"]
            if isinstance(got, CSRBatch):
                np.testing.assert_array_equal(got.indices, m[idx].indices)
                got = got.toarray()
            np.testing.assert_array_equal(got, m[idx].toarray())
    # the set-up reaches that case: chunk 1 (row 2, first batch) took slot 0, chunk 0 slot 1,
    # so row 3 found chunk 2 in slot 2, not in slot 0's next
    cache = dense._handle().field("m").data.cache
    assert [cache._slot_of[c] for c in (1, 0, 2)] == [0, 1, 2]


def test_an_output_buffer_in_fortran_order_is_filled_in_place(tiny: Any) -> None:
    path, m = tiny
    ds = chunkio.ChunkDataset(path, fields={"m": "m"})
    out = np.full((3, 12), 9, np.int16, order="F")
    got = ds.read_batch([7, 0, 7], out={"m": out})["m"]
    assert got is out
    np.testing.assert_array_equal(out, m[[7, 0, 7]].toarray())
