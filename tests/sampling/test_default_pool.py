"""A sampler built without a mixing pool (``pool=None``, as ``make_loader`` builds one for a
dataset of ragged fields only) gives the same global batches on every world size.

:class:`~chunkio.ChunkBatchSampler` promises that the order depends on the *global* batch
(``batch_size * world_size``) and not on how it is split among ranks; its default pool is
four global batches, so it must not change when the same global batch is split among more
ranks (a pool sized from the per-rank batch would).
"""

from __future__ import annotations

import numpy as np
import pytest

from chunkio import ChunkBatchSampler
from chunkio.sampling.sampler import DEFAULT_POOL_BATCHES

#: 64 chunks of 10 samples; each global batch of 16 is whole (no rank pads its rows)
SIZES = [10] * 64
GLOBAL_BATCH = 16


def global_batches(world_size: int, epoch: int, **options: object) -> list[list[int]]:
    """The global batches of ``epoch``: every rank's batches, rank by rank, joined."""
    per_rank = []
    for rank in range(world_size):
        sampler = ChunkBatchSampler(
            SIZES, GLOBAL_BATCH // world_size, rank=rank, world_size=world_size, **options
        )
        sampler.set_epoch(epoch)
        per_rank.append(list(sampler))
    assert len({len(batches) for batches in per_rank}) == 1
    return [[i for part in parts for i in part] for parts in zip(*per_rank, strict=True)]


@pytest.mark.parametrize("epoch", [0, 3])
def test_the_default_pool_gives_every_world_size_the_same_global_batches(epoch: int) -> None:
    one = global_batches(1, epoch)
    assert sorted(i for b in one for i in b) == list(range(sum(SIZES)))
    for world_size in (2, 4):
        assert global_batches(world_size, epoch) == one, f"world_size={world_size}"


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_the_default_pool_is_four_global_batches(world_size: int) -> None:
    """Equal to asking for that pool explicitly, on every rank."""
    explicit = DEFAULT_POOL_BATCHES * GLOBAL_BATCH
    assert global_batches(world_size, 1) == global_batches(world_size, 1, pool=explicit)
    sampler = ChunkBatchSampler(SIZES, GLOBAL_BATCH // world_size, rank=0, world_size=world_size)
    assert sampler.pool == explicit


def test_the_pool_changes_the_order() -> None:
    """The checks above could not pass by accident: a pool a quarter the size (what four ranks
    would get from a pool sized by their own batch) gives another order."""
    default = global_batches(1, 0)
    smaller = global_batches(1, 0, pool=DEFAULT_POOL_BATCHES * GLOBAL_BATCH // 4)
    assert sorted(np.concatenate(smaller).tolist()) == sorted(np.concatenate(default).tolist())
    assert smaller != default
