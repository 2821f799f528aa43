"""Kept batches stay intact (RELIABILITY row 37; issue 40, item 5).

The default lifetime hands out views of reused memory (a ring slot, or the in-process route's
buffer). A batch, or any view of it, still alive when its memory comes round again must not
change: it is moved out of the ring (:mod:`chunkio.transport.detach`) or its buffer is left
to it. A batch nobody keeps must cost no copy. Every kept batch is compared with the
dataset's own batched read (``ChunkDataset.__getitems__``) of the same indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from chunkio import ChunkDataset, Workers, collate, make_loader
from chunkio.transport import LocalTransport
from chunkio.transport.detach import PAGE, KeptViews, can_detach, map_region, privatise
from chunkio.transport.ring import RingLayout, SlotRing

BATCH = 16  # 200 samples: 13 batches, more than a 2-worker ring's 6 slots

pytestmark = pytest.mark.skipif(not can_detach(), reason="moving kept pages needs Linux")


def _loader(path: str, workers: int, start: str = "fork", **kw: Any) -> Any:
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0, cache_bytes=1 << 20)
    return make_loader(ds, BATCH, num_workers=workers, workers=Workers(context=start, **kw))


def _reference(loader: Any, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each batch of ``epoch`` as the dataset reads it itself, in fresh memory."""
    ds = loader.dataset
    return [collate(ds.__getitems__(idx.tolist())) for idx in loader.sampler.batches(epoch)]


def _moved(loader: Any) -> int:
    """Field regions (ring) or buffers (in-process) left to a consumer that kept them."""
    route = loader._route
    if isinstance(route, LocalTransport):
        return route.replaced
    return route._session.detached


def _copied(loader: Any) -> int:
    """Field arrays handed out as copies (fields the consumer kept steadily)."""
    route = loader._route
    if isinstance(route, LocalTransport):
        pool = [*route._free, *([route._waiting] if route._waiting else [])]
        return sum(kept.copied for _, kept in pool)
    return route._session.kept.copied


# spawn under ``-m slow``: forkserver pickles the dataset to its workers the same way, at a
# fraction of the cost (tests/conftest.py preloads the server); spawn itself keeps default cases
# in tests/transport/test_transport.py and tests/read/test_concurrency.py
ROUTES = [
    (2, "fork"),
    (2, "forkserver"),
    pytest.param(2, "spawn", marks=pytest.mark.slow),
    (0, "fork"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("workers", "start"), ROUTES)
def test_kept_batches_and_kept_views_equal_the_reference_read(make_dataset, workers, start):
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    loader = _loader(path, workers, start)
    assert loader.transport == ("ring" if workers else "local")
    kept = list(loader)  # the ring's default lifetime, every batch kept
    want = _reference(loader, 0)
    assert len(kept) == len(want) >= 10
    changed = [
        i
        for i, ((x, y), (wx, wy)) in enumerate(zip(kept, want, strict=True))
        if not (torch.equal(x, wx) and torch.equal(y, wy))
    ]
    assert changed == []  # 0 of N kept batches changed
    assert _moved(loader) > 0  # ... because their memory was moved, not by luck

    # epoch 1: only views are kept, the batches themselves dropped
    heads, labels, crops = [], [], []
    for x, y in loader:
        heads.append(x[:2])  # a slice
        labels.append(y.numpy())  # a NumPy view
        crops.append(x[3:5, :, 2:6].numpy()[:, 0])  # a view of a view of a view
    want = _reference(loader, 1)
    assert len(heads) == len(want)
    for i, (wx, wy) in enumerate(want):
        assert torch.equal(heads[i], wx[:2]), i
        assert np.array_equal(labels[i], wy.numpy()), i
        assert np.array_equal(crops[i], wx[3:5, 0, 2:6].numpy()), i
    loader.close()
    # every kept batch outlives the ring: the loader's memory is gone, theirs is not
    assert all(
        torch.equal(x, wx) for (x, _), (wx, _) in zip(kept, _reference(loader, 0), strict=True)
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [2, 0])
def test_nothing_kept_moves_nothing(make_dataset, workers):
    """``for batch in loader`` holds the previous batch while asking for the next: that must
    not count as kept (no copy, no moved region) on either host route, nor with copies."""
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    for kw in ({}, {"copy": True}):
        loader = _loader(path, workers, **kw)
        for epoch in range(2):
            want = _reference(loader, epoch)
            n = 0
            for (x, y), (wx, wy) in zip(loader, want, strict=True):
                assert torch.equal(x, wx) and torch.equal(y, wy)
                n += 1
            assert n == len(want)
        assert _moved(loader) == 0 and _copied(loader) == 0, kw
        loader.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [2, 0])
def test_a_consumer_that_keeps_every_batch_gets_copies_not_moved_pages(make_dataset, workers):
    """Keeping every batch (or every label) for long must not move a region and make a
    mapping per batch (a process holds only so many mappings): steady keeping turns to
    copies, and keeping stopped turns back to views."""
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    loader = _loader(path, workers)
    kept: list[Any] = []
    epochs = 4
    for epoch in range(epochs):
        before = len(kept)
        kept.extend(loader)
        assert all(
            torch.equal(x, wx) and torch.equal(y, wy)
            for (x, y), (wx, wy) in zip(kept[before:], _reference(loader, epoch), strict=True)
        )
    arrays = 2 * len(kept)  # image and label of every batch
    assert _copied(loader) > arrays // 2 and _moved(loader) < arrays // 4
    assert all(  # the earliest ones too, after every later batch
        torch.equal(x, wx) for (x, _), (wx, _) in zip(kept, _reference(loader, 0), strict=False)
    )


@pytest.mark.timeout(120)
def test_device_delivery_moves_nothing(make_dataset):
    """Batches copied to a device release their host slot; none is kept (``meta``: the
    copies run anywhere)."""
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0, cache_bytes=1 << 20)
    loader = make_loader(ds, BATCH, num_workers=2, device="meta", workers=Workers(context="fork"))
    batches = list(loader)  # kept on the device: host memory is not theirs
    assert len(batches) == len(loader) and batches[0][0].device.type == "meta"
    assert loader._route._session.detached == 0
    loader.close()


def test_privatise_refuses_partial_pages_and_map_region_views_the_segment() -> None:
    lay = RingLayout.of({"x": (np.dtype("u1"), (PAGE,))}, batch_size=1, num_slots=1)
    ring = SlotRing.create(lay)
    try:
        with pytest.raises(ValueError, match=f"whole pages of {PAGE} bytes"):
            privatise(ring.address + 64, PAGE)
        with pytest.raises(ValueError, match="whole pages"):
            privatise(ring.address, PAGE - 1)
        ring.fields(0)["x"][0, :4] = [1, 2, 3, 4]
        region = map_region(ring.name, lay.field_offset(0, 0), PAGE)
        assert region[:4].tolist() == [1, 2, 3, 4]
        region[4] = 9  # the same shared memory, both ways
        assert ring.fields(0)["x"][0, 4] == 9
    finally:
        ring.close()


def test_kept_views_report_only_what_is_still_viewed() -> None:
    kept = KeptViews(2)
    a, b = np.zeros(4), np.zeros(4)
    t = torch.from_numpy(a)[1:]  # a view of the array handed out keeps it
    kept.hand_out(1, {"a": a, "b": b})
    del a, b
    assert kept.take(0) == [] and kept.take(1) == ["a"]
    assert kept.take(1) == []  # forgotten once taken
    del t


@pytest.mark.timeout(120)
def test_where_pages_cannot_move_a_kept_batch_is_reported(make_dataset, monkeypatch):
    monkeypatch.setattr("chunkio.transport.iterator.can_detach", lambda: False)
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    loader = _loader(path, 2)
    with pytest.warns(UserWarning, match=r"a batch you kept .* changes.*Workers\(copy=True\)"):
        kept = list(loader)
    assert len(kept) == len(loader) and _moved(loader) == 0
    loader.close()


def test_steady_copies_keep_the_slot_memory_order() -> None:
    kept = KeptViews(1, streak=1, copies=1)
    slot = np.zeros((2, 4, 4, 3), np.uint8).transpose(0, 3, 1, 2)  # channels last
    first = kept.hand_out(0, {"x": slot[:2]})
    assert kept.take(0) == ["x"]  # kept: the next one is a copy
    copy = kept.hand_out(0, {"x": slot[:2]})["x"]
    assert copy is not slot and not np.shares_memory(copy, slot)
    assert copy.strides == slot.strides and kept.copied == 1
    assert kept.hand_out(0, {"x": slot[:2]})["x"].base is slot.base  # watched again
    del first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(120)
def test_kept_batches_of_a_page_locked_ring_stay_intact_on_host_and_device(make_dataset):
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    loader = _loader(path, 2)  # CUDA: the ring is page-locked (pin_memory's default)
    kept = []
    for x, y in loader:
        kept.append((x, y, x.cuda(non_blocking=True)))  # copies in flight while pages move
    torch.cuda.synchronize()
    for (x, y, on_device), (wx, wy) in zip(kept, _reference(loader, 0), strict=True):
        assert torch.equal(x, wx) and torch.equal(y, wy) and torch.equal(on_device.cpu(), wx)
    assert _moved(loader) > 0
    loader.close()
