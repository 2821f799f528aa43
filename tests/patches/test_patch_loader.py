"""Patches through ``make_loader``: the ring (and the local and DataLoader routes) give the batches
``PatchDataset.__getitems__`` gives for the same keys, in the sampler's order cut into global
batches, the same for 0 and 2 workers and any world size; a state saved mid-epoch restores onto
another worker count or world size with exactly the remaining patches; kept batches stay. Ring
workers read whole batches in turn where a batch's patches can share chunks.

The reference is the user's own dataset read by key, the keys cut by hand from the sampler's
``global_keys``: nothing of :mod:`chunkio.patches.loading` computes it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch
from foreign_stores import volumes_h5py, volumes_zarr_v3

from chunkio import Ordering, Workers, make_loader
from chunkio.errors import IncompatibleStateError
from chunkio.loader import RingFallbackWarning
from chunkio.patches import GridSampler, PatchDataset, RandomPatchSampler
from chunkio.read.batch import collate

PATCH = (4, 5, 4)
N_PATCHES, BATCH = 41, 6  # a last global batch of 5: partial, and odd for two ranks
STORES = {
    ".h5": (volumes_h5py, {"image": "vol/image", "label": "vol/label"}),
    ".zarr": (volumes_zarr_v3, {"image": "image", "label": "label"}),  # (N, C, D, H, W)
}
#: ``CHUNKIO_TEST_DEVICE=cpu`` rehearses the CUDA test on the CPU (the device path is the same)
DEVICE = os.environ.get("CHUNKIO_TEST_DEVICE", "cuda")


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    build, fields = STORES[request.param]
    return build(tmp_path_factory.mktemp("patch-loader")), fields


def _dataset(store: Any, **sampler: Any) -> PatchDataset:
    path, fields = store
    kw = {"seed": 3, **sampler}
    return PatchDataset(path, PATCH, fields=fields, sampler=RandomPatchSampler(N_PATCHES, **kw))


def _reference(ds: PatchDataset, epoch: int, global_batch: int) -> list[dict[str, torch.Tensor]]:
    """The epoch's global batches: the sampler's keys cut by hand, each read by key."""
    keys = [tuple(k) for k in ds.sampler.global_keys(epoch).tolist()]
    cuts = range(0, len(keys), global_batch)
    out: list[dict[str, torch.Tensor]] = [
        collate(ds.__getitems__(keys[a : a + global_batch])) for a in cuts
    ]
    return out


def _equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        assert torch.equal(got[k], want[k]), k


def _plain(batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    return {k: v.tolist() for k, v in batch.items()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_getitems_of_their_keys_for_0_and_2_workers(store, workers):
    ds = _dataset(store)
    loader = make_loader(ds, BATCH, num_workers=workers, workers=Workers(context="fork"))
    assert loader.transport == ("ring" if workers else "local")
    assert len(loader) == 7 and loader.batch_size == BATCH
    for epoch in (0, 1):  # the epoch advances by itself and reaches the workers
        kept = list(loader)  # kept across the loop (the default lifetime): never changed
        want = _reference(ds, epoch, BATCH)
        assert len(kept) == len(want) == 7
        for got, ref in zip(kept, want, strict=True):
            _equal(got, ref)
    loader.close()
    assert ds.sampler.epoch == 0  # the loader read a copy


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("first", "then"), [(2, 0), (0, 2)])
def test_resume_onto_another_worker_count_gives_the_remaining_patches(store, first, then):
    ds = _dataset(store)
    fork = Workers(context="fork")
    loader = make_loader(ds, BATCH, num_workers=first, workers=fork)
    loader.set_epoch(1)
    head = []
    for batch in loader:
        head.append(_plain(batch))
        if len(head) == 3:
            break
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    again = make_loader(_dataset(store), BATCH, num_workers=then, workers=fork)
    again.load_state_dict(state)
    again.set_epoch(1)  # a loop calls it after restoring: the same epoch keeps the resume
    rest = [_plain(b) for b in again]
    again.close()
    want = [_plain(b) for b in _reference(ds, 1, BATCH)]
    assert head == want[:3]
    assert rest == want[3:]


@pytest.mark.timeout(60)
def test_resume_onto_1_then_2_then_3_workers_gives_the_remaining_patches(store, monkeypatch):
    """Workers take whole batches in turn (which worker reads a batch depends on the count):
    a state saved with 1 worker resumes onto 2, and 2's onto 3, with exactly what remains,
    each resumed session dealing its batches to its own workers in turn."""
    from chunkio.transport.messages import ReadRows
    from chunkio.transport.workers import RingWorkers

    sent: list[tuple[int, int]] = []
    send = RingWorkers.send

    def recording(self: Any, w: int, message: Any) -> None:
        if isinstance(message, ReadRows):
            sent.append((w, message.seq))
        send(self, w, message)

    monkeypatch.setattr(RingWorkers, "send", recording)
    fork = Workers(context="fork")
    got: list[dict[str, Any]] = []
    state = None
    for workers, until in ((1, 2), (2, 5), (3, None)):  # batches delivered when the state is saved
        sent.clear()
        loader = make_loader(_dataset(store), BATCH, num_workers=workers, workers=fork)
        if state is not None:
            loader.load_state_dict(state)
        loader.set_epoch(1)
        for batch in loader:
            got.append(_plain(batch))
            if len(got) == until:
                break
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        assert sent and all(w == seq % workers for w, seq in sent), (workers, sent)
    assert got == [_plain(b) for b in _reference(_dataset(store), 1, BATCH)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, 3])
def test_each_batch_is_read_whole_by_one_worker_the_workers_in_turn(store, workers, monkeypatch):
    """The patches of a batch share chunks: one worker reads all of it (split between
    workers, each would decode the shared chunks), batch ``s`` by worker ``s % workers``."""
    from chunkio.transport.messages import ReadRows
    from chunkio.transport.workers import RingWorkers

    sent: list[tuple[int, ReadRows]] = []
    send = RingWorkers.send

    def recording(self: Any, w: int, message: Any) -> None:
        if isinstance(message, ReadRows):
            sent.append((w, message))
        send(self, w, message)

    monkeypatch.setattr(RingWorkers, "send", recording)
    ds = _dataset(store)
    loader = make_loader(ds, BATCH, num_workers=workers, workers=Workers(context="fork"))
    for got, ref in zip(loader, _reference(ds, 0, BATCH), strict=True):
        _equal(got, ref)
    loader.close()
    sizes = [BATCH] * 6 + [N_PATCHES - 6 * BATCH]  # the last batch: 5 patches
    assert [(w, m.seq, m.start, m.stop) for w, m in sent] == [
        (s % workers, s, 0, n) for s, n in enumerate(sizes)
    ]


@pytest.mark.parametrize(
    ("sampler", "patch", "whole"),
    [
        (GridSampler(), (4, 4, 8), False),  # whole chunks on the chunk grid: never shared
        (GridSampler(edge="pad"), (4, 8, 8), False),  # the last patch sticks out, aligned
        (GridSampler(), (4, 8, 8), True),  # the shifted last patch overlaps its neighbour
        (GridSampler(overlap=(0, 0, 4)), (4, 4, 8), True),
        (GridSampler(), (4, 4, 4), True),  # half chunks: two patches in one chunk
        (GridSampler(), (4, 4, 12), True),  # one and a half chunks: off the chunk grid
        (RandomPatchSampler(5), (4, 4, 8), True),
    ],
)
def test_readers_take_whole_batches_unless_no_two_patches_share_a_chunk(sampler, patch, whole):
    from chunkio.format.volume_layout import VolumeSet
    from chunkio.patches.loading import PatchBatchSampler

    volumes = VolumeSet(shapes=((8, 12, 24),) * 2, chunks=(4, 4, 8), stacked=True)
    batches = PatchBatchSampler(sampler.bind(volumes, patch), 6, rank=0, world_size=1)
    assert batches.reader_rows(6, 2) == ([(0, 6)] if whole else [(0, 3), (3, 6)])


def test_a_grid_batch_smaller_than_the_workers_is_dealt_out_in_turn():
    """Even parts of a grid that never shares a chunk: a batch of fewer patches than workers
    (a last batch, ``batch_size < num_workers``) goes to each worker in turn, not always to
    the first ones (which left the others idle)."""
    from chunkio.format.volume_layout import VolumeSet
    from chunkio.patches.loading import PatchBatchSampler
    from chunkio.transport.parts import assign, check_parts

    volumes = VolumeSet(shapes=((8, 12, 24),) * 2, chunks=(4, 4, 8), stacked=True)
    batches = PatchBatchSampler(GridSampler().bind(volumes, (4, 4, 8)), 6, rank=0, world_size=1)
    for n, workers in ((1, 2), (2, 4), (3, 4)):
        rows = check_parts(batches.reader_rows(n, workers), n, workers)
        readers = [w for seq in range(2 * workers) for w in assign(rows, seq, workers)]
        assert sorted(readers) == sorted(list(range(workers)) * 2 * n)  # every worker, as often


@pytest.mark.slow  # spawned workers import torch: 3-25 s, however small the data
@pytest.mark.timeout(120)
def test_spawned_ring_workers_open_their_own_handles(tmp_path):
    store = (volumes_h5py(tmp_path), STORES[".h5"][1])
    ds = _dataset(store)
    want = _reference(ds, 0, BATCH)  # the parent reads first: it holds an HDF5 handle
    loader = make_loader(ds, BATCH, num_workers=2, workers=Workers(context="spawn"))
    for got, ref in zip(loader, want, strict=True):
        _equal(got, ref)
    loader.close()


def test_ranks_split_each_global_batch_and_cover_the_epoch_once(store):
    ds = _dataset(store)
    ranks = [
        make_loader(ds, BATCH // 2, num_workers=0, ordering=Ordering(rank=r, world_size=2))
        for r in (0, 1)
    ]
    steps = [list(map(_plain, loader)) for loader in ranks]
    want = [_plain(b) for b in _reference(ds, 0, BATCH)]
    assert len(steps[0]) == len(steps[1]) == len(want)
    keys = ds.sampler.global_keys(0)
    for t, (a, b) in enumerate(zip(*steps, strict=True)):
        joined = {k: a[k] + b[k] for k in a}
        if t < len(want) - 1:
            assert joined == want[t]
        else:  # 5 patches for 2 ranks of 3: padded with the epoch's first patch
            assert joined["origin"] == keys[36:41, 1:].tolist() + keys[:1, 1:].tolist()
    # a state of rank 1 of 2 after 2 steps of epoch 1 restores onto one process (same global
    # batch): the passes above advanced the epoch
    it = iter(ranks[1])
    next(it), next(it)
    one = make_loader(ds, BATCH, num_workers=0, ordering=Ordering(rank=0, world_size=1))
    one.load_state_dict(json.loads(json.dumps(ranks[1].state_dict())))
    assert [_plain(b) for b in one] == [_plain(b) for b in _reference(ds, 1, BATCH)][2:]
    other = make_loader(ds, BATCH // 2, num_workers=0, ordering=Ordering(rank=0, world_size=1))
    with pytest.raises(IncompatibleStateError, match="global_batch_size"):
        other.load_state_dict(ranks[1].state_dict())


def test_the_dataloader_route_and_a_transform_give_the_same_patches(store):
    ds = _dataset(store)
    want = _reference(ds, 0, BATCH)
    via = make_loader(ds, BATCH, num_workers=0, workers=Workers(transport="dataloader"))
    assert via.transport == "dataloader"
    for got, ref in zip(via, want, strict=True):
        _equal(got, ref)
    path, fields = store
    flipped = PatchDataset(
        path,
        PATCH,
        fields=fields,
        sampler=RandomPatchSampler(N_PATCHES, seed=3),
        transform=lambda item: {**item, "image": item["image"].flip(-1)},
    )
    with pytest.warns(RingFallbackWarning, match="falls back"):
        loader = make_loader(flipped, BATCH, num_workers=0)
    assert loader.transport == "dataloader"
    for got, ref in zip(loader, want, strict=True):
        assert torch.equal(got["image"], ref["image"].flip(-1))
        assert torch.equal(got["origin"], ref["origin"])


def test_what_the_sampler_decides_is_not_overridden(store):
    ds = _dataset(store)
    with pytest.raises(ValueError, match=r"RandomPatchSampler\(..., seed=5\)"):
        make_loader(ds, BATCH, seed=5, num_workers=0)
    with pytest.raises(ValueError, match="shuffles"):
        make_loader(ds, BATCH, shuffle=False, num_workers=0)
    with pytest.raises(ValueError, match="PatchDataset has its own"):
        make_loader(ds, BATCH, transform=lambda x: x, num_workers=0)
    assert make_loader(ds, BATCH, seed=3, num_workers=0).transport == "local"
    path, fields = store
    grid = PatchDataset(path, PATCH, fields=fields, sampler=GridSampler())
    assert len(make_loader(grid, BATCH, shuffle=False, num_workers=0)) > 0
    saved = make_loader(ds, BATCH, num_workers=0).state_dict()
    with pytest.raises(IncompatibleStateError, match="seed is 4 here, got 3"):
        make_loader(_dataset(store, seed=4), BATCH, num_workers=0).load_state_dict(saved)


def test_patches_of_several_stores_and_a_wrong_buffer(tmp_path):
    stores = []
    for i in (0, 1):
        (tmp_path / str(i)).mkdir()
        stores.append(volumes_h5py(tmp_path / str(i)))
    fields = STORES[".h5"][1]
    ds = PatchDataset(stores, PATCH, fields=fields, sampler=GridSampler(shuffle=True, seed=1))
    assert ds.volumes.count == 6
    want = _reference(ds, 0, BATCH)
    assert any(min(b["volume"]) < 3 <= max(b["volume"]) for b in want)  # both stores' patches
    for got, ref in zip(make_loader(ds, BATCH, num_workers=0), want, strict=True):
        _equal(got, ref)  # a batch of both stores is gathered, then copied into the buffer
    keys = ds.sampler.global_keys(0)[:2]
    with pytest.raises(ValueError, match=r"out\['image'\] must be int16 of shape \(2, 4, 5, 4\)"):
        ds.read_patches(keys, out={"image": torch.zeros(2, 4, 5, 5, dtype=torch.int16).numpy()})


@pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(120)
def test_patches_arrive_on_the_device_equal_to_the_reference(store):
    ds = _dataset(store)
    loader = make_loader(ds, BATCH, num_workers=2, device=DEVICE)
    for got, ref in zip(loader, _reference(ds, 0, BATCH), strict=True):
        assert all(v.device.type == torch.device(DEVICE).type for v in got.values())
        _equal({k: v.cpu() for k, v in got.items()}, ref)
    loader.close()
