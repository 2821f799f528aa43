"""A pass abandoned while workers still write its batches (issue 40: the ring's planted bug).

Batches of an abandoned pass keep their slots until every part has landed: freeing a slot
early lets the next pass read into it while a slow worker still writes the old batch there.
With the same rows split the same way the old write lands first and hides the bug (each
worker serves its pipe in order), so here the two passes split their rows between different
workers: the old pass's slow worker, the new pass's fast one. A late read also takes the
sample ids the new pass wrote into the slot, so rows are marked with the epoch that wrote
them, as an augmentation keyed by epoch would differ.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch

from chunkio import ChunkDataset
from chunkio.transport import RingOptions, RingTransport

DELAY = 0.3  # each read of epoch 0 (the pass abandoned) takes this long
MARK = 1000  # added to the labels of each epoch, as an augmentation keyed by epoch would


class SlowFirstEpoch(ChunkDataset):
    """Reads of epoch 0 wait ``DELAY`` seconds before they write their rows; every read marks
    its labels with its epoch (``label + MARK * epoch``), so a row shows which pass wrote it."""

    def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
        if epoch == 0:
            time.sleep(DELAY)
        got = super().read_batch(indices, out, epoch=epoch)
        got["label"][...] += MARK * epoch
        return got


def _to_worker(w: int) -> Any:
    """Parts that give every row of a batch to worker ``w`` of two."""
    return lambda n, workers: [(0, n) if v == w else (n, n) for v in range(workers)]


@pytest.mark.timeout(60)
def test_a_new_pass_never_gets_a_slot_a_worker_still_writes(make_dataset):
    path, arrays = make_dataset("zarr", samples_per_chunk=10)
    ds = SlowFirstEpoch(path, fields=["image", "label"], preload_bytes=0, cache_bytes=1 << 20)
    ring = RingTransport(
        ds, batch_size=8, options=RingOptions(num_workers=2, context="fork", persistent=True)
    )
    # the session keeps each batch size's parts: one size per split
    try:
        for lease in ring.run([np.arange(6)] * 2, epoch=1):  # both workers started, warm
            lease.release()
        old = [np.arange(i * 8, (i + 1) * 8) for i in range(8)]
        first = ring.run(old, _to_worker(1), epoch=0)  # worker 1, slowly
        lease = next(first)
        lease.release()
        first.close()  # abandoned: every other slot is still being written by worker 1
        landed = time.monotonic() + len(old) * DELAY  # all of it has landed by then
        new = [np.arange(199 - i * 7, 199 - (i + 1) * 7, -1) for i in range(4)]
        second = ring.run(new, _to_worker(0), epoch=1)  # worker 0, at once
        leases = [next(second) for _ in new]  # held: their slots are not reused meanwhile
        time.sleep(max(0.0, landed - time.monotonic()))
        for lease, idx in zip(leases, new, strict=True):
            x, y = lease.batch
            want = arrays["label"][idx] + MARK  # epoch 1's rows, none of epoch 0's
            assert y.tolist() == want.tolist(), f"rows {idx.tolist()} of epoch 1"
            assert torch.equal(x, torch.from_numpy(arrays["image"][idx]))
        for lease in leases:
            lease.release()
        second.close()
    finally:
        ring.close()
