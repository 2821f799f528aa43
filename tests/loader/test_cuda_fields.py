"""On a CUDA device: window fields and sparse single-cell fields delivered to the GPU.

Skipped without CUDA (the skip says so; the CPU paths of the same features are tested in
tests/loader/test_windows_loader.py and tests/read/test_sparse_fields.py). On the GPU machine:
window batches after ``make_loader(..., device="cuda")`` equal NumPy's ``arr[anchor + step]``;
``Normalize`` applied on the GPU equals ``(x - mean) / std`` in NumPy and equals the same stats
applied by the ring workers; DDP ranks (gloo, each on the GPU) split the world-size-1 global
batches; sparse CSR groups arrive dense or as torch sparse CSR tensors on the GPU, each row equal
to scipy's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from weather_stores import VARS, arrays, window_dataset, window_fields, xarray_v3

import chunkio
from chunkio import ChunkDataset
from chunkio.convert import write_arrays

#: ``CHUNKIO_TEST_DEVICE=cpu`` rehearses these tests on the CPU (the device paths are the same)
DEVICE = os.environ.get("CHUNKIO_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs CUDA"
)

FIELDS = window_fields()
PBMC = Path(__file__).resolve().parents[1] / "data" / "singlecell" / "pbmc68k_reduced.h5ad"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return xarray_v3(tmp_path_factory.mktemp("w"))


def _dataset(path: Path, **kw: Any) -> ChunkDataset:
    return cast(ChunkDataset, window_dataset(path, **kw))


def _windows(anchors: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    a = arrays()
    x = np.stack([np.stack([a[v][anchors + s] for v in VARS], 1) for s in (-1, 0)], 1)
    y = np.stack([a[v][anchors + 1] for v in VARS], 1)[:, None]
    return x, y


@pytest.mark.timeout(240)
def test_windows_on_the_gpu_and_normalize_there_or_in_the_ring_workers(store: Path) -> None:
    ds = _dataset(store)
    stats = chunkio.compute_stats(ds)
    norm = chunkio.Normalize(stats, dataset=ds)
    mean = {n: np.asarray(stats.fields[n]["mean"])[:, None, None] for n in ds.fields[:2]}
    std = {n: np.asarray(stats.fields[n]["std"])[:, None, None] for n in ds.fields[:2]}
    on_gpu = chunkio.make_loader(ds, 8, num_workers=2, seed=0, device=DEVICE)
    in_ring = chunkio.make_loader(
        _dataset(store, transform=chunkio.Normalize(stats)), 8, num_workers=2, seed=0,
        device=DEVICE,
    )  # fmt: skip
    seen: list[int] = []
    try:
        assert on_gpu.transport == "ring" and in_ring.transport == "ring"
        for (x, y, t), (xn_ring, yn_ring, t_ring) in zip(on_gpu, in_ring, strict=True):
            assert (
                x.device.type == DEVICE
                and y.device.type == DEVICE
                and xn_ring.device.type == DEVICE
            )
            anchors = t.cpu().numpy()
            assert np.array_equal(anchors, t_ring.cpu().numpy())
            want_x, want_y = _windows(anchors)
            np.testing.assert_array_equal(x.cpu().numpy(), want_x)
            np.testing.assert_array_equal(y.cpu().numpy(), want_y)
            xn, yn, tn = norm((x, y, t))
            assert xn.device.type == DEVICE and torch.equal(tn, t)
            for got, ring, want, name in (
                (xn, xn_ring, want_x, ds.fields[0]),
                (yn, yn_ring, want_y, ds.fields[1]),
            ):
                ref = (want.astype(np.float64) - mean[name]) / std[name]
                np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(ring.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
            seen += anchors.tolist()
    finally:
        on_gpu.close()
        in_ring.close()
    assert ds.anchors is not None
    assert sorted(seen) == ds.anchors.tolist()


def _rank(rank: int, world: int, store: str, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ds = _dataset(Path(store))
        loader = chunkio.make_loader(
            ds, 8 // world, num_workers=1, seed=5, device=DEVICE,
            ordering=chunkio.Ordering(rank=rank, world_size=world),
        )  # fmt: skip
        got = []
        with loader:
            for x, y, t in loader:
                assert x.device.type == DEVICE
                want_x, want_y = _windows(t.cpu().numpy())
                assert np.array_equal(x.cpu().numpy(), want_x)
                assert np.array_equal(y.cpu().numpy(), want_y)
                got.append(t.cpu().numpy().tolist())
        np.save(os.path.join(out, f"rank{rank}.npy"), np.asarray(got, dtype=object))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
def test_ddp_ranks_on_the_gpu_split_the_global_batches(store: Path, tmp_path: Path) -> None:
    one = chunkio.make_loader(_dataset(store), 8, num_workers=0, seed=5,
                              workers=chunkio.Workers(copy=True))  # fmt: skip
    with one:
        whole = [t.numpy().tolist() for _, _, t in one]
    port = 29500 + os.getpid() % 1000
    tmp.start_processes(_rank, args=(2, str(store), port, str(tmp_path)), nprocs=2,
                        start_method="spawn")  # fmt: skip
    ranks = [np.load(tmp_path / f"rank{r}.npy", allow_pickle=True).tolist() for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    split = [sorted(a + b) for a, b in zip(*ranks, strict=True)]
    assert split == [sorted(b) for b in whole[: len(split)]]


def _pbmc_counts() -> sp.csr_matrix:
    with h5py.File(PBMC, "r") as f:
        g = f["raw.X"]
        shape = tuple(g.attrs["h5sparse_shape"])
        return sp.csr_matrix((g["data"][:], g["indices"][:], g["indptr"][:]), shape=shape)


@pytest.mark.timeout(180)
# torch's own notices when it rebuilds a sparse tensor a worker sent (outside chunkio's reach)
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("source", ["h5ad", "native"])
@pytest.mark.parametrize("batches", ["dense", "csr"])
def test_sparse_cells_arrive_on_the_gpu(tmp_path: Path, batches: str, source: str) -> None:
    counts = _pbmc_counts()
    expected = counts.toarray()
    with h5py.File(PBMC, "r") as f:
        codes = f["obs"]["louvain"][:]
    if source == "h5ad":  # read in place
        path = tmp_path / "pbmc.h5ad"
        path.write_bytes(PBMC.read_bytes())
        fields = {"x": "raw.X", "label": "obs/louvain"}
    else:  # chunkio's own sparse field, unshuffled so row i is cell i
        path = tmp_path / "pbmc.zarr"
        write_arrays(path, {"x": counts, "label": codes}, shuffle=False,
                     output=chunkio.Output(chunks=64))  # fmt: skip
        fields = {"x": "x", "label": "label"}
    ds = ChunkDataset(path, fields=fields, sparse_batches=batches)
    loader = chunkio.make_loader(ds, 64, num_workers=2, seed=1, device=DEVICE)
    seen: list[int] = []
    n = 0
    with loader:
        for (x, label), idx in zip(loader, loader.sampler.batches(0), strict=True):
            assert x.device.type == DEVICE and label.device.type == DEVICE
            if batches == "csr":
                assert x.layout == torch.sparse_csr
                x = x.to_dense()
            np.testing.assert_array_equal(x.cpu().numpy(), expected[idx])
            np.testing.assert_array_equal(label.cpu().numpy(), codes[idx])
            seen += list(idx)
            n += 1
    assert n > 0 and sorted(seen) == list(range(len(expected)))
