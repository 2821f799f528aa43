"""chunkio on scanpy's pbmc68k_reduced cells as other tools store them: every row equals
scipy's row densified, labels name the same categories, sources stay untouched."""

from __future__ import annotations

from typing import Any

import anndata_files as af
import numpy as np
import pytest
from foreign_stores import snapshot

import chunkio
from chunkio.errors import ChunkioError

ROWS = ([0, 699, 5, 5, 350, 1], list(range(100, 164)), [420])


def _check(ds: Any, fixture: af.SingleCell, rows: list[int], label: str = "louvain") -> None:
    batch = ds.read_batch(rows)
    expected = fixture.x[rows]
    np.testing.assert_array_equal(batch["x"], expected.toarray() if hasattr(expected, "toarray")
                                  else expected)  # fmt: skip
    assert batch["x"].dtype == np.float32
    names = np.asarray(ds.categories("label"))[np.asarray(batch["label"])]
    np.testing.assert_array_equal(names, fixture.labels[label][rows])


def test_every_csr_layout_reads_scipy_rows(pbmc_csr: af.SingleCell) -> None:
    before = snapshot(pbmc_csr.path)
    ds = chunkio.ChunkDataset(pbmc_csr.path, fields=pbmc_csr.fields())
    assert len(ds) == 700
    for rows in ROWS:
        _check(ds, pbmc_csr, rows)
    np.testing.assert_array_equal(
        np.asarray(ds.categories("label"))[ds.labels()], pbmc_csr.labels["louvain"]
    )
    assert snapshot(pbmc_csr.path) == before


@pytest.mark.parametrize("column", ["bulk_labels", "phase"])
def test_other_categorical_columns(pbmc_h5ad: af.SingleCell, column: str) -> None:
    ds = chunkio.ChunkDataset(pbmc_h5ad.path, fields=pbmc_h5ad.fields(column))
    _check(ds, pbmc_h5ad, ROWS[0], label=column)


def test_dense_x(pbmc_dense: af.SingleCell) -> None:
    ds = chunkio.ChunkDataset(pbmc_dense.path, fields=pbmc_dense.fields())
    for rows in ROWS:
        _check(ds, pbmc_dense, rows)


def test_csc_is_refused_naming_the_conversion(pbmc_csc: af.SingleCell) -> None:
    with pytest.raises(ChunkioError, match=r"(?i)csc") as err:
        chunkio.ChunkDataset(pbmc_csc.path, fields=pbmc_csc.fields())
    assert str(pbmc_csc.path) in str(err.value)


def test_split_files_are_one_dataset_with_one_category_list(pbmc_split: af.SingleCell) -> None:
    """Three files whose categories differ in order and subset: one dataset, codes remapped
    to one list, every cell's label the name it has in its own file."""
    ds = chunkio.ChunkDataset([str(p) for p in pbmc_split.paths], fields=pbmc_split.fields())
    assert len(ds) == 700
    for rows in ([0, 699, 350, 1, 1], list(range(0, 700, 7))):
        _check(ds, pbmc_split, rows)
    names = np.asarray(ds.categories("label"))
    assert sorted(names, key=int) == [str(i) for i in range(11)]
    np.testing.assert_array_equal(names[ds.labels()], pbmc_split.labels["louvain"])
