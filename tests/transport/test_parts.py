"""How a batch's rows are shared among ring workers (:mod:`chunkio.transport.parts`).

One part per worker keeps every worker on its own part of every batch (a chunk sampler's
lanes); fewer parts deal batches to the workers in turn (a patch sampler's whole batches).
Whatever the split, the ring delivers the rows the sampler asked for, and a worker told ahead
of a batch (``lookahead``) is the worker that then reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from chunkio import ChunkDataset
from chunkio.errors import LoaderError
from chunkio.transport import RingOptions, RingTransport
from chunkio.transport.messages import Hint, ReadRows
from chunkio.transport.parts import assign, check_parts, even_parts
from chunkio.transport.workers import RingWorkers


@pytest.mark.parametrize(("workers", "k"), [(w, k) for w in range(1, 5) for k in range(1, w + 1)])
def test_parts_of_a_batch_go_to_distinct_workers_and_share_the_work_evenly(workers, k):
    n = 10
    ranges = check_parts(even_parts(n, k), n, workers)
    load = [0] * workers
    for seq in range(workers * 3):
        got = assign(ranges, seq, workers)
        assert sorted(got.values()) == [r for r in ranges if r[1] > r[0]]  # each part once
        for w in got:
            load[w] += 1
        if k == workers:  # one part per worker: a worker's part is the same in every batch
            assert got == dict(enumerate(ranges))
    assert len(set(load)) == 1, load  # 3 rounds of every worker: the same number of parts each


@pytest.mark.parametrize(
    ("ranges", "n", "workers"),
    [
        ([], 4, 2),  # no part
        ([(0, 2), (2, 3), (3, 4)], 4, 2),  # more parts than workers
        ([(0, 2), (3, 4)], 4, 2),  # a gap
        ([(0, 3), (2, 4)], 4, 2),  # an overlap
        ([(0, 3)], 4, 1),  # short
    ],
)
def test_parts_that_do_not_tile_the_rows_among_the_workers_are_refused(ranges, n, workers):
    with pytest.raises(LoaderError, match=rf"do not split rows \[0, {n}\) among {workers}"):
        check_parts(ranges, n, workers)


class Remote(ChunkDataset):
    """Hinted ahead as a remote dataset is (``lookahead``); reads as any other."""

    @property
    def remote(self) -> bool:
        return True


@pytest.mark.timeout(60)
def test_whole_batches_in_turn_with_hints_to_the_worker_that_reads(make_dataset, monkeypatch):
    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    sent: list[tuple[int, Any]] = []
    send = RingWorkers.send

    def recording(self: Any, w: int, message: Any) -> None:
        sent.append((w, message))
        send(self, w, message)

    monkeypatch.setattr(RingWorkers, "send", recording)
    ds = Remote(path, fields=["image", "label"], preload_bytes=0, cache_bytes=1 << 20)
    options = RingOptions(num_workers=2, prefetch=1, context="fork", lookahead=3)
    ring = RingTransport(ds, batch_size=8, options=options)
    batches = [np.arange(199 - 7 * i, 199 - 7 * (i + 1), -1) for i in range(9)]
    try:
        for lease, idx in zip(ring.run(batches, lambda n, w: [(0, n)]), batches, strict=True):
            x, y = lease.batch
            assert torch.equal(x, torch.from_numpy(arrays["image"][idx]))
            assert torch.equal(y, torch.from_numpy(arrays["label"][idx]))
            lease.release()
    finally:
        ring.close()
    reads = [(w, m) for w, m in sent if isinstance(m, ReadRows)]
    assert [(w, m.seq, m.start, m.stop) for w, m in reads] == [(s % 2, s, 0, 7) for s in range(9)]
    reader = {tuple(batches[m.seq].tolist()): w for w, m in reads}
    hints = [(w, tuple(m.indices.tolist())) for w, m in sent if isinstance(m, Hint)]
    assert len(hints) >= 3  # batches beyond the slots were announced
    assert all(reader[ids] == w for w, ids in hints), hints
