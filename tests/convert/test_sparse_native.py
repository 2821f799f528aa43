"""``write_arrays`` with a scipy CSR matrix: a sparse field stored natively (values and columns
on one ragged placement, :mod:`chunkio.convert.engine.sparse`), read back as scipy's rows
densified or as CSR batches; bad matrices refused naming the field and the row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from pool_counter import pools_fixture  # noqa: F401 (the pools fixture)

from chunkio import ChunkDataset, Execution, Output, make_loader
from chunkio.convert import write_arrays
from chunkio.convert.engine import workers as pool_policy
from chunkio.errors import FormatError, SourceError

SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}
N, COLS = 300, 97


def matrix(kind: Any = sp.csr_matrix) -> Any:
    """300 x 97 float32, about 8% stored, rows 10-19 empty, and a sample chunk of empty rows."""
    m = sp.random(N, COLS, density=0.08, format="csr", dtype=np.float32, random_state=3)
    m = m.tolil()
    m[10:20] = 0
    m[200:216] = 0
    return kind(m.tocsr())


def read_all(path: Path, **options: Any) -> dict[str, Any]:
    ds = ChunkDataset(path, **options)
    out = ds.read_batch(np.arange(len(ds)))
    ds.close()
    return out


def expected_order(got: dict[str, Any], shuffle: bool) -> np.ndarray:
    return got["source_index"] if shuffle else np.arange(N)


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in-order"])
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_round_trip_equals_scipy_rows(fmt: str, shuffle: bool, tmp_path: Path) -> None:
    m = matrix()
    kept = (m.indptr.copy(), m.indices.copy(), m.data.copy())
    labels = np.arange(N) % 7
    dst = tmp_path / f"s{SUFFIX[fmt]}"
    result = write_arrays(dst, {"x": m, "label": labels}, shuffle=shuffle, output=Output(chunks=16))
    assert result.written_blocks > 1
    got = read_all(dst)
    order = expected_order(got, shuffle)
    np.testing.assert_array_equal(got["x"], m[order].toarray())
    assert got["x"].dtype == np.float32
    np.testing.assert_array_equal(got["label"], labels[order])
    rows = [5, 3, 3, 299, 12, 200]
    batch = ChunkDataset(dst, sparse_batches="csr").read_batch(rows)["x"]
    np.testing.assert_array_equal(batch.toarray(), m[order[rows]].toarray())
    assert batch.to_torch().to_dense().numpy().tolist() == m[order[rows]].toarray().tolist()
    for before, after in zip(kept, (m.indptr, m.indices, m.data), strict=True):
        np.testing.assert_array_equal(before, after)  # the source is untouched


def test_csr_array_and_int_values(tmp_path: Path) -> None:
    m = sp.csr_array(matrix().astype(np.int16))
    write_arrays(tmp_path / "a.zarr", {"x": m}, shuffle=False, output=Output(chunks=32))
    got = read_all(tmp_path / "a.zarr")
    assert got["x"].dtype == np.int16
    np.testing.assert_array_equal(got["x"], m.toarray())


def test_the_stored_arrays_and_their_checksums(tmp_path: Path) -> None:
    """Four arrays per sparse field, the columns int32 beside the values, every chunk
    checksummed as a dense field's; a sample chunk's values start a chunk of their own."""
    dst = tmp_path / "c.zarr"
    write_arrays(dst, {"x": matrix(), "y": np.arange(N)}, shuffle=False, output=Output(chunks=32))
    meta = json.loads((dst / "zarr.json").read_text())["attributes"]["chunkio"]
    assert meta["fields"]["x"] == {"dtype": "<f4", "sample_shape": [COLS], "kind": "sparse"}

    def array(name: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((dst / name / "zarr.json").read_text())
        return doc

    values, columns = array("x__values"), array("x__indices")
    assert columns["data_type"] == "int32" and values["shape"] == columns["shape"]
    names = [[c["name"] for c in array(a)["codecs"]] for a in ("x__values", "x__indices", "y")]
    assert names[0] == names[1] == names[2] and "crc32c" in names[0]
    offsets = ChunkDataset(dst)._handle().field("x").starts  # type: ignore[attr-defined]
    step = values["chunk_grid"]["configuration"]["chunk_shape"][0]
    assert all(int(offsets[k]) % step == 0 for k in range(0, N, 32))


@pytest.fixture
def eager_pools(pools: list[int], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pool counter, with pools started however short the work."""
    monkeypatch.setattr(pool_policy, "POOL_MIN_SECONDS", 0.0)
    return pools


@pytest.mark.timeout(60)
def test_worker_processes_write_the_same_dataset(tmp_path: Path, eager_pools: list[int]) -> None:
    m = matrix()
    one = tmp_path / "one.h5"
    write_arrays(one, {"x": m}, output=Output(chunks=16), execution=Execution(workers=1))
    two = tmp_path / "two.h5"
    write_arrays(two, {"x": m}, output=Output(chunks=16), execution=Execution(workers=2))
    assert eager_pools == [2]
    assert two.read_bytes() == one.read_bytes()


@pytest.mark.timeout(60)
def test_a_loader_with_workers_serves_every_row_once(tmp_path: Path) -> None:
    m = matrix()
    dst = tmp_path / "l.zarr"
    write_arrays(dst, {"x": m}, output=Output(chunks=16))
    loader = make_loader(dst, batch_size=40, num_workers=2, seed=1)
    seen = []
    for batch in loader:
        x, idx = batch["x"].numpy(), batch["source_index"].numpy()
        np.testing.assert_array_equal(x, m[idx].toarray())
        seen.append(idx.copy())  # batches may reuse their buffers
    assert sorted(np.concatenate(seen).tolist()) == list(range(N))


def _broken(part: str) -> Any:
    m = matrix()
    if part == "indptr":
        m.indptr[41] = m.indptr[43]  # row 40 ends after row 41 does: decreases at row 41
    elif part == "indices":
        m.indices[m.indptr[57]] = COLS  # row 57's first column outside the matrix
    else:
        m.data = m.data[:-1]
    return m


@pytest.mark.parametrize(
    ("part", "match"),
    [
        ("indptr", r"field 'x', row 41: indptr decreases"),
        ("indices", r"field 'x', row 57: column index 97 is outside the matrix's 97 columns"),
        ("lengths", r"field 'x'.*data and indices must have the same length"),
    ],
)
def test_a_broken_matrix_is_refused_naming_field_and_row(
    part: str, match: str, tmp_path: Path
) -> None:
    dst = tmp_path / "b.zarr"
    with pytest.raises(SourceError, match=match):
        write_arrays(dst, {"x": _broken(part)})
    assert not dst.exists()


@pytest.mark.parametrize("kind", [sp.csc_matrix, sp.coo_matrix, sp.lil_array, sp.csc_array])
def test_other_sparse_formats_are_refused_naming_tocsr(kind: Any, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"field 'x': a sparse field must be a CSR.*\.tocsr\(\)"):
        write_arrays(tmp_path / "o.zarr", {"x": kind(matrix())})
    assert not (tmp_path / "o.zarr").exists()


def test_unequal_lengths_name_the_fields(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="same number of samples"):
        write_arrays(tmp_path / "u.zarr", {"x": matrix(), "y": np.arange(N - 1)})


def test_a_loader_resumes_and_ranks_split_the_rows(tmp_path: Path) -> None:
    """The chunk-aware order over the sparse field's sample chunks: a stopped loader resumes
    exactly; two DDP ranks read disjoint rows covering the dataset."""
    from resume_harness import assert_resume_equals_uninterrupted

    import chunkio

    dst = tmp_path / "r.zarr"
    write_arrays(dst, {"x": matrix()}, output=Output(chunks=16))

    def make(**ordering: Any) -> Any:
        return make_loader(
            dst, 32, num_workers=0, seed=1, workers=chunkio.Workers(copy=True),
            ordering=chunkio.Ordering(**ordering),
        )  # fmt: skip

    full, _ = assert_resume_equals_uninterrupted(make, stop=4)
    assert sorted(i for b in full for i in b["source_index"]) == list(range(N))
    ranks = [
        [i for b in make(rank=r, world_size=2) for i in b["source_index"].tolist()] for r in (0, 1)
    ]
    assert not set(ranks[0]) & set(ranks[1])
    assert len(ranks[0]) == len(ranks[1]) >= N // 2 - 32


def test_verify_names_the_row_whose_column_is_outside(tmp_path: Path) -> None:
    """``chunkio verify`` cross-checks a sparse field: offsets and counts as a ragged field's,
    and every column inside the matrix (what checksums cannot catch: a wrong matrix written)."""
    import h5py

    from chunkio.diagnose.cli import main

    dst = tmp_path / "v.h5"
    write_arrays(dst, {"x": matrix()}, shuffle=False, output=Output(chunks=16, checksum=False))
    assert main(["verify", str(dst), "--no-progress"]) == 0
    with h5py.File(dst, "r+") as f:
        f["x__indices"][int(f["x__offsets"][37])] = COLS + 3
    assert main(["verify", str(dst), "--no-progress"]) == 1
    with pytest.raises(FormatError, match=r"sparse field 'x', row 37: column index 100"):
        ChunkDataset(dst).read_batch([37])


def test_written_in_shards_where_the_dense_fields_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_conversion(pack=True)`` (what ``convert_images`` does): a sparse field large enough
    is written directly as shards of whole sample-chunk groups, its values and columns alike."""
    from chunkio.convert import pipeline, run_conversion
    from chunkio.convert.array_source import ArraySource
    from chunkio.convert.shuffle.order import ShuffledSource

    monkeypatch.setattr(pipeline, "SHARD_BYTES", 1_300_000)  # 3 chunks of 400 kB a shard
    m = sp.random(1000, 2000, density=0.25, format="csr", dtype=np.float32, random_state=1)
    dst = tmp_path / "sh.zarr"
    source = ShuffledSource(ArraySource({"x": m, "y": np.arange(1000)}), 0)
    run_conversion(source, dst, output=Output(chunks=200), pack=True)
    got = read_all(dst)
    np.testing.assert_array_equal(got["x"], m[got["source_index"]].toarray())
    for name in ("x__values", "x__indices"):
        codecs = json.loads((dst / name / "zarr.json").read_text())["codecs"]
        assert codecs[0]["name"] == "sharding_indexed"
        assert sorted(p.name for p in (dst / name).glob("c.*")) == ["c.0", "c.1"]
