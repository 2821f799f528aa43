"""One canonical global batch sequence across world sizes and worker counts, with real DDP ranks.

Each test forks ``world`` rank processes (tests/support/ddp_rank.py: a gloo process group on
127.0.0.1) that read an epoch through ``make_loader``, and stops them; the all-gathered steps
must equal what one process reads. The ranks are forked (torch already imported: milliseconds
per rank, not seconds); ranks started as fresh processes run in tests/remote/test_remote_ddp.py
and, here, under ``-m slow``. Each job runs before the test reads its reference, so no rank
inherits what the test process read.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ddp_launch import fork_ranks, run_ranks
from ddp_rank import main as rank_main
from foreign_stores import labelled

import chunkio

N, GLOBAL_BATCH = 500, 24  # 24 is divisible by world sizes 1, 2, 3 and 4
STOP_AT = 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("ddp") / "ids.zarr")
    ids = np.arange(N, dtype=np.int64)
    chunkio.write_arrays(
        path,
        {"sample_id": ids, "x": np.zeros((N, 64), np.float32)},
        shuffle=False,
        output=chunkio.Output(chunks=16),
    )
    return path


def _run_job(
    dataset: str,
    world: int,
    workers: int,
    out: Path,
    resume: Path | None = None,
    *,
    fresh: bool = False,
) -> dict:
    """The job's output; ``fresh``: the ranks started as new processes, as a launcher does."""
    args = [dataset, str(GLOBAL_BATCH), str(workers), str(out)]
    if resume is not None:
        args.append(str(resume))
    if fresh:
        run_ranks("ddp_rank.py", world, args, timeout=150)
    else:
        fork_ranks(rank_main, world, args, timeout=150)
    return json.loads(out.read_text())


def _reference(dataset: str) -> list[list[int]]:
    loader = chunkio.make_loader(
        dataset,
        GLOBAL_BATCH,
        fields="sample_id",
        num_workers=0,
        seed=7,
        ordering=chunkio.Ordering(pool_bytes=1 << 20),
    )
    loader.set_epoch(1)
    return [b.tolist() for b in loader]


def _same_up_to_padding(got: list[list[int]], ref: list[list[int]]) -> None:
    assert len(got) == len(ref)
    assert got[:-1] == ref[:-1]
    assert got[-1][: len(ref[-1])] == ref[-1]  # a last partial batch may be padded


@pytest.mark.timeout(400)
# an odd world with a worker each in the default suite; world 2 with a worker and world 4
# without run in the resume test below, and every world size 1-4 against the sampler in
# tests/sampling; one rank with workers, ranks without, and fresh rank processes (each imports
# torch) under ``-m slow``
@pytest.mark.parametrize(
    ("world", "workers", "fresh"),
    [
        pytest.param(1, 2, False, marks=pytest.mark.slow),
        pytest.param(2, 0, False, marks=pytest.mark.slow),
        (3, 1, False),
        pytest.param(3, 1, True, marks=pytest.mark.slow),
    ],
)
def test_ranks_read_the_single_process_sequence(
    dataset: str, tmp_path: Path, world: int, workers: int, fresh: bool
) -> None:
    got = _run_job(dataset, world, workers, tmp_path / "out.json", fresh=fresh)
    ref = _reference(dataset)
    _same_up_to_padding(got["steps"], ref)
    flat = [i for step in got["steps"] for i in step]
    assert set(flat) == set(range(N))  # exhaustive; duplicates only from the padding
    assert len(flat) - N < world


@pytest.mark.timeout(400)
def test_resume_onto_another_world_size_and_worker_count(dataset: str, tmp_path: Path) -> None:
    first = _run_job(dataset, 2, 1, tmp_path / "a.json")
    state = tmp_path / "state.json"
    state.write_text(json.dumps(first["state"]))
    assert first["state"]["sampler"]["batches_done"] == STOP_AT
    rest = _run_job(dataset, 4, 0, tmp_path / "b.json", resume=state)
    ref = _reference(dataset)
    _same_up_to_padding(first["steps"][:STOP_AT] + rest["steps"], ref)


@pytest.mark.timeout(300)
# h5py in the default suite; a zarr store read in place by ring workers is covered without DDP
# by tests/transport/test_foreign_ring.py, and here under ``-m slow``
@pytest.mark.parametrize("store", ["h5py", pytest.param("zarr v3 sharded", marks=pytest.mark.slow)])
def test_ranks_share_a_users_own_store_disjointly_each_epoch(tmp_path: Path, store: str) -> None:
    """2 ranks (a ring worker each) over a user's h5py file or zarr store read in place: per
    epoch every sample once across ranks, and the steps are the single-process sequence of
    that (seed, epoch)."""
    n = 301  # a last partial global batch
    path, arrays, _ = labelled(tmp_path, store, n, classes=10, chunk=16)
    fields = {"image": arrays["image"], "sample_id": arrays["id"]}
    args = [str(path), str(GLOBAL_BATCH), "1", str(tmp_path / "out.json")]
    fork_ranks(rank_main, 2, [*args, f"--fields={json.dumps(fields)}", "--epochs=0,1"],
               timeout=150)  # fmt: skip
    got = json.loads((tmp_path / "out.json").read_text())["epochs"]
    loader = chunkio.make_loader(
        path,
        GLOBAL_BATCH,
        fields=fields,
        num_workers=0,
        seed=7,
        ordering=chunkio.Ordering(pool_bytes=1 << 20),
    )
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        ref = [ids.tolist() for _, ids in loader]
        steps = got[str(epoch)]
        _same_up_to_padding(steps, ref)
        for step in steps[:-1]:  # each rank's half of a step: disjoint
            assert len(set(step)) == len(step) == GLOBAL_BATCH
        flat = [i for step in steps for i in step]
        assert set(flat) == set(range(n)) and len(flat) - n < 2  # padding only
    assert got["0"] != got["1"]  # another epoch, another order
