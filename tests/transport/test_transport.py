"""The shared-memory ring transport behind ``make_loader`` (RELIABILITY rows 2, 5, 6 and 27).

Batches must equal the source arrays indexed by the sampler's batches in every start method;
failures (worker exception, SIGKILL, timeout, Ctrl-C, an abandoned iterator) must surface
promptly as ``LoaderError`` and leave no shared-memory segment and no worker process behind.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch
from resume_harness import assert_resume_equals_uninterrupted

from chunkio import ChunkDataset, Workers, make_loader
from chunkio.backends import Compression, open_writer
from chunkio.errors import LoaderError
from chunkio.format.layout import ATTR_KEY, COMPLETE_KEY, DatasetLayout, FieldInfo
from chunkio.loader import RingFallbackWarning
from chunkio.transport import SHM_PREFIX, RingLayout, SlotRing

BATCH = 24


def _segments() -> set[str]:
    """Ring segments this test process created that still have a name in /dev/shm."""
    mine = f"{SHM_PREFIX}{os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(mine)}


def _workers() -> set[int]:
    """Live descendants, minus multiprocessing's long-lived helpers (tracker, forkserver)."""
    out = set()
    for child in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(child.cmdline())
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        if "resource_tracker" not in cmd and "forkserver" not in cmd:
            out.add(child.pid)
    return out


def _assert_clean(before: set[int], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while (_workers() - before or _segments()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _segments(), f"shared memory left behind: {_segments()}"
    assert not _workers() - before, f"processes left behind: {_workers() - before}"


def _dataset(path: str, cls: type[ChunkDataset] = ChunkDataset, **kw: Any) -> ChunkDataset:
    # preload_bytes=0: the tiny test arrays go through the chunk path (plan, cache), not RAM
    return cls(path, fields=["image", "label"], preload_bytes=0, cache_bytes=1 << 20, **kw)


def _batches(loader: Any, epoch: int = 0) -> list[list[int]]:
    """The sample ids of each batch the loader's sampler gives in ``epoch``."""
    return [b.tolist() for b in loader.sampler.batches(epoch)]


def _expected(
    arrays: dict[str, np.ndarray], loader: Any, epoch: int
) -> list[dict[str, np.ndarray]]:
    """The source arrays indexed by the sampler's batches (stored unshuffled: row i is
    ``arrays[...][i]``), never ``read_batch``: a bug the ring shares with it stays visible."""
    return [{k: arrays[k][b] for k in ("image", "label")} for b in _batches(loader, epoch)]


def _check_epoch(loader: Any, expected: list[dict[str, np.ndarray]]) -> None:
    n = 0
    for (x, y), want in zip(loader, expected, strict=True):
        assert torch.equal(x, torch.from_numpy(want["image"]))
        assert torch.equal(y, torch.from_numpy(want["label"]))
        n += 1
    assert n == len(expected)


MATRIX = [
    ("fork", "zarr", False),
    ("fork", "zarr", True),
    ("fork", "hdf5", False),
    ("fork", "hdf5", True),
    ("spawn", "zarr", True),
    ("forkserver", "hdf5", False),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("start", "fmt", "persistent"), MATRIX)
def test_ring_batches_equal_read_batch(make_dataset, start, fmt, persistent):
    path, arrays = make_dataset(fmt, samples_per_chunk=10)
    before = _workers()
    ds = _dataset(path)
    ds.read_batch([0, 150])  # the parent holds a handle when the workers start
    loader = make_loader(
        ds, BATCH, num_workers=2, workers=Workers(context=start, persistent=persistent)
    )
    assert loader.transport == "ring"
    pids = []
    epochs = 2 if start == "fork" or persistent else 1  # each spawned start imports torch
    for epoch in range(epochs):
        _check_epoch(loader, _expected(arrays, loader, epoch))
        pids.append(loader.worker_pids())
    if persistent:
        assert pids[0] == pids[1] and len(pids[0]) == 2  # the same workers served both epochs
    else:
        assert pids == [()] * epochs  # stopped at the end of each pass
    loader.close()
    _assert_clean(before)


@pytest.mark.timeout(60)
def test_output_structures_and_in_process_route(make_dataset):
    path, arrays = make_dataset("zarr")
    by_dict = make_loader(path, 50, shuffle=False, num_workers=1, workers=Workers(context="fork"))
    batch = next(iter(by_dict))
    assert set(batch) == {"image", "label"}
    assert torch.equal(batch["label"], torch.from_numpy(arrays["label"][:50]))
    by_dict.close()
    single = make_loader(path, 64, fields="image", shuffle=False, num_workers=0)
    assert single.transport == "local"
    pointers = set()
    for i, x in enumerate(single):
        assert torch.equal(x, torch.from_numpy(arrays["image"][i * 64 : (i + 1) * 64]))
        pointers.add(x.data_ptr())
    # two reused buffers: the loop still holds the previous batch while it asks for the next
    assert len(pointers) == 2
    kept = list(
        make_loader(
            path, 64, fields="image", shuffle=False, num_workers=0, workers=Workers(copy=True)
        )
    )
    assert torch.equal(torch.cat(kept), torch.from_numpy(arrays["image"]))


@pytest.mark.timeout(60)
def test_copy_true_batches_can_be_kept_and_views_outlive_close(make_dataset):
    path, arrays = make_dataset("hdf5", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path), BATCH, num_workers=2, workers=Workers(context="fork", copy=True)
    )
    kept = list(loader)
    expected = _expected(arrays, loader, 0)
    assert len(kept) == len(expected)
    assert all(
        torch.equal(x, torch.from_numpy(w["image"]))
        for (x, _), w in zip(kept, expected, strict=True)
    )
    loader.close()
    views = make_loader(_dataset(path), BATCH, num_workers=1, workers=Workers(context="fork"))
    x, _ = next(iter(views))
    want = x.clone()
    views.close()
    _assert_clean(before)  # the segment's name is gone ...
    assert torch.equal(x, want)  # ... but the batch still held stays readable


@pytest.mark.timeout(60)
def test_resume_mid_epoch_with_workers_equals_uninterrupted_run(make_dataset):
    path, _ = make_dataset("zarr", samples_per_chunk=10)

    def make() -> Any:
        loader = make_loader(
            _dataset(path),
            BATCH,
            num_workers=2,
            workers=Workers(context="fork", persistent=False),
        )
        loader.set_epoch(1)
        return loader

    assert_resume_equals_uninterrupted(make, stop=3)
    gc.collect()
    assert not _segments()


class FailingDataset(ChunkDataset):
    """Raises at once on any batch that contains sample ``bad``; other reads take ``delay`` s."""

    bad = 13
    delay = 0.0

    def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
        if self.bad in np.asarray(indices).tolist():
            raise ValueError(f"cannot decode sample {self.bad} (injected)")
        time.sleep(self.delay)
        return super().read_batch(indices, out, epoch=epoch)


class SlowDataset(ChunkDataset):
    """Every read takes ``delay`` seconds (after the first ``fast`` reads of each process)."""

    delay = 0.05
    fast = 0

    def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
        self._reads = getattr(self, "_reads", 0) + 1
        if self._reads > self.fast:
            time.sleep(self.delay)
        return super().read_batch(indices, out, epoch=epoch)


class StuckDataset(SlowDataset):
    delay = 30.0
    fast = 1


@pytest.mark.timeout(60)
def test_worker_exception_is_raised_in_batch_order_with_its_traceback(make_dataset):
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    before = _workers()
    ds = _dataset(path, FailingDataset)
    loader = make_loader(ds, BATCH, num_workers=2, workers=Workers(context="fork"))
    # batch 5 (worker 1's third) fails long before worker 0 has read batches 2 and 4
    ds = loader.dataset  # the copy the loader reads (the dataset passed in stays as it was)
    ds.bad, ds.delay = _batches(loader)[5][0], 0.3
    delivered = 0
    with pytest.raises(LoaderError) as info:
        for _ in loader:
            delivered += 1
    assert delivered == 5  # the batches before the failing one all arrive first
    assert loader.state_dict()["sampler"]["batches_done"] == 5
    text = str(info.value)
    assert "ring worker" in text and f"cannot decode sample {ds.bad} (injected)" in text
    assert "Traceback" in text and "in read_batch" in text  # the worker's own traceback
    assert isinstance(info.value.__cause__, ValueError)
    _assert_clean(before)  # a failure stops even persistent workers


@pytest.mark.timeout(60)
def test_sigkilled_worker_is_reported_promptly_and_nothing_is_left(make_dataset):
    path, arrays = make_dataset("hdf5", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path, SlowDataset), 8, num_workers=2, workers=Workers(context="fork")
    )
    it = iter(loader)
    next(it)
    victim = loader.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(LoaderError, match=rf"ring worker 1 \(pid {victim}\).*SIGKILL"):
        for _ in it:
            pass
    # "promptly" is the promise (RELIABILITY row 5): the ring watches each worker's process
    # sentinel, so the death is seen at once; 15 s leaves a loaded 2-core machine room
    assert time.monotonic() - start < 15
    _assert_clean(before)
    _check_epoch(loader, _expected(arrays, loader, 0))  # the next pass starts new workers
    loader.close()
    _assert_clean(before)


@pytest.mark.timeout(60)
def test_timeout_raises_and_stops_the_stuck_worker(make_dataset):
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path, StuckDataset),
        BATCH,
        num_workers=1,
        workers=Workers(timeout=0.5, context="fork"),
    )
    start = time.monotonic()
    with pytest.raises(LoaderError, match=r"no batch within timeout=0.5 s"):
        for _ in loader:
            pass
    # the promise is about time: raised at the timeout (0.5 s), not when the stuck read
    # ends (30 s); 15 s is generous and still far from 30
    assert time.monotonic() - start < 15
    _assert_clean(before)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("persistent", [False, True])
def test_dropped_iterator_and_consumer_interrupt_leave_nothing(make_dataset, persistent):
    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path, SlowDataset),
        8,
        num_workers=2,
        workers=Workers(context="fork", persistent=persistent),
    )
    it = iter(loader)
    next(it), next(it)
    del it  # abandoned midway, batches still in flight
    gc.collect()
    if persistent:  # workers are kept; the next pass must still be exact from batch 0
        assert len(loader.worker_pids()) == 2 and _segments()
        _check_epoch(loader, _expected(arrays, loader, 0))
        with pytest.raises(KeyboardInterrupt):
            for i, _ in enumerate(loader):
                if i == 2:
                    raise KeyboardInterrupt
        del loader  # persistent workers stop when the loader is collected
        gc.collect()
    else:
        _assert_clean(before)
        with pytest.raises(KeyboardInterrupt):
            for i, _ in enumerate(loader):
                if i == 2:
                    raise KeyboardInterrupt
    _assert_clean(before)


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal.

    A background job of a non-interactive shell (``nohup make test &``) starts with SIGINT
    ignored, and Python then installs no handler: the signal the test sends would be dropped
    and the test would hang until its timeout.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.timeout(60)
def test_ctrl_c_while_waiting_stops_even_persistent_workers(make_dataset, ctrl_c_raises):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    path, _ = make_dataset("zarr", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path, StuckDataset), BATCH, num_workers=1, workers=Workers(context="fork")
    )
    # Ctrl-C after 1 s, and again every 5 s if it got lost, as a user presses it again:
    # CPython drops a KeyboardInterrupt raised inside a finalizer that the garbage collector
    # happens to run in the main thread at that moment (the test hung once in five full runs).
    done = threading.Event()

    def press() -> None:
        wait = 1.0
        while not done.wait(wait):
            os.kill(os.getpid(), signal.SIGINT)
            wait = 5.0

    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                pass
    finally:
        done.set()
        presser.join()
    _assert_clean(before)


@pytest.mark.timeout(60)
def test_transforms_and_ragged_fields_fall_back_to_the_dataloader(make_dataset, tmp_path):
    path, arrays = make_dataset("zarr")
    flip = ChunkDataset(path, fields=["image", "label"], transform=lambda s: (s[0].flip(-1), s[1]))
    with pytest.warns(RingFallbackWarning, match="declares no output shape"):
        loader = make_loader(flip, 50, shuffle=False, num_workers=0)
    assert loader.transport == "dataloader"
    x, _ = next(iter(loader))
    assert torch.equal(x, torch.from_numpy(arrays["image"][:50]).flip(-1))
    batched = ChunkDataset(path, fields="label", batch_transform=lambda b: b * 2)
    assert make_loader(batched, 8, num_workers=0).transport == "dataloader"
    ragged = _write_ragged(str(tmp_path / "ragged.zarr"))
    assert make_loader(ragged, 4, num_workers=0).transport == "dataloader"
    assert (
        make_loader(path, 8, num_workers=0, workers=Workers(transport="dataloader")).transport
        == "dataloader"
    )


def _write_ragged(path: str) -> str:
    """Five samples of a ragged ``tokens`` field (lengths 0..4), one chunk."""
    lengths = np.arange(5)
    writer = open_writer(path)
    values = np.arange(int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    for name, data in (
        ("tokens__values", values),
        ("tokens__offsets", offsets),
        ("tokens__shapes", lengths[:, None].astype(np.int64)),
    ):
        writer.create_array(
            name, shape=data.shape, dtype=data.dtype, chunks=data.shape, compression=Compression()
        )
        writer.write_block(name, 0, data)
    field = FieldInfo("tokens", np.dtype(np.int32), None, "ragged")
    writer.set_attrs({ATTR_KEY: DatasetLayout(5, 5, (field,)).to_attrs()})
    writer.set_attrs({COMPLETE_KEY: True})
    writer.close()
    return path


@pytest.mark.timeout(60)
def test_ring_layout_and_clear_error_when_shared_memory_is_short(monkeypatch):
    layout = RingLayout.of({"x": (np.dtype("<f4"), (3, 5))}, batch_size=7, num_slots=3)
    ring = SlotRing.create(layout)
    views = [ring.fields(s)["x"] for s in range(3)]
    for s, v in enumerate(views):
        v[...] = s
    assert [float(v.mean()) for v in views] == [0.0, 1.0, 2.0]  # slots do not overlap
    assert all(v.ctypes.data % 64 == 0 for v in views)
    ring.close()
    assert not _segments()
    monkeypatch.setattr(
        "chunkio.util.shm.shutil.disk_usage", lambda p: type("U", (), {"free": 1024})()
    )
    with pytest.raises(LoaderError, match=r"/dev/shm has 0\.0 MiB free"):
        SlotRing.create(layout)


@pytest.mark.timeout(60)
def test_a_new_pass_supersedes_an_open_iterator_on_persistent_workers(make_dataset):
    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    loader = make_loader(_dataset(path), BATCH, num_workers=2, workers=Workers(context="fork"))
    loader.set_epoch(0)
    old = iter(loader)
    next(old), next(old)  # more batches of this pass are in flight
    _check_epoch(loader, _expected(arrays, loader, 0))  # exact, despite the stale batches
    with pytest.raises(LoaderError, match="superseded"):
        next(old)
    _check_epoch(loader, _expected(arrays, loader, 0))  # and the workers still serve
    loader.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("persistent", [False, True])
def test_twenty_epochs_keep_fds_processes_and_shared_memory_bounded(make_dataset, persistent):
    path, _ = make_dataset("hdf5", samples_per_chunk=10)
    before = _workers()
    loader = make_loader(
        _dataset(path),
        BATCH,
        num_workers=2,
        workers=Workers(context="fork", persistent=persistent),
    )
    me = psutil.Process()
    fds = []
    for _ in range(20):
        assert sum(len(y) for _, y in loader) == 200
        assert len(_segments()) == int(persistent) and len(_workers() - before) <= 2
        fds.append(me.num_fds())
    assert max(fds[5:]) == min(fds[5:]), f"file descriptors grow: {fds}"
    loader.close()
    _assert_clean(before)


@pytest.mark.timeout(60)
def test_workers_failing_to_start_are_reported(make_dataset, monkeypatch):
    path, _ = make_dataset("zarr")
    before = _workers()

    def no_segment(spec: Any) -> Any:
        raise FileNotFoundError(f"segment {spec.name} is gone (injected)")

    # fork: the children inherit these patches
    monkeypatch.setattr("chunkio.transport.workers.SlotRing.attach", no_segment)
    loader = make_loader(path, 50, num_workers=1, workers=Workers(context="fork"))
    with pytest.raises(LoaderError, match=r"raised while starting(.|\n)*is gone \(injected\)"):
        next(iter(loader))
    _assert_clean(before)
    monkeypatch.setattr("chunkio.transport.workers._limit_threads", lambda: os._exit(3))
    with pytest.raises(LoaderError, match=r"exit code 3 while starting"):
        next(iter(loader))
    _assert_clean(before)


@pytest.mark.timeout(120)
def test_a_start_failure_is_reported_when_the_worker_exited_before_its_first_batch(
    make_dataset, monkeypatch
):
    """The worker reports its error and exits before the main process sends it anything: the
    send meets a closed pipe, and the error is still the worker's own, not a bare death."""
    from chunkio.transport.workers import RingWorkers

    path, _ = make_dataset("zarr")
    before = _workers()

    def no_segment(spec: Any) -> Any:
        raise FileNotFoundError(f"segment {spec.name} is gone (injected)")

    send = RingWorkers.send

    def send_once_exited(self: Any, w: int, message: Any) -> None:
        self.processes[w].join(timeout=60)  # the worker has reported its error and exited
        send(self, w, message)

    monkeypatch.setattr("chunkio.transport.workers.SlotRing.attach", no_segment)
    monkeypatch.setattr(RingWorkers, "send", send_once_exited)
    loader = make_loader(path, 50, num_workers=1, workers=Workers(context="fork"))
    with pytest.raises(LoaderError, match=r"raised while starting(.|\n)*is gone \(injected\)"):
        next(iter(loader))
    _assert_clean(before)


class HintedDataset(ChunkDataset):
    """Reads as if remote: logs each read and each prefetch hint (one line each) to ``log``."""

    log = ""
    hint_sent: Any = None  # an Event, set once the hint the test waits for is on its way

    @property
    def remote(self) -> bool:
        return True

    def prefetch(self, indices: Any) -> None:
        with open(self.log, "a") as f:
            f.write("hint " + " ".join(map(str, np.asarray(indices).tolist())) + "\n")

    def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
        with open(self.log, "a") as f:
            f.write("read " + " ".join(map(str, np.asarray(indices).tolist())) + "\n")
        if not getattr(self, "_first_done", False):  # the first read lasts until the main
            self._first_done = True  # process has sent the hint the test looks for
            assert self.hint_sent.wait(30), "the main process never sent the hint"
        return super().read_batch(indices, out, epoch=epoch)


@pytest.mark.timeout(60)
def test_remote_ring_workers_hear_of_batches_beyond_their_slots(
    make_dataset, tmp_path: Path, monkeypatch
):
    """The sampler knows the order: a remote dataset's ring workers are told the samples of
    the next batches (``lookahead``) before those have a slot, and still read every batch
    once, in order. The worker's first read waits for the main process to send the hint of
    batch 5 (an event, not a sleep): the hint must then reach the dataset before the second
    read."""
    import multiprocessing

    from chunkio.loader_options import REMOTE_LOOKAHEAD
    from chunkio.transport.messages import Hint
    from chunkio.transport.workers import RingWorkers

    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    ds = _dataset(path, HintedDataset)
    ds.log = str(tmp_path / "log.txt")
    ds.hint_sent = multiprocessing.get_context("fork").Event()
    loader = make_loader(ds, 8, num_workers=1, workers=Workers(prefetch=1, context="fork"))
    batches = _batches(loader)
    assert len(batches) > REMOTE_LOOKAHEAD + 3
    send = RingWorkers.send

    def sending(self: Any, w: int, message: Any) -> None:
        send(self, w, message)
        if isinstance(message, Hint) and np.asarray(message.indices).tolist() == batches[5]:
            ds.hint_sent.set()

    monkeypatch.setattr(RingWorkers, "send", sending)
    _check_epoch(loader, _expected(arrays, loader, 0))
    loader.close()
    lines = Path(ds.log).read_text().splitlines()
    reads = [line for line in lines if line.startswith("read ")]
    assert reads == ["read " + " ".join(map(str, b)) for b in batches]
    hints = [line[5:] for line in lines[: lines.index(reads[1])] if line.startswith("hint ")]
    # before its second read, the worker (2 slots: 1 in flight + 1 held) heard of batch 5
    assert " ".join(map(str, batches[5])) in hints, hints
