"""Long-run leaks over epochs (RELIABILITY row 27).

Per epoch, with persistent workers on and off: open file descriptors of the loader process
and of its workers, worker memory (RSS), threads, shared memory mapped by any of them
(``/dev/shm`` segments and semaphores) and the ``/dev/shm/chunkio_<pid>_*`` segments this
process owns. Each must stay flat: the second epoch (after warm-up) is compared with the
last, with a small tolerance, so a leak of one object per epoch fails. After ``close()``
nothing is left. The CI variant runs 5 epochs; the soak variant 20 (``make soak``).
"""

from __future__ import annotations

import gc
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import pytest
from conftest import sample_arrays

from chunkio import Output, make_loader

BATCH, SPC = 16, 16


@dataclass(frozen=True)
class Sample:
    """Resource use, measured in the middle of an epoch."""

    parent_fds: int
    parent_threads: int
    worker_fds: int
    worker_rss: int
    shm_mapped: int
    own_segments: int


def shm_in_use(pid: int) -> set[str]:
    """``/dev/shm`` paths a process maps or holds open (deleted ones included)."""
    paths = set()
    try:
        with open(f"/proc/{pid}/maps") as fh:
            for line in fh:
                if "/dev/shm/" in line:
                    paths.add(line.split(None, 5)[-1].strip())
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                paths.add(target)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return paths


def own_segments() -> int:
    return len(glob.glob(f"/dev/shm/chunkio_{os.getpid()}_*"))


def workers_of(loader: object, before: set[int]) -> list[psutil.Process]:
    pids = set(getattr(loader, "worker_pids", lambda: ())())
    if not pids:  # the DataLoader route: torch's workers are our children
        pids = {p.pid for p in psutil.Process().children()} - before
    return [psutil.Process(pid) for pid in sorted(pids)]


def measure(loader: object, before: set[int]) -> Sample:
    me = psutil.Process()
    workers = workers_of(loader, before)
    shm = shm_in_use(me.pid)
    for w in workers:
        shm |= shm_in_use(w.pid)
    return Sample(
        parent_fds=me.num_fds(),
        parent_threads=me.num_threads(),
        worker_fds=sum(w.num_fds() for w in workers),
        worker_rss=max((w.memory_info().rss for w in workers), default=0),
        shm_mapped=len(shm),
        own_segments=own_segments(),
    )


def run_epochs(path: str, *, epochs: int, persistent: bool, transport: str) -> list[Sample]:
    before = {p.pid for p in psutil.Process().children()}
    loader = make_loader(
        path,
        BATCH,
        num_workers=2,
        fields=["image", "label"],
        # type: ignore[arg-type], workers=Workers(persistent=persistent, transport=transport)
    )
    samples = []
    try:
        for _ in range(epochs):
            seen = 0
            for i, batch in enumerate(loader):
                seen += len(batch[1])
                if i == len(loader) // 2:
                    gc.collect()
                    samples.append(measure(loader, before))
            assert seen == len(loader.dataset)
    finally:
        loader.close()
    gc.collect()
    assert own_segments() == 0, "shared memory segments outlived close()"
    return samples


def assert_flat(samples: list[Sample], *, workers: int = 2) -> None:
    first, last = samples[1], samples[-1]  # epoch 1 warms caches and allocators up
    table = "\n".join(f"  epoch {i}: {s}" for i, s in enumerate(samples))
    assert last.parent_fds <= first.parent_fds + 2, f"parent file descriptors grow:\n{table}"
    assert last.parent_threads <= first.parent_threads + 1, f"parent threads grow:\n{table}"
    assert last.worker_fds <= first.worker_fds + 2 * workers, f"worker fds grow:\n{table}"
    assert last.worker_rss <= first.worker_rss * 1.15 + (16 << 20), f"worker RSS grows:\n{table}"
    assert last.shm_mapped <= first.shm_mapped + 1, f"shared memory mappings grow:\n{table}"
    assert last.own_segments <= first.own_segments, f"/dev/shm segments grow:\n{table}"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from chunkio import write_arrays

    root = tmp_path_factory.mktemp("leaks")
    out = {}
    for fmt, suffix in (("zarr", ".zarr"), ("hdf5", ".h5")):
        out[fmt] = str(root / f"d{suffix}")
        write_arrays(out[fmt], sample_arrays(256), output=Output(chunks=SPC))
    return out


CI_CASES = [("zarr", True, "ring"), ("hdf5", False, "ring"), ("hdf5", True, "dataloader")]
SOAK_CASES = [
    (fmt, persistent, transport)
    for fmt in ("zarr", "hdf5")
    for persistent in (True, False)
    for transport in ("ring", "dataloader")
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("fmt", "persistent", "transport"), CI_CASES)
def test_resources_stay_flat_over_5_epochs(
    datasets: dict[str, str], fmt: str, persistent: bool, transport: str
) -> None:
    assert_flat(run_epochs(datasets[fmt], epochs=5, persistent=persistent, transport=transport))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("fmt", "persistent", "transport"), SOAK_CASES)
def test_resources_stay_flat_over_20_epochs(
    datasets: dict[str, str], fmt: str, persistent: bool, transport: str
) -> None:
    assert_flat(run_epochs(datasets[fmt], epochs=20, persistent=persistent, transport=transport))


def test_assert_flat_catches_a_leak_of_one_per_epoch() -> None:
    """The detector itself: one descriptor or one segment more per epoch is caught."""
    base = Sample(10, 4, 20, 100 << 20, 3, 1)
    leak_fd: Callable[[int], Sample] = lambda i: Sample(10 + i, 4, 20, 100 << 20, 3, 1)  # noqa: E731
    leak_shm: Callable[[int], Sample] = lambda i: Sample(10, 4, 20, 100 << 20, 3 + i, 1 + i)  # noqa: E731
    assert_flat([base] * 5)
    for leak in (leak_fd, leak_shm):
        with pytest.raises(AssertionError, match="grow"):
            assert_flat([leak(i) for i in range(5)])
    rss = [Sample(10, 4, 20, int((100 << 20) * 1.1**i), 3, 1) for i in range(5)]
    with pytest.raises(AssertionError, match="RSS"):
        assert_flat(rss)
