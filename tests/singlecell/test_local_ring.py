"""A local h5ad through the ring's workers: no batches hinted ahead, every row exact."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anndata_files as af
import numpy as np
import pytest

import chunkio
from chunkio.transport.iterator import _Session


def test_a_local_h5ad_is_read_without_hints_ahead(
    pbmc_h5ad: af.SingleCell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local file hands its description to the workers (documents) but is no network read:
    the main process tells the workers no batches ahead (a message per worker and batch, for
    a prefetch that fetches nothing), and the epoch still gives every row once, exactly."""
    hinted: list[int] = []
    hint = _Session._hint

    def counted(self: Any, indices: Any, parts: Any, seq: int) -> None:
        hinted.append(seq)
        hint(self, indices, parts, seq)

    monkeypatch.setattr(_Session, "_hint", counted)
    fields = pbmc_h5ad.fields()
    ds = chunkio.ChunkDataset(pbmc_h5ad.path, fields=fields)
    assert ds.reader_options.documents is not None and not ds.remote
    loader = chunkio.make_loader(
        pbmc_h5ad.path, batch_size=64, fields=fields, shuffle=True, num_workers=2,
        workers=chunkio.Workers(hold_bytes=0, context="fork"),
    )  # fmt: skip
    assert loader.transport == "ring"
    dense = pbmc_h5ad.x.toarray()
    names = pbmc_h5ad.labels["louvain"]
    want = Counter((dense[i].tobytes(), names[i]) for i in range(len(dense)))
    got: Counter[tuple[bytes, Any]] = Counter()
    categories = np.asarray(ds.categories("label"))
    for x, label in loader:  # the fields in order
        labels = categories[np.asarray(label)]
        got.update((row.tobytes(), name) for row, name in zip(np.asarray(x), labels, strict=True))
    loader.close()
    assert got == want
    assert hinted == []
