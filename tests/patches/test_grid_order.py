"""The grid sampler makes its (masked) grid once per binding and reorders it each epoch: the
orders are those made from scratch, in every process the sampler is pickled into."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from chunkio.format.volume_layout import VolumeSet
from chunkio.patches import GridSampler
from chunkio.patches.masks import PatchMask, mask_by_shape
from chunkio.patches.samplers import locality_order

SHAPES = ((16, 16, 16), (16, 12, 16))


def _bound(patch: tuple[int, ...] = (4, 4, 4), **kw: object) -> GridSampler:
    volumes = VolumeSet(shapes=SHAPES, chunks=(8, 8, 8), stacked=False)
    values = np.random.default_rng(0).random((4, 4, 4)) < 0.4  # a coarse mask, 1/4 scale
    mask = PatchMask(mask_by_shape(values, SHAPES, "memory", "array"))
    return GridSampler(shuffle=True, seed=5, **kw).bind(volumes, patch, mask=mask)  # type: ignore[arg-type]


def _from_scratch(s: GridSampler, epoch: int) -> np.ndarray:
    keys = np.concatenate([s.volume_keys(v) for v in range(s.volumes.count)])
    assert s.mask is not None
    keys = keys[s.mask.eligible(keys, s.patch_size, s.volumes.shapes)]
    rng = np.random.default_rng([s.seed, epoch])
    return keys[locality_order(keys, s.patch_size, s.volumes, rng)]


@pytest.mark.parametrize("patch", [(4, 4, 4), (8, 6, 8)])
def test_each_epoch_is_the_order_made_from_scratch(patch: tuple[int, ...]) -> None:
    s = _bound(patch)
    orders = [s.global_keys(e) for e in range(3)]
    assert 0 < len(orders[0]) < 2 * 16**3 // np.prod(patch)  # the mask dropped some
    for e, order in enumerate(orders):
        np.testing.assert_array_equal(order, _from_scratch(s, e))
    assert not np.array_equal(orders[0], orders[1])
    copy = pickle.loads(pickle.dumps(s))  # what a loader's worker holds
    assert copy._grid is None
    np.testing.assert_array_equal(copy.global_keys(2), orders[2])


def test_the_mask_is_tested_once_per_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    eligible = PatchMask.eligible

    def counted(self: PatchMask, *args: object) -> object:
        calls.append(args)
        return eligible(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(PatchMask, "eligible", counted)
    s = _bound()
    for e in range(4):
        s.global_keys(e)
    assert len(calls) == 1
    unshuffled = GridSampler().bind(s.volumes, (4, 4, 4), mask=s.mask)
    first = unshuffled.global_keys(0)
    first[:] = -1  # a caller's copy: the grid it was cut from stays as it was
    assert (unshuffled.global_keys(1) >= 0).all()
    s.bind(s.volumes, (8, 8, 8), mask=s.mask)  # a new binding: a new grid
    np.testing.assert_array_equal(s.global_keys(0), _from_scratch(s, 0))
    assert len(calls) == 4  # the unshuffled grid's, the rebinding's, the reference's


def test_a_changed_edge_or_stride_makes_the_grid_again() -> None:
    s = _bound((6, 6, 6))
    shifted = s.global_keys(0)
    s.edge = "pad"
    np.testing.assert_array_equal(s.global_keys(0), _from_scratch(s, 0))
    assert not np.array_equal(np.sort(s.global_keys(0), axis=0), np.sort(shifted, axis=0))
    s._stride_arg = (3, 3, 3)
    np.testing.assert_array_equal(s.global_keys(0), _from_scratch(s, 0))
