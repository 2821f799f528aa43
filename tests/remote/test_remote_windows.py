"""Windows read from a loopback S3 server (moto): stores written by xarray, zarr-python and
h5py, through the remote readers, in the main process and in make_loader workers (fork), and
in a pickled copy (what spawn and forkserver workers get)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from weather_stores import STORES, VARS, arrays

import chunkio
from chunkio import Field
from chunkio.testing.servers import S3Server, s3_server_fixture  # noqa: F401 (pytest fixtures)

pytest.importorskip("s3fs", reason="s3fs is not installed (pip install -e '.[remote]')")

BUCKET = "windows"
CHOSEN = ("xarray v3", "zarr v2", "h5py")


@pytest.fixture(scope="module")
def urls(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for name in CHOSEN:
        path = STORES[name](tmp_path_factory.mktemp(name.replace(" ", "_")))
        prefix = name.replace(" ", "_")
        if path.is_file():
            s3_server.put(BUCKET, f"{prefix}/{path.name}", path.read_bytes())
            out[name] = f"s3://{BUCKET}/{prefix}/{path.name}"
        else:
            out[name] = s3_server.upload_dir(path, BUCKET, f"{prefix}/{path.name}")
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", CHOSEN)
def test_remote_windows_equal_the_reference(
    s3_server: S3Server, urls: dict[str, str], store: str
) -> None:
    options: dict[str, Any] = s3_server.storage_options()
    fields = [Field(list(VARS), steps=[-2, 0]), Field("t2m", steps=[3]), "time"]
    ds = chunkio.ChunkDataset(urls[store], fields=fields, storage_options=options,
                              preload_bytes=0)  # fmt: skip
    assert ds.remote and ds.anchors is not None
    a = arrays()
    seen = []
    # the workers fork (a forkserver's import torch afresh, and the start method is not what
    # this covers); a pickled copy, what a spawn or forkserver worker gets, reads the same
    # windows (loader workers under forkserver over a remote h5py file: test_remote_foreign)
    copy = pickle.loads(pickle.dumps(ds))
    some = copy.read_batch([0, len(ds) - 1])
    anchors = np.asarray(some["time"])
    want = np.stack([np.stack([a[v][anchors + s] for v in VARS], 1) for s in (-2, 0)], 1)
    np.testing.assert_array_equal(np.asarray(some[ds.fields[0]]), want)
    with chunkio.make_loader(ds, 8, num_workers=2, seed=0,
                             workers=chunkio.Workers(copy=True, context="fork"),
                             ) as loader:  # fmt: skip
        for x, y, t in loader:
            anchors = np.asarray(t)
            want = np.stack([np.stack([a[v][anchors + s] for v in VARS], 1) for s in (-2, 0)], 1)
            np.testing.assert_array_equal(np.asarray(x), want)
            np.testing.assert_array_equal(np.asarray(y), a["t2m"][anchors + 3][:, None])
            seen += anchors.tolist()
    assert sorted(seen) == ds.anchors.tolist()
