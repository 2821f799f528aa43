"""``convert_arrays`` of scanpy's pbmc68k_reduced cells as other tools store them: the counts
stay sparse in the native dataset (every row equals scipy's row densified), the label's
categories are carried over (united across a list of files), the external shuffle spills
sparse rows, an interrupted conversion resumes, the sources stay untouched."""

from __future__ import annotations

from pathlib import Path

import anndata_files as af
import killed_converter
import numpy as np
import pytest
from foreign_stores import snapshot
from killed_converter import manifest_lines

from chunkio import ChunkDataset, Output, convert_arrays, make_loader
from chunkio.convert import arrays
from chunkio.errors import ChunkioError

#: blocks of 2 chunks of 50 cells; source blocks of ~100 cells: several spill files and blocks
SMALL = {"STORE_BLOCK_BYTES": 2 * 50 * 1000, "STORE_READ_BYTES": 100 * 1000}
CHUNKS = Output(chunks=50)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SMALL.items():
        monkeypatch.setattr(arrays, name, value)


def check_converted(dst: Path, fixture: af.SingleCell, *, shuffled: bool) -> None:
    """Every stored row is scipy's row of its source cell; labels name the same category."""
    ds = ChunkDataset(dst)
    got = ds.read_batch(np.arange(len(ds)))
    order = got["source_index"] if shuffled else np.arange(700)
    if shuffled:
        assert sorted(order.tolist()) == list(range(700))
    assert ds.layout.field("x").kind == "sparse" and got["x"].dtype == np.float32
    np.testing.assert_array_equal(got["x"], fixture.x[order].toarray())
    names = np.asarray(ds.categories("label"))[got["label"]]
    np.testing.assert_array_equal(names, fixture.labels["louvain"][order])
    csr = ChunkDataset(dst, sparse_batches="csr").read_batch([3, 699, 0])["x"]
    np.testing.assert_array_equal(csr.toarray(), fixture.x[order[[3, 699, 0]]].toarray())


#: every source shuffled into Zarr; in order into HDF5 from an HDF5 and a Zarr source by default,
#: from the other two under ``slow`` (the source's reading is the shuffled cases' as well)
PBMC_CASES = [
    *((name, True) for name in ("pbmc_legacy", "pbmc_h5ad", "pbmc_zarr_v3", "pbmc_zarr_sharded")),
    ("pbmc_h5ad", False),
    ("pbmc_zarr_v3", False),
    pytest.param("pbmc_legacy", False, marks=pytest.mark.slow),
    pytest.param("pbmc_zarr_sharded", False, marks=pytest.mark.slow),
]


def _case_id(value: object) -> str:
    if isinstance(value, bool):
        return "shuffled" if value else "in-order"
    return str(value)


@pytest.mark.parametrize(("name", "shuffle"), PBMC_CASES, ids=_case_id)
def test_converted_rows_equal_scipy_rows(
    name: str, shuffle: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fixture: af.SingleCell = request.getfixturevalue(name)
    before = snapshot(fixture.path)
    dst = tmp_path / ("out.zarr" if shuffle else "out.h5")
    result = convert_arrays(
        fixture.path, dst, fields=fixture.fields(), shuffle=shuffle, output=CHUNKS
    )
    assert result.written_blocks > 1
    check_converted(dst, fixture, shuffled=shuffle)
    in_place = ChunkDataset(fixture.path, fields=fixture.fields())
    assert ChunkDataset(dst).categories("label") == in_place.categories("label")
    assert snapshot(fixture.path) == before


def test_a_list_of_files_unites_the_categories(pbmc_split: af.SingleCell, tmp_path: Path) -> None:
    before = [snapshot(p) for p in pbmc_split.paths]
    dst = tmp_path / "split.zarr"
    convert_arrays(list(pbmc_split.paths), dst, fields=pbmc_split.fields(), output=CHUNKS)
    check_converted(dst, pbmc_split, shuffled=True)
    together = ChunkDataset(list(pbmc_split.paths), fields=pbmc_split.fields())
    assert ChunkDataset(dst).categories("label") == together.categories("label")
    assert [snapshot(p) for p in pbmc_split.paths] == before
    again = convert_arrays(list(pbmc_split.paths), dst, fields=pbmc_split.fields(), output=CHUNKS)
    assert again.unchanged


@pytest.mark.timeout(60)
def test_a_loader_over_the_converted_dataset(pbmc_h5ad: af.SingleCell, tmp_path: Path) -> None:
    dst = tmp_path / "l.zarr"
    convert_arrays(pbmc_h5ad.path, dst, fields=pbmc_h5ad.fields(), output=CHUNKS)
    seen = []
    for batch in make_loader(dst, batch_size=64, num_workers=2, seed=2):
        idx = batch["source_index"].numpy().copy()
        np.testing.assert_array_equal(batch["x"].numpy(), pbmc_h5ad.x[idx].toarray())
        seen.append(idx)
    assert sorted(np.concatenate(seen).tolist()) == list(range(700))


def test_a_csc_matrix_is_refused(pbmc_csc: af.SingleCell, tmp_path: Path) -> None:
    with pytest.raises(ChunkioError, match=r"(?i)csc"):
        convert_arrays(pbmc_csc.path, tmp_path / "c.zarr", fields=pbmc_csc.fields())
    assert not (tmp_path / "c.zarr").exists()


# -- kill and resume (RELIABILITY row 10), in the gather pass of the shuffle ------------------

SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[3])
from chunkio import Execution, Output, convert_arrays
from chunkio.convert import arrays
from chunkio.convert.shuffle.spill import SpilledSource

arrays.STORE_BLOCK_BYTES, arrays.STORE_READ_BYTES = {block}, {read}
real = SpilledSource.read_block


def slow(self, start, stop):
    time.sleep(0.1)
    return real(self, start, stop)


SpilledSource.read_block = slow
convert_arrays(sys.argv[1], sys.argv[2], fields={{"x": "X", "label": "obs/louvain"}},
               output=Output(chunks=50), execution=Execution(workers=1))
""".format(block=SMALL["STORE_BLOCK_BYTES"], read=SMALL["STORE_READ_BYTES"])


@pytest.mark.timeout(120)
def test_killed_then_rerun_equals_uninterrupted(pbmc_h5ad: af.SingleCell, tmp_path: Path) -> None:
    dst = tmp_path / "k.h5"
    support = str(Path(__file__).parents[1] / "support")
    args = [str(pbmc_h5ad.path), str(dst), support]
    killed_converter.run_and_kill(SCRIPT, args, dst, tmp_path, lambda: manifest_lines(dst) >= 2)
    result = convert_arrays(pbmc_h5ad.path, dst, fields=pbmc_h5ad.fields(), output=CHUNKS)
    assert result.resumed_blocks >= 2 and result.written_blocks >= 1
    ref = tmp_path / "ref.h5"
    convert_arrays(pbmc_h5ad.path, ref, fields=pbmc_h5ad.fields(), output=CHUNKS)
    assert dst.read_bytes() == ref.read_bytes()
    check_converted(dst, pbmc_h5ad, shuffled=True)


def test_the_cli_converts_several_files(pbmc_split: af.SingleCell, tmp_path: Path) -> None:
    from chunkio.diagnose.cli import main

    dst = tmp_path / "cli.zarr"
    words = ["convert", "arrays", *map(str, pbmc_split.paths), str(dst), "--no-progress"]
    assert main([*words, "--fields", "x=X", "label=obs/louvain", "--samples-per-chunk", "50"]) == 0
    check_converted(dst, pbmc_split, shuffled=True)
