"""Hundreds of files as one dataset: the file-aware order (:mod:`chunkio.sampling.file_order`)
keeps each reader on a few files at a time while batches mix like a uniform shuffle, and
``make_loader`` reads a few files' labels, not every file's. Not timed: the rates are in
``benchmarks/bench_files.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import chunkio
from chunkio.collection.core import MAX_OPEN_FILES, FileSetCore
from chunkio.collection.files import FileSet
from chunkio.collection.held import HeldRows
from chunkio.errors import IncompatibleStateError
from chunkio.sampling.epoch_order import EpochOrder
from chunkio.sampling.label_check import check_label_mixing
from chunkio.sampling.label_metrics import label_mixing
from chunkio.sampling.order import OrderSpec

h5py = pytest.importorskip("h5py")

FILES, ROWS, CLASSES = 200, 20, 7
FIELDS = {"x": "x", "label": "label"}


def _write(root: Path, labels: np.ndarray) -> list[str]:
    """``FILES`` HDF5 files of ``ROWS`` rows each (a user's own files, read in place)."""
    root.mkdir(exist_ok=True)
    paths = []
    for k in range(FILES):
        path = root / f"{k:03d}.h5"
        rows = slice(k * ROWS, (k + 1) * ROWS)
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(rows.start, rows.stop, dtype=np.float32)[:, None].repeat(3, 1)
            f["label"] = labels[rows]
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[list[str], np.ndarray]:
    """Files whose labels are drawn at random: each holds most classes."""
    labels = np.random.default_rng(0).integers(0, CLASSES, FILES * ROWS)
    return _write(tmp_path_factory.mktemp("mixed"), labels), labels


def _opened(loader: chunkio.ChunkLoader, readers: int) -> list[int]:
    """Files each of ``readers`` loader workers opens over one epoch: each reads its rows of
    every batch through its own per-process handle, as the ring's workers do."""
    opened = []
    for r in range(readers):
        core = loader.dataset._open_handle()
        assert isinstance(core, FileSetCore)
        for batch in loader.sampler.iter_batches(0):
            lo, hi = loader.sampler.reader_rows(batch.size, readers)[r]
            core.read(["x"], batch[lo:hi])
        opened.append(core.opened)
        core.close()
    return opened


def test_each_worker_opens_each_of_its_files_about_once_per_epoch(mixed) -> None:
    paths, labels = mixed
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    loader = chunkio.make_loader(ds, 64, num_workers=2)
    try:
        opened = _opened(loader, 2)
        # each worker reads its half of the lanes: its files once, plus the files at the
        # edges of its lanes (shared with a neighbour)
        assert sum(opened) <= FILES + 2 * loader.sampler.lanes
        assert max(opened) <= FILES // 2 + loader.sampler.lanes
        mixing = label_mixing(list(loader.sampler.iter_batches(0)), labels)
        assert mixing["distinct_labels_ratio"] >= 0.9  # as mixed as a uniform shuffle, to 10%
    finally:
        loader.close()


def test_the_order_before_it_reopened_files_for_every_batch(mixed) -> None:
    """The same loader with the order built as for one dataset (no file grouping, the pool
    sized by memory alone) and the old open-file cap: what the bound above rules out."""
    paths, _ = mixed
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    sampler = chunkio.ChunkBatchSampler(ds.chunk_sizes(), 64, pool=FILES * ROWS, seed=0)
    core = FileSetCore(ds._files, max_open=MAX_OPEN_FILES)
    for batch in sampler.iter_batches(0):
        core.read(["x"], batch[: batch.size // 2])
    assert core.opened > 3 * FILES  # each batch spans most files: >> one open per file
    core.close()


def test_make_loader_reads_a_few_files_labels(mixed, monkeypatch) -> None:
    paths, _ = mixed
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    reads: list[int] = []
    original = FileSet.part_labels
    monkeypatch.setattr(
        FileSet, "part_labels", lambda self, i, info: reads.append(i) or original(self, i, info)
    )
    chunkio.make_loader(ds, 64, num_workers=0).close()
    assert 0 < len(reads) <= 8  # the stored order judged from a few files spread over the list
    assert max(reads) == FILES - 1 and min(reads) == 0


def test_label_sorted_files_are_judged_from_the_files_batches_touch(tmp_path, monkeypatch) -> None:
    labels = np.repeat(np.arange(FILES) % CLASSES, ROWS)  # one class per file
    ds = chunkio.ChunkDataset(_write(tmp_path / "sorted", labels), fields=FIELDS)
    sampler = chunkio.ChunkBatchSampler(
        ds.chunk_sizes(), 16, pool=10 * ROWS, files=ds._files.chunks_per_file()
    )
    reads: list[int] = []
    original = FileSet.part_labels
    monkeypatch.setattr(
        FileSet, "part_labels", lambda self, i, info: reads.append(i) or original(self, i, info)
    )
    found = check_label_mixing(ds.label_source(), sampler)
    assert found is not None and found["stored_ratio"] < 0.5
    assert len(set(reads)) < FILES // 2  # only the files of the first batches
    expected = label_mixing(list(sampler.iter_batches(0))[:64], labels)
    assert found["loader_distinct"] == pytest.approx(expected["distinct_labels"])


@pytest.mark.parametrize("files", [[3, 1, 2, 4], [1] * 10])
def test_the_file_order_keeps_files_whole_and_resumes_and_splits(files: list[int]) -> None:
    sizes = np.arange(1, sum(files) + 1) % 5 + 3
    file_of_chunk = np.repeat(np.arange(len(files)), files)
    sample_file = np.repeat(file_of_chunk, sizes)
    one_lane = EpochOrder(sizes, OrderSpec(4, 0, lanes=1), seed=1, epoch=2, files=files)
    runs = np.diff(sample_file[np.concatenate(list(one_lane.batches()))]) != 0
    assert runs.sum() == len(files) - 1  # each file read in one run
    spec = OrderSpec(6, 12, lanes=3)
    order = EpochOrder(sizes, spec, seed=1, epoch=2, files=files)
    whole = [b.tolist() for b in order.batches()]
    assert sorted(np.concatenate(whole).tolist()) == list(range(int(sizes.sum())))
    assert [b.tolist() for b in order.batches(start=3)] == whole[3:]  # resume
    assert whole == [
        b.tolist() for b in EpochOrder(sizes, spec, seed=1, epoch=2, files=files).batches()
    ]
    assert whole != [
        b.tolist() for b in EpochOrder(sizes, spec, seed=1, epoch=3, files=files).batches()
    ]
    ranks = [list(order.rank_batches(r, 2)) for r in range(2)]
    joined = [np.concatenate(parts).tolist() for parts in zip(*ranks, strict=True)]
    assert joined[: len(whole) - 1] == whole[:-1]  # the ranks' rows make the global batch


def test_a_state_saved_without_files_does_not_resume_the_file_order() -> None:
    sizes = [5] * 6
    grouped = chunkio.ChunkBatchSampler(sizes, 4, files=[2, 2, 2], world_size=1, rank=0)
    plain = chunkio.ChunkBatchSampler(sizes, 4, world_size=1, rank=0)
    with pytest.raises(IncompatibleStateError, match="files_sha256"):
        grouped.load_state_dict(plain.state_dict())
    with pytest.raises(IncompatibleStateError, match="files_sha256"):
        plain.load_state_dict(grouped.state_dict())
    again = chunkio.ChunkBatchSampler(sizes, 4, files=[2, 2, 2], world_size=1, rank=0)
    again.load_state_dict(grouped.state_at(2))
    assert [list(b) for b in again] == [list(b) for b in grouped][2:]


def test_files_must_count_every_chunk() -> None:
    with pytest.raises(ValueError, match="summing to the 6 chunks"):
        chunkio.ChunkBatchSampler([5] * 6, 4, files=[2, 2], world_size=1, rank=0)


def test_one_chunk_files_read_whole_give_what_planned_reads_give(mixed) -> None:
    paths, labels = mixed
    ds = chunkio.ChunkDataset(paths, fields=FIELDS)
    sampler = chunkio.ChunkBatchSampler(
        ds.chunk_sizes(), 64, pool=2 * ROWS, files=ds._files.chunks_per_file(), world_size=1
    )
    whole, planned = FileSetCore(ds._files, max_open=FILES), FileSetCore(ds._files)
    for batch in sampler.iter_batches(0):
        got = whole.read(["x", "label"], batch, once=True)
        want = planned.read(["x", "label"], batch)
        np.testing.assert_array_equal(got["x"], want["x"])
        np.testing.assert_array_equal(got["label"], labels[batch])
        np.testing.assert_array_equal(want["x"][:, 0], batch)
    assert whole.opened == FILES and whole._held is not None
    assert not len(whole._held)  # each file read once, none kept after
    whole.close()
    planned.close()


def _serve_lanes(held: HeldRows, lanes: int, *, epoch: int = 0) -> tuple[int, int]:
    """Eight files of 7-10 rows per lane, lane ``k`` taking ``k + 1`` rows of its current
    file per step (lanes move through their files at different speeds), every row checked
    against the file's; ``(files read, files read again)``."""
    files = np.arange(8 * lanes).reshape(lanes, 8)
    values = [np.arange(7 + p % 4) + 100 * p for p in range(8 * lanes)]
    taken = np.zeros(8 * lanes, np.int64)
    read = again = 0
    while any(taken[p] < len(values[p]) for p in range(8 * lanes)):
        for lane in range(lanes):
            part = next((int(p) for p in files[lane] if taken[p] < len(values[p])), None)
            if part is None:
                continue
            parts = np.array([part])
            if not held.holds(parts, epoch)[0]:
                again += int(taken[part] > 0)
                read += 1
                assert held.add(part, {"y": values[part]}, epoch)
            rows = np.arange(taken[part], min(len(values[part]), taken[part] + lane + 1))
            got = held.take("y", held.positions(np.full(len(rows), part), rows))
            np.testing.assert_array_equal(got, values[part][rows])
            held.served(parts, np.array([len(rows)]))
            taken[part] += len(rows)
    return read, again


def test_held_files_stay_until_read_and_the_ring_stays_in_its_budget() -> None:
    """The ring of one-chunk files read whole (:mod:`chunkio.collection.held`): rows come
    back as the file held them; a file a lane is still reading is never overwritten while the
    budget allows (the ring grows instead), past it the oldest is (and read again); a pass's
    files are not served to the next pass."""
    roomy = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=32, budget=8 * 1000)
    assert _serve_lanes(roomy, 4) == (32, 0)  # 4 files live at once: never read twice
    assert roomy.capacity <= 4 * 40 and not len(roomy)  # about twice the rows live at once
    tight = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=32, budget=8 * 25)
    read, again = _serve_lanes(tight, 4)  # 4 live files in a ring of 2: some read again
    assert again > 0 and read == 32 + again and tight.capacity <= 25
    ring = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=10, budget=8 * 1000)
    for part in range(8):  # a ring of 80 rows, full
        ring.add(part, {"y": np.full(10, part)}, epoch=0)
    ring.served(np.array([0]), np.array([10]))  # file 0 taken: its rows are free
    ring.add(8, {"y": np.full(10, 8)}, epoch=0)  # there
    ring.add(9, {"y": np.full(10, 9)}, epoch=0)  # file 1 is still read: the ring grows
    assert ring.holds(np.arange(1, 10), 0).all() and ring.capacity == 160
    where = ring.positions(np.arange(1, 10), np.zeros(9, np.int64))
    assert ring.take("y", where).tolist() == list(range(1, 10))
    held = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=2, budget=1024)
    held.add(0, {"y": np.arange(5)}, epoch=0)
    assert held.holds(np.array([0]), 0).all() and not held.holds(np.array([0]), 1).any()
    assert not held.add(1, {"y": np.arange(200)}, epoch=0)  # larger than the budget


def test_a_file_a_reader_serves_only_part_of_does_not_grow_the_ring() -> None:
    """A file at the edge of a reader's lanes is partly read by a neighbour: it stays held
    all pass. The ring places the next files past it instead of doubling at each wrap (it
    grew to its budget so, 16x the rows live at once at 1,000 files)."""
    held = HeldRows(["y"], {"y": np.dtype("i8")}, num_files=100, budget=8 * 10_000)
    assert held.add(0, {"y": np.arange(10)}, epoch=0)
    held.served(np.array([0]), np.array([5]))  # the other half is the neighbour's
    for part in range(1, 100):
        assert held.add(part, {"y": np.arange(10) + 100 * part}, epoch=0)
        where = held.positions(np.full(10, part), np.arange(10))
        assert held.take("y", where).tolist() == list(range(100 * part, 100 * part + 10))
        held.served(np.array([part]), np.array([10]))
    assert held.capacity == 80  # 8 files' rows, as first made
    assert held.take("y", held.positions(np.array([0, 0]), np.array([9, 5]))).tolist() == [9, 5]


def _length(location: str) -> tuple[int, int]:
    """A description for :func:`describe_all` that warns (in a pool's process too), and the
    process that made it."""
    import os
    import warnings

    warnings.warn(f"looked at {location}", UserWarning, stacklevel=1)
    return len(location), os.getpid()


def test_files_described_in_processes_are_described_as_here(mixed, monkeypatch) -> None:
    """Past :data:`POOL_PAYS_S` the files after the first few are described in forked
    processes: the same dataset (rows, categories, chunks) as described here, in the list's
    order; their warnings emitted here."""
    import os

    from chunkio.collection import describe

    if not describe.can_fork():
        pytest.skip("no fork here: files are described in this process")
    paths, labels = mixed
    paths = paths[:24]
    here = chunkio.ChunkDataset(paths, fields=FIELDS)
    monkeypatch.setattr(describe, "POOL_PAYS_S", 0.0)
    monkeypatch.setattr(describe, "describe_processes", lambda: 2)
    pooled = chunkio.ChunkDataset(paths, fields=FIELDS)
    assert [p.location for p in pooled._files.parts] == paths
    assert pooled._files.layout == here._files.layout
    np.testing.assert_array_equal(pooled._files.starts, here._files.starts)
    idx = np.array([0, 479, 20, 233, 100])
    got, want = pooled.read_batch(idx), here.read_batch(idx)
    np.testing.assert_array_equal(got["x"], want["x"])
    np.testing.assert_array_equal(got["label"], labels[idx])
    names = ["n" * k for k in range(1, 13)]
    with pytest.warns(UserWarning) as caught:
        found = describe.describe_all(names, _length, processes=2)
    assert [n for n, _ in found] == list(range(1, 13))  # in the list's order
    pids = [pid for _, pid in found]
    assert pids[:4] == [os.getpid()] * 4 and os.getpid() not in pids[4:]  # the rest: a pool
    assert [str(w.message) for w in caught] == [f"looked at {n}" for n in names]


def test_a_corrupt_file_among_files_described_in_processes_is_named(mixed, tmp_path) -> None:
    """The first bad file of the list is the error, typed and naming it, wherever it was
    described; a missing one likewise."""
    from chunkio.collection import describe
    from chunkio.errors import DatasetNotFoundError, FormatError

    paths = list(mixed[0][:30])
    bad = [tmp_path / "bad17.h5", tmp_path / "bad25.h5"]
    for path in bad:
        path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 4)  # a signature, no file
    paths[17], paths[25] = str(bad[0]), str(bad[1])
    processes = 2 if describe.can_fork() else 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(describe, "POOL_PAYS_S", 0.0)
        with pytest.raises(FormatError, match=r"bad17\.h5"):
            describe.describe_all(paths, _open_layout_of, processes=processes)
        paths[17] = str(tmp_path / "gone.h5")
        with pytest.raises(DatasetNotFoundError, match=r"gone\.h5"):
            describe.describe_all(paths, _open_layout_of, processes=processes)


def _open_layout_of(location: str) -> int:
    from chunkio.backends import ReaderOptions
    from chunkio.collection.files import describe_file

    return describe_file(location, fields=FIELDS, options=ReaderOptions())[1].num_samples


def _dies_in_a_pool(location: str) -> str:
    """A description whose pool processes die (as one killed or out of memory would)."""
    import multiprocessing
    import os

    if multiprocessing.parent_process() is not None:
        os._exit(3)
    return location.upper()


def test_files_a_dead_process_had_are_described_here() -> None:
    from chunkio.collection import describe

    if not describe.can_fork():
        pytest.skip("no fork here: files are described in this process")
    names = [f"f{k}" for k in range(16)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(describe, "POOL_PAYS_S", 0.0)
        found = describe.describe_all(names, _dies_in_a_pool, processes=2)
    assert found == [n.upper() for n in names]


def _length_holding(location: str, held: object) -> tuple[int, int]:
    return _length(location)


def test_a_description_that_does_not_pickle_is_made_here() -> None:
    """A description holding what does not pickle (a lock, a session in storage_options) is
    made in this process: pickled in the pool's feeder thread, it could leave the pool's
    shutdown waiting forever."""
    import functools
    import os
    import threading

    from chunkio.collection import describe

    names = ["n" * k for k in range(1, 13)]
    with pytest.MonkeyPatch.context() as patch, pytest.warns(UserWarning):
        patch.setattr(describe, "POOL_PAYS_S", 0.0)
        found = describe.describe_all(
            names, functools.partial(_length_holding, held=threading.Lock()), processes=2
        )
    assert [pid for _, pid in found] == [os.getpid()] * len(names)


def test_a_daemonic_process_describes_its_files_itself(monkeypatch) -> None:
    """A daemonic process (a DataLoader worker, a Pool's process) may have no children."""
    import multiprocessing
    import types

    from chunkio.collection import describe

    monkeypatch.setattr(
        multiprocessing, "current_process", lambda: types.SimpleNamespace(daemon=True)
    )
    assert not describe.can_fork()
    assert describe.describe_processes() == 0
