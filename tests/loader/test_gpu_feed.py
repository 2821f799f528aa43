"""The device feed: ordering and host-memory lifetime of ``DevicePrefetcher``, on CPU.

A fake copy stream behaves like a DMA engine: a copy reads host memory only when its event
completes. A fake source behaves like the ring: one host buffer, poisoned on release and
refilled for the next batch. Releasing a buffer before its copy finished, or holding more than
one, would therefore show up as wrong values or a starved source.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from resume_harness import assert_resume_equals_uninterrupted

from chunkio import ChunkDataset, Workers, make_loader
from chunkio.transport import Lease, RingLayout, SlotRing
from chunkio.transport.gpu import (
    DevicePrefetcher,
    map_tensors,
    pin_ring,
    resolve_device,
    storage_parts,
)


class FakeEvent:
    def __init__(self, tag: int, log: list[str], land: Any) -> None:
        self.tag, self.log, self._land = tag, log, land

    def synchronize(self) -> None:
        if self._land is not None:
            self._land()  # the copy reads host memory now, not when it was issued
            self._land = None
            self.log.append(f"sync{self.tag}")


class FakeStream:
    """Host-to-'device' copies that land only when their event is synchronised."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def copy(self, batch: Any) -> tuple[Any, FakeEvent]:
        tag = int(batch["x"].flatten()[0])
        out = map_tensors(torch.empty_like, batch)

        def land() -> None:
            for k in batch:
                out[k].copy_(batch[k])

        self.log.append(f"copy{tag}")
        return out, FakeEvent(tag, self.log, land)

    def hand_over(self, batch: Any, event: FakeEvent) -> None:
        self.log.append(f"wait{event.tag}")


def ring_like_source(n: int, log: list[str]) -> Iterator[Lease]:
    """``n`` batches ``{"x": full(i)}`` served from one reused host buffer."""
    buf = torch.zeros(4, dtype=torch.int64)
    free = [True]

    def release(i: int) -> None:
        log.append(f"release{i}")
        buf.fill_(-1)  # poison: a copy that lands after this is visibly wrong
        free[0] = True

    for i in range(n):
        if not free[0]:
            raise AssertionError(f"batch {i} requested while batch {i - 1} is still held")
        free[0] = False
        buf.fill_(i)
        log.append(f"produce{i}")
        yield Lease({"x": buf}, lambda i=i: release(i))


@pytest.mark.timeout(60)
def test_copies_run_one_batch_ahead_and_memory_is_released_after_its_copy():
    log: list[str] = []
    got = []
    for batch in DevicePrefetcher(ring_like_source(3, log), stream=FakeStream(log)):
        log.append(f"compute{int(batch['x'][0])}")
        got.append(batch["x"].tolist())
    assert got == [[0] * 4, [1] * 4, [2] * 4]
    assert log == [
        "produce0", "copy0",
        "wait0", "sync0", "release0", "produce1", "copy1", "compute0",
        "wait1", "sync1", "release1", "produce2", "copy2", "compute1",
        "wait2", "sync2", "release2", "compute2",
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_source_error_comes_after_the_batches_before_it_and_close_releases():
    log: list[str] = []

    def failing() -> Iterator[Lease]:
        yield from ring_like_source(2, log)
        raise OSError("chunk 7 unreadable")

    it = DevicePrefetcher(failing(), stream=FakeStream(log))
    assert [int(next(it)["x"][0]) for _ in range(2)] == [0, 1]
    with pytest.raises(OSError, match="chunk 7"):
        next(it)
    assert log.count("release0") == log.count("release1") == 1

    log.clear()
    source = ring_like_source(5, log)
    it = DevicePrefetcher(source, stream=FakeStream(log))
    next(it)
    it.close()  # batch 1 is in flight: wait for its copy, then free its memory
    assert log[-2:] == ["sync1", "release1"]
    assert source.gi_frame is None  # the source was closed too


@pytest.mark.timeout(60)
def test_cuda_without_cuda_is_a_clear_error_and_cpu_is_host_delivery(make_dataset):
    path, _ = make_dataset("zarr")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            make_loader(path, 8, num_workers=0, device="cuda")
    loader = make_loader(path, 8, num_workers=0, device="cpu", fields="image")
    assert loader.device is None and next(iter(loader)).device.type == "cpu"
    assert resolve_device("meta") == torch.device("meta")
    meta = make_loader(path, 8, num_workers=0, device="meta", fields="image")
    assert next(iter(meta)).device.type == "meta"


@pytest.mark.timeout(60)
def test_device_route_through_ring_workers_equals_reference_and_resumes(make_dataset, monkeypatch):
    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    log: list[str] = []

    class Stream(FakeStream):
        def copy(self, batch: Any) -> tuple[Any, FakeEvent]:  # tuples of (image, label)
            out = map_tensors(torch.empty_like, batch)

            def land() -> None:
                for dst, src in zip(out, batch, strict=True):
                    dst.copy_(src)

            return out, FakeEvent(0, log, land)

    # "cpu" as a pretend device: the loader then takes its device route with the fake stream
    monkeypatch.setattr("chunkio.loader_options.resolve_device", lambda d: torch.device("cpu"))
    monkeypatch.setattr("chunkio.loader.chunk_loader.copy_stream_for", lambda d: Stream(log))

    def make() -> Any:
        ds = ChunkDataset(path, fields=["image", "label"], preload_bytes=0)
        return make_loader(
            ds,
            16,
            num_workers=2,
            device="gpu-ish",
            workers=Workers(prefetch=1, context="fork", persistent=False),
        )

    loader = make()
    assert loader.device is not None
    for (x, y), idx in zip(loader, loader.sampler.batches(0), strict=True):
        # the source arrays (stored unshuffled), not read_batch: the reference is not chunkio
        assert torch.equal(x, torch.from_numpy(arrays["image"][idx]))
        assert torch.equal(y, torch.from_numpy(arrays["label"][idx]))
    assert_resume_equals_uninterrupted(make, stop=5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(60)
def test_cuda_feed_equals_reference_from_registered_ring(make_dataset):
    layout = RingLayout.of({"x": (np.dtype("u1"), (64,))}, batch_size=4, num_slots=2)
    ring = SlotRing.create(layout)
    assert pin_ring(ring)
    assert torch.from_numpy(ring.fields(0)["x"]).is_pinned()
    ring.close()
    path, arrays = make_dataset("hdf5", samples_per_chunk=10)
    loader = make_loader(path, 16, num_workers=2, device="cuda", fields=["image", "label"])
    for (x, y), idx in zip(loader, loader.sampler.batches(0), strict=True):
        assert x.is_cuda and y.is_cuda
        assert torch.equal(x.cpu(), torch.from_numpy(arrays["image"][idx]))
        assert torch.equal(y.cpu(), torch.from_numpy(arrays["label"][idx]))
    loader.close()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")  # torch's notice
@pytest.mark.parametrize("layout", ["csr", "csc", "coo", "dense"])
def test_streams_are_recorded_on_the_strided_parts_of_sparse_batches(layout: str) -> None:
    """``record_stream`` takes strided tensors only (a sparse CSR batch on CUDA raised
    NotImplementedError): the parts recorded are strided and hold the whole tensor."""
    dense = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    build = {
        "csr": (
            dense.to_sparse_csr,
            lambda p: torch.sparse_csr_tensor(*p, size=(2, 3), check_invariants=True),
        ),
        "csc": (
            dense.to_sparse_csc,
            lambda p: torch.sparse_csc_tensor(*p, size=(2, 3), check_invariants=True),
        ),
        "coo": (
            dense.to_sparse,
            lambda p: torch.sparse_coo_tensor(*p, size=(2, 3), check_invariants=True),
        ),
        "dense": (dense.clone, lambda p: p[0]),
    }
    make, rebuild = build[layout]
    parts = storage_parts(make())
    assert parts and all(p.layout == torch.strided for p in parts)
    assert torch.equal(rebuild(parts).to_dense(), dense)
