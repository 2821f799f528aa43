"""The ring's slot bookkeeping (``chunkio.transport.ring``), checked byte by byte.

A worker writes a batch through one process's views and the consumer reads it through
another's: both must agree on where every slot's indices and fields live, no two regions may
overlap, and a batch a user still holds must stay readable after the ring closes. These tests
read the segment through a second, independent attachment, so a wrong offset, size or dtype
shows as bytes in the wrong place.
"""

from __future__ import annotations

import os
import re
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest
import torch

from chunkio.errors import LoaderError
from chunkio.transport import SHM_PREFIX, RingLayout, RingSpec, SlotRing
from chunkio.transport.detach import PAGE, can_detach
from chunkio.transport.ring import FieldSpec, batch_view
from chunkio.util import shm as shm_module


def _raw(name: str) -> bytes:
    """The whole segment's bytes, read through an attachment of its own."""
    shm = SharedMemory(name=name)
    try:
        return bytes(shm.buf)
    finally:
        shm.close()


def _names() -> set[str]:
    mine = f"{SHM_PREFIX}{os.getpid()}_"
    return {n for n in os.listdir("/dev/shm") if n.startswith(mine)}


def test_field_spec_sizes_and_views() -> None:
    f = FieldSpec("x", "<i2", (3, 5))
    assert f.sample_nbytes == 30
    assert FieldSpec("s", "<f8", ()).sample_nbytes == 8
    raw = np.arange(4 * 30, dtype=np.uint8)
    v = f.view(raw, 4)
    assert v.shape == (4, 3, 5) and v.dtype == np.dtype("<i2")
    assert np.shares_memory(v, raw)
    assert v.tobytes() == raw.tobytes()  # C order, no reordering
    cl = FieldSpec("img", "|u1", (3, 2, 2), channels_last=True).view(np.arange(24, dtype="u1"), 2)
    assert cl.shape == (2, 3, 2, 2)
    # memory is (n, H, W, C): channel c of pixel (h, w) of sample n at n*12 + (h*2 + w)*3 + c
    assert cl[1, 2, 1, 0] == 12 + (1 * 2 + 0) * 3 + 2


def test_batch_view_orders_memory_channels_last_only_when_asked() -> None:
    flat = np.arange(2 * 3 * 2 * 4)
    plain = batch_view(flat, 2, (3, 2, 4))
    np.testing.assert_array_equal(plain, flat.reshape(2, 3, 2, 4))
    cl = batch_view(flat, 2, (3, 2, 4), channels_last=True)
    np.testing.assert_array_equal(cl, flat.reshape(2, 2, 4, 3).transpose(0, 3, 1, 2))
    assert cl[1, 1, 0, 2] == 24 + (0 * 4 + 2) * 3 + 1
    assert np.shares_memory(cl, flat)


@pytest.mark.parametrize(("batch", "slots"), [(0, 2), (2, 0), (-1, 1)])
def test_layout_refuses_an_empty_ring(batch: int, slots: int) -> None:
    with pytest.raises(ValueError, match=rf"batch_size >= 1 and num_slots >= 1; got {batch} and"):
        RingLayout((), batch_size=batch, num_slots=slots)


def test_layout_arithmetic_gives_every_region_whole_pages() -> None:
    page = PAGE  # regions are moved out of the ring page by page (kept batches)
    lay = RingLayout.of(
        {"a": (np.dtype("<f4"), (3,)), "b": (np.dtype("|u1"), (1,)), "c": (np.dtype("<i8"), ())},
        batch_size=5,
        num_slots=3,
    )
    # indices 5*8=40, a 5*12=60, b 5, c 40: one page each
    assert lay._sizes == [page] * 4
    assert [lay.region_nbytes(k) for k in (-1, 0, 1, 2)] == [page] * 4
    assert lay.slot_nbytes == 4 * page and lay.nbytes == 12 * page
    assert [lay.field_offset(2, k) for k in (-1, 0, 1, 2)] == [p * page for p in (8, 9, 10, 11)]
    big = RingLayout.of({"x": (np.dtype("<f8"), (17,))}, batch_size=9 * page, num_slots=2)
    # indices 72 pages; x 9*136 = 1224 pages
    assert big._sizes == [72 * page, 1224 * page] and big.slot_nbytes == 1296 * page
    assert big.field_offset(1, 0) == 1296 * page + 72 * page
    over = RingLayout.of({"x": (np.dtype("|u1"), (page + 1,))}, batch_size=1, num_slots=1)
    assert over._sizes == [page, 2 * page]  # one byte past a page takes the next page
    exact = RingLayout.of({"x": (np.dtype("|u1"), (page,))}, batch_size=1, num_slots=1)
    assert exact._sizes == [page, page]  # a region already whole pages is not padded


def test_layout_of_normalises_fields() -> None:
    lay = RingLayout.of(
        {"img": (np.dtype("u1"), [3, 4, 5]), "vec": (np.dtype("f4"), (3,)), "m": ("<i2", (2, 2))},
        batch_size=2.0,  # type: ignore[arg-type]
        num_slots=np.int64(4),  # type: ignore[arg-type]
        channels_last=("img", "vec"),
    )
    assert lay.fields == (
        FieldSpec("img", "|u1", (3, 4, 5), True),
        FieldSpec("vec", "<f4", (3,), False),  # channels last applies to (C, H, W) fields only
        FieldSpec("m", "<i2", (2, 2), False),
    )
    assert type(lay.batch_size) is int and type(lay.num_slots) is int
    assert (lay.batch_size, lay.num_slots) == (2, 4)
    plain = RingLayout.of({"img": (np.dtype("u1"), (3, 4, 5))}, batch_size=1, num_slots=1)
    assert plain.fields[0].channels_last is False


def test_slots_land_at_their_offsets_and_a_second_attachment_sees_them() -> None:
    lay = RingLayout.of(
        {"x": (np.dtype("<f4"), (3,)), "y": (np.dtype("<i2"), ())}, batch_size=5, num_slots=3
    )
    ring = SlotRing.create(lay)
    try:
        # short: macOS allows shared-memory names of 31 characters at most
        assert re.fullmatch(rf"{SHM_PREFIX}{os.getpid()}_[0-9a-f]{{8}}", ring.name), ring.name
        # the address handed to cudaHostRegister is where the views start
        assert ring.indices(0).ctypes.data == ring.address + lay.field_offset(0, -1)
        assert ring.fields(2)["y"].ctypes.data == ring.address + lay.field_offset(2, 1)
        assert ring.num_slots == 3 and ring.nbytes == lay.nbytes
        assert ring.spec == RingSpec(ring.name, lay)
        for slot in range(3):
            idx = ring.indices(slot)
            assert idx.dtype == np.int64 and idx.shape == (5,)
            idx[:] = np.arange(5) + 100 * slot
            f = ring.fields(slot)
            assert f["x"].shape == (5, 3) and f["x"].dtype == np.dtype("<f4")
            assert f["y"].shape == (5,) and f["y"].dtype == np.dtype("<i2")
            f["x"][...] = np.arange(15, dtype="<f4").reshape(5, 3) + slot
            f["y"][...] = -np.arange(5, dtype="<i2") - slot
        raw = _raw(ring.name)
        assert len(raw) >= lay.nbytes
        for slot in range(3):
            at = lay.field_offset(slot, -1)
            assert raw[at : at + 40] == (np.arange(5) + 100 * slot).astype("<i8").tobytes()
            at = lay.field_offset(slot, 0)
            want = (np.arange(15, dtype="<f4") + slot).tobytes()
            assert raw[at : at + 60] == want
            at = lay.field_offset(slot, 1)
            assert raw[at : at + 10] == (-np.arange(5, dtype="<i2") - slot).tobytes()
        # a worker's attachment: same memory, both ways
        worker = SlotRing.attach(ring.spec)
        try:
            assert worker.name == ring.name
            for slot in range(3):
                assert worker.indices(slot).tolist() == ring.indices(slot).tolist()
                assert np.array_equal(worker.fields(slot)["x"], ring.fields(slot)["x"])
            worker.fields(2)["y"][...] = 7
            assert ring.fields(2)["y"].tolist() == [7] * 5
        finally:
            worker.close()
        assert ring.name in _names()  # a worker closing never unlinks
    finally:
        ring.close()
    assert ring.name not in _names()


def test_channels_last_slots_hold_pixels_channel_innermost() -> None:
    lay = RingLayout.of(
        {"img": (np.dtype("|u1"), (3, 2, 2))}, batch_size=2, num_slots=1, channels_last=["img"]
    )
    ring = SlotRing.create(lay)
    try:
        img = ring.fields(0)["img"]
        assert img.shape == (2, 3, 2, 2)
        img[...] = np.arange(24, dtype="u1").reshape(2, 3, 2, 2)
        raw = _raw(ring.name)
        at = lay.field_offset(0, 0)
        # sample 1, pixel (1, 0), channel 2 sits at 12 + (1*2 + 0)*3 + 2
        assert raw[at + 12 + 6 + 2] == img[1, 2, 1, 0]
        assert raw[at : at + 24] == np.ascontiguousarray(img.transpose(0, 2, 3, 1)).tobytes()
    finally:
        ring.close()


def test_an_empty_layout_still_makes_a_segment() -> None:
    ring = SlotRing.create(RingLayout((), batch_size=1, num_slots=1))
    try:
        assert ring.nbytes == PAGE and ring.fields(0) == {}
    finally:
        ring.close()


def test_close_is_idempotent_and_a_held_batch_outlives_it() -> None:
    lay = RingLayout.of({"x": (np.dtype("<i4"), (4,))}, batch_size=2, num_slots=2)
    ring = SlotRing.create(lay)
    held = ring.fields(1)["x"]
    held[...] = 9
    calls: list[str] = []
    ring.add_release_hook(lambda: calls.append("first"))

    def failing() -> None:
        calls.append("second")
        raise RuntimeError("teardown noise is swallowed")

    ring.add_release_hook(failing)
    name = ring.name
    ring.close()
    assert name not in _names()  # unlinked at once
    ring.close()  # again: nothing to do, no error
    with pytest.raises(LoaderError, match=rf"ring {name} is closed"):
        ring.add_release_hook(lambda: None)
    with pytest.raises(IndexError):
        ring.fields(0)
    assert calls == []  # the held view keeps the mapping alive
    assert held.tolist() == [[9] * 4] * 2
    del held  # the last view: unmapped at once (reference counting, no collection needed)
    assert calls == ["second", "first"]  # hooks run last-registered first, errors swallowed


def test_close_by_the_creator_survives_a_segment_already_gone() -> None:
    ring = SlotRing.create(RingLayout((), batch_size=1, num_slots=1))
    other = SharedMemory(name=ring.name)
    other.unlink()  # someone (a cleanup script) removed the name first
    other.close()
    ring.close()
    assert ring.name not in _names()


def test_short_shared_memory_is_refused_before_creating(monkeypatch: pytest.MonkeyPatch) -> None:
    lay = RingLayout.of({"x": (np.dtype("|u1"), (2**20,))}, batch_size=3, num_slots=2)
    free = {"n": lay.nbytes - 1}

    def usage(path: str) -> object:
        assert path == "/dev/shm"
        return type("Usage", (), {"free": free["n"]})()

    monkeypatch.setattr("chunkio.util.shm.shutil.disk_usage", usage)
    before = _names()
    with pytest.raises(
        LoaderError,
        match=r"needs 6\.0 MiB of shared memory but /dev/shm has 6\.0 MiB free; lower prefetch, "
        r"batch_size or num_workers, enlarge /dev/shm \(docker: --shm-size\), or use "
        r"workers=chunkio\.Workers\(transport='dataloader'\)$",
    ):
        SlotRing.create(lay)
    assert _names() == before
    free["n"] = lay.nbytes  # exactly enough is enough
    SlotRing.create(lay).close()
    monkeypatch.setattr("chunkio.util.shm.os.path.isdir", lambda p: False)
    free["n"] = 0  # no /dev/shm to measure (not Linux): nothing to check
    SlotRing.create(lay).close()


@pytest.mark.parametrize(
    ("version", "tracked"), [((3, 12, 9, "final", 0), True), ((3, 13, 0, "final", 0), False)]
)
def test_a_worker_attaches_untracked_where_python_allows(
    monkeypatch: pytest.MonkeyPatch, version: tuple[object, ...], tracked: bool
) -> None:
    """From Python 3.13 a worker attaches with ``track=False``: a tracked attachment would be
    unlinked by the worker's resource tracker when the worker exits, under the main process.
    Before 3.13 ``SharedMemory`` has no ``track`` (this interpreter may be either, so the
    constructor is recorded rather than called)."""
    calls: list[dict[str, object]] = []

    def record(**kw: object) -> str:
        calls.append(kw)
        return "attached"

    monkeypatch.setattr(shm_module.sys, "version_info", version)
    monkeypatch.setattr(shm_module, "SharedMemory", record)
    assert shm_module.attach("chunkio_1_abcd") == "attached"
    assert calls == [
        {"name": "chunkio_1_abcd"} if tracked else {"name": "chunkio_1_abcd", "track": False}
    ]


@pytest.mark.skipif(not can_detach(), reason="moving kept pages needs Linux")
def test_a_detached_slot_keeps_the_views_and_the_ring_writes_fresh_memory() -> None:
    lay = RingLayout.of(
        {"x": (np.dtype("<f4"), (3,)), "y": (np.dtype("<i2"), ())}, batch_size=5, num_slots=2
    )
    ring = SlotRing.create(lay)
    worker = SlotRing.attach(ring.spec)  # writes as a worker does, through its own mapping
    try:
        worker.fields(1)["x"][...] = 1.5
        worker.fields(1)["y"][...] = 4
        x, y = torch.from_numpy(ring.fields(1)["x"]), ring.fields(1)["y"]
        view, numpy_view = x[1:3], x.numpy()[0]
        ring.detach(1, ["x"])
        worker.fields(1)["x"][...] = -1.0  # the next batch of the slot
        worker.fields(1)["y"][...] = -4
        assert torch.equal(x, torch.full((5, 3), 1.5)) and torch.equal(view, x[1:3])
        assert numpy_view.tolist() == [1.5] * 3
        assert ring.fields(1)["x"].tolist() == [[-1.0] * 3] * 5  # the ring sees the new batch
        assert y.tolist() == [-4] * 5  # a field not detached is still the slot's
        assert ring.fields(0)["x"].ctypes.data == ring.address + lay.field_offset(0, 0)
        ring.detach(1, ["x"])  # a region detached before is moved again from where it is now
        worker.fields(1)["x"][...] = 2.0
        assert ring.fields(1)["x"].tolist() == [[2.0] * 3] * 5
        assert torch.equal(x, torch.full((5, 3), 1.5))
    finally:
        worker.close()
        ring.close()
    assert numpy_view.tolist() == [1.5] * 3  # still mapped after the ring closed


@pytest.mark.skipif(not can_detach(), reason="moving kept pages needs Linux")
def test_a_pinned_ring_is_unpinned_once_before_pages_move_or_the_memory_goes() -> None:
    lay = RingLayout.of({"x": (np.dtype("u1"), (8,))}, batch_size=2, num_slots=2)
    calls: list[str] = []
    ring = SlotRing.create(lay)
    ring.pinned(lambda: calls.append("unpin"))
    held = ring.fields(0)["x"]
    ring.detach(0, ["x"])  # CUDA cannot keep pages that move: unpinned first
    assert calls == ["unpin"]
    ring.detach(1, ["x"])
    ring.close()
    del held
    assert calls == ["unpin"]  # once, not again when the memory is unmapped
    other = SlotRing.create(lay)
    other.pinned(lambda: calls.append("at unmap"))
    other.close()  # nothing views it: unmapped at once
    assert calls == ["unpin", "at unmap"]
    closed = SlotRing.create(lay)
    closed.close()
    with pytest.raises(LoaderError, match="is closed"):
        closed.detach(0, ["x"])


@pytest.mark.skipif(not can_detach(), reason="moving kept pages needs Linux")
def test_a_refused_move_is_a_loader_error_naming_field_slot_and_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(address: int, nbytes: int) -> None:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr("chunkio.transport.ring.privatise", refuse)
    ring = SlotRing.create(RingLayout.of({"x": (np.dtype("u1"), (8,))}, batch_size=2, num_slots=2))
    try:
        with pytest.raises(
            LoaderError, match=r"field 'x' of ring slot 1 .*Workers\(copy=True\)"
        ) as info:
            ring.detach(1, ["x"])
        assert isinstance(info.value.__cause__, OSError)
    finally:
        ring.close()
