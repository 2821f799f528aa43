"""The shared-memory ring and per-sample field transforms on a user's own store read in place:
every batch equals the transform applied to the source samples, keyed by (seed, epoch, index).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from foreign_stores import labelled

import chunkio
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop
from chunkio.transforms.sample import channels_last

N = 200


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("store", "context"),
    [
        ("h5py", "fork"),
        ("zarr v2", "forkserver"),
        ("zarr v3 sharded", "forkserver"),
        # under ``-m slow``: forkserver pickles the store's dataset the same way, for a fraction
        # of the cost (tests/conftest.py preloads the server)
        pytest.param("zarr v3 sharded", "spawn", marks=pytest.mark.slow),
    ],
)
def test_ring_batches_are_the_transformed_source(tmp_path: Path, store: str, context: str) -> None:
    path, arrays, source = labelled(tmp_path, store, N, classes=5, chunk=16)
    t = Compose([RandomResizedCrop(6, scale=(0.3, 1.0)), RandomHorizontalFlip()], seed=3)
    fields = {"image": arrays["image"], "label": arrays["label"], "id": arrays["id"]}
    loader = chunkio.make_loader(
        path,
        24,
        fields=fields,
        transform=t,
        num_workers=2,
        seed=1,
        workers=chunkio.Workers(context=context, copy=True),
    )
    assert loader.transport == "ring"  # a field transform keeps the ring on foreign data too
    with loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            seen = []
            for x, y, ids in loader:
                assert tuple(x.shape[1:]) == (3, 6, 6)
                for row, i in zip(x.numpy(), ids.tolist(), strict=True):
                    want = np.empty((6, 6, 3), np.uint8)
                    image = np.ascontiguousarray(channels_last(source["image"][i]))
                    t.apply(image, want, (t.seed, epoch, i))
                    np.testing.assert_array_equal(channels_last(row), want)
                np.testing.assert_array_equal(y.numpy(), source["label"][ids.numpy()])
                seen += ids.tolist()
            assert sorted(seen) == list(range(N))
