"""Real DDP ranks (gloo on 127.0.0.1) reading the same S3 dataset (moto on loopback).

Each test converts datasets locally, uploads them to a moto bucket and starts ``world`` rank
processes (tests/support/remote_ddp_rank.py) that read two epochs through ``make_loader(s3://...)``
and all-gather each step's sample ids. Per epoch the ranks' samples must be disjoint and
together exhaustive, up to the documented padding of a last partial global batch with the
epoch's first samples (chunkio.sampling.order), and every rank's batches must equal, bit for bit,
what
the same rank reads from the local copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ddp_launch import run_ranks

import chunkio
from benchmarks.data import make_jpeg_folder
from chunkio.testing.servers import (  # noqa: F401 (pytest fixture)
    S3Server,
    require,
    s3_server_fixture,
)

require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")

BUCKET = "ddp"
SEED = 11
N_IMAGES = 199  # a last partial global batch for world sizes 2 and 3 with the batches below
N_ARRAYS = 301
IMAGE_FIELDS = ("image", "label", "source_index")
ARRAY_FIELDS = ("sample_id", "x")
POOL_BYTES = 1 << 17  # a few chunks: batches mix chunks, ranks read different chunks


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JPEG image dataset (source_index identifies a sample) and a write_arrays dataset."""
    root = tmp_path_factory.mktemp("remote_ddp")
    src = make_jpeg_folder(root / "src", n_images=N_IMAGES, size=32, n_classes=4, seed=2)
    chunkio.convert_images(
        src,
        root / "images.zarr",
        images=chunkio.ImageOptions(encoding="jpeg"),
        output=chunkio.Output(chunks=16),
        execution=chunkio.Execution(progress=False),
    )
    rng = np.random.default_rng(0)
    chunkio.write_arrays(
        root / "arrays.zarr",
        {
            "sample_id": np.arange(N_ARRAYS, dtype=np.int64),
            "x": rng.standard_normal((N_ARRAYS, 8), dtype=np.float32),
        },
        shuffle=True,  # stored rows are not sample ids
        seed=4,
        output=chunkio.Output(chunks=16),
    )
    return root


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server, local: Path) -> str:
    for name in ("images.zarr", "arrays.zarr"):
        s3_server.upload_dir(local / name, BUCKET, name)
    return BUCKET


def _jobs(world: int, image_workers: int, array_workers: int) -> list[dict[str, Any]]:
    common = {"seed": SEED, "pool_bytes": POOL_BYTES}
    return [
        {
            "name": "images",
            "batch_size": 16,
            "num_workers": image_workers,
            "fields": IMAGE_FIELDS,
            "id_field": "source_index",
            **common,
        },
        {
            "name": "arrays",
            "batch_size": 12,
            "num_workers": array_workers,
            "fields": ARRAY_FIELDS,
            "id_field": "sample_id",
            **common,
        },
    ]


def _run_ranks(world: int, config: dict[str, Any], out: Path) -> None:
    out.mkdir()
    config_path = out / "config.json"
    config_path.write_text(json.dumps(config))
    run_ranks("remote_ddp_rank.py", world, [str(config_path), str(out)], timeout=100)


def _split(values: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []


def _local_batches(
    path: Path, job: dict[str, Any], rank: int, world: int, epoch: int
) -> list[tuple[np.ndarray, ...]]:
    loader = chunkio.make_loader(
        str(path),
        job["batch_size"],
        fields=tuple(job["fields"]),
        num_workers=0,
        seed=job["seed"],
        ordering=chunkio.Ordering(rank=rank, world_size=world, pool_bytes=job["pool_bytes"]),
    )
    with loader:
        loader.set_epoch(epoch)
        return [tuple(t.numpy().copy() for t in batch) for batch in loader]


def _check_job(local: Path, job: dict[str, Any], world: int, out: Path, n: int) -> int:
    """Check one dataset's two epochs; returns the padding (duplicated samples) per epoch."""
    name, fields, id_field = job["name"], job["fields"], job["id_field"]
    path = local / f"{name}.zarr"
    here = chunkio.ChunkDataset(str(path), fields=tuple(fields))
    gathered = json.loads((out / f"{name}.gathered.json").read_text())
    global_batch = job["batch_size"] * world
    rest = n % global_batch
    padding = int((-rest) % world)  # the last global batch, padded to a multiple of world
    for epoch in (0, 1):
        ranks = [dict(np.load(out / f"{name}.e{epoch}.r{r}.npz")) for r in range(world)]
        steps = gathered[str(epoch)]
        assert len(steps) == -(-n // global_batch)
        # the all-gathered ids are what each rank read
        for r, got in enumerate(ranks):
            ids = _split(got[id_field], got["batch_lengths"])
            assert [step[r] for step in steps] == [b.tolist() for b in ids], (epoch, r)
            np.testing.assert_array_equal(got["batch_lengths"], got["row_lengths"])
        # disjoint and exhaustive, up to the padding with the epoch's first samples
        flat = np.array([i for step in steps for piece in step for i in piece], np.int64)
        assert len(flat) == n + padding, (epoch, len(flat), n, padding)
        assert sorted(flat[:n].tolist()) == list(range(n)), epoch
        np.testing.assert_array_equal(flat[n:], flat[:padding])
        for a in range(world):
            for b in range(a + 1, world):
                common = set(ranks[a][id_field].tolist()) & set(ranks[b][id_field].tolist())
                assert common <= set(flat[:padding].tolist()), (epoch, a, b, common)
        # every rank reads, bit for bit, what it reads from the local copy ...
        for r, got in enumerate(ranks):
            want = _local_batches(path, job, r, world, epoch)
            assert [len(b[0]) for b in want] == got["batch_lengths"].tolist(), (epoch, r)
            for k, f in enumerate(fields):
                local_field = np.concatenate([b[k] for b in want])
                assert got[f].dtype == local_field.dtype, (epoch, r, f)
                np.testing.assert_array_equal(got[f], local_field, err_msg=f"{epoch} {r} {f}")
            # ... and what its sampler's rows hold locally
            stored = here.read_batch(got["rows"].tolist())
            for f in fields:
                np.testing.assert_array_equal(got[f], np.asarray(stored[f]), err_msg=f)
    # epochs differ in order (a set_epoch that did nothing would repeat epoch 0)
    assert gathered["0"] != gathered["1"]
    return padding


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("world", "image_workers", "array_workers"),
    [(2, 1, 0), pytest.param(3, 0, 1, marks=pytest.mark.slow)],  # three ranks: make soak
    ids=["w2", "w3"],
)
def test_ranks_read_disjoint_exhaustive_batches_of_one_s3_dataset(
    s3_server: S3Server,
    bucket: str,
    local: Path,
    tmp_path: Path,
    world: int,
    image_workers: int,
    array_workers: int,
) -> None:
    jobs = _jobs(world, image_workers, array_workers)
    for job in jobs:
        job["url"] = f"s3://{bucket}/{job['name']}.zarr"
    config = {"storage_options": s3_server.storage_options(), "jobs": jobs}
    out = tmp_path / "out"
    _run_ranks(world, config, out)
    paddings = [
        _check_job(local, job, world, out, N_IMAGES if job["name"] == "images" else N_ARRAYS)
        for job in jobs
    ]
    assert all(p > 0 for p in paddings), paddings  # the padding path was exercised
