"""The stored order served a slice at a time (:class:`StoredOrder`): numpy's permutation up to
``WHOLE_ORDER_MAX`` samples, unchanged; above, the keyed bijection, which no process holds
whole."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from chunkio import ChunkDataset, Execution, Output
from chunkio.convert import write_arrays
from chunkio.convert.shuffle import order
from chunkio.convert.shuffle.keyed import KeyedPermutation
from chunkio.convert.shuffle.order import (
    WHOLE_ORDER_MAX,
    ShuffledSource,
    StoredOrder,
    permutation,
)

SIZES = [0, 1, 2, 3, 4, 5, 15, 16, 17, 1000, 4097, 65536, 100_003]


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 65_537])
def test_small_orders_stay_numpys(n: int) -> None:
    got = StoredOrder(n, 5)
    assert got.method == "numpy"
    expected = np.random.default_rng(5).permutation(n)
    np.testing.assert_array_equal(got.rows(0, n), expected)
    np.testing.assert_array_equal(permutation(n, 5), expected)
    inverse = np.empty(n, np.int64)
    inverse[expected] = np.arange(n)
    np.testing.assert_array_equal(got.positions(0, n), inverse)
    np.testing.assert_array_equal(got.rows(n // 3, n // 2), expected[n // 3 : n // 2])


def test_the_method_follows_the_size() -> None:
    assert StoredOrder(WHOLE_ORDER_MAX, 0).method == "numpy"
    assert StoredOrder(WHOLE_ORDER_MAX + 1, 0).method == "keyed"
    assert StoredOrder(10**9, None).method == "source"
    assert order.order_extra(None, shuffle=True, seed=1, num_samples=WHOLE_ORDER_MAX + 1)[
        "order"
    ] == {"shuffled": True, "seed": 1, "method": "keyed"}
    assert order.order_extra(None, shuffle=True, seed=1, num_samples=10)["order"] == {
        "shuffled": True,
        "seed": 1,
    }
    with pytest.raises(ValueError, match="order method"):
        StoredOrder(10, None, method="keyed")


@pytest.mark.parametrize("n", SIZES)
def test_keyed_order_is_a_permutation_with_its_inverse(n: int) -> None:
    got = StoredOrder(n, 11, method="keyed")
    perm = got.rows(0, n)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    inverse = np.empty(n, np.int64)
    inverse[perm] = np.arange(n)
    np.testing.assert_array_equal(got.positions(0, n), inverse)
    for a, b in [(0, n // 2), (n // 3, n), (n // 2, n // 2 + 1)]:  # slices agree with the whole
        np.testing.assert_array_equal(got.rows(a, b), perm[a:b])
        np.testing.assert_array_equal(got.positions(a, b), inverse[a:b])


def test_keyed_order_depends_on_the_seed_and_pickles_as_its_arguments() -> None:
    a, b = KeyedPermutation(10_000, 1), KeyedPermutation(10_000, 2)
    at = np.arange(10_000)
    assert not np.array_equal(a.take(at), b.take(at))
    clone = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(clone.take(at), a.take(at))
    stored = StoredOrder(50, 1)
    stored.positions(0, 50)
    copied = pickle.loads(pickle.dumps(stored))
    assert copied._perm is None and copied._inv is None  # recomputed, not shipped
    with pytest.raises(IndexError, match=r"\[0, 10000\)"):
        a.take([10_000])


def test_keyed_order_mixes_sorted_classes_into_every_chunk() -> None:
    n, classes, chunk = 100_000, 10, 1000
    labels = np.arange(n) * classes // n  # sorted by class, as class folders are
    stored = labels[StoredOrder(n, 0, method="keyed").rows(0, n)]
    per_chunk = [len(np.unique(stored[i : i + chunk])) for i in range(0, n, chunk)]
    assert min(per_chunk) == classes
    counts = np.bincount(stored[:chunk], minlength=classes)
    assert counts.max() < 2 * chunk // classes  # no class takes over a chunk


def test_a_keyed_conversion_stores_rows_where_source_index_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(order, "WHOLE_ORDER_MAX", 100)
    x = np.arange(3000, dtype=np.int64).reshape(1000, 3)
    labels = np.arange(1000, dtype=np.int32)
    result = write_arrays(
        tmp_path / "out.zarr",
        {"x": x, "label": labels},
        seed=4,
        output=Output(chunks=64),
        execution=Execution(workers=1, progress=False),
    )
    assert result.num_samples == 1000
    data = ChunkDataset(tmp_path / "out.zarr")
    rows = data.read_batch(np.arange(1000))
    extra = data.layout.extra
    data.close()
    index = np.asarray(rows["source_index"])
    np.testing.assert_array_equal(index, StoredOrder(1000, 4, method="keyed").rows(0, 1000))
    np.testing.assert_array_equal(np.asarray(rows["x"]), x[index])
    np.testing.assert_array_equal(np.asarray(rows["label"]), labels[index])
    assert extra["order"] == {"shuffled": True, "seed": 4, "method": "keyed"}
    keyed = ShuffledSource(_Rows(x), 4).fingerprint()
    monkeypatch.setattr(order, "WHOLE_ORDER_MAX", 10_000)
    assert ShuffledSource(_Rows(x), 4).fingerprint() != keyed  # no resume across methods


class _Rows:
    """The least a ShuffledSource wraps."""

    def __init__(self, x: np.ndarray) -> None:
        from chunkio.format.layout import FieldInfo

        self.x, self.num_samples = x, len(x)
        self.fields = (FieldInfo("x", x.dtype, x.shape[1:]),)

    def fingerprint(self) -> str:
        return "rows"

    def read_block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {"x": self.x[start:stop]}

    def read_rows(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {"x": self.x[indices]}
