"""chunkio.sampling.label_metrics: exact uniform expectations, and what sorted and shuffled orders
score."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkio.sampling import label_metrics as mixing
from chunkio.sampling.label_metrics import (
    label_mixing,
    label_mixing_of_batches,
    stored_label_order,
    uniform_distinct_labels,
    uniform_largest_label_share,
)

KEYS = {
    "batches",
    "classes",
    "distinct_labels",
    "uniform_distinct_labels",
    "distinct_labels_ratio",
    "largest_label_share",
    "uniform_largest_label_share",
    "largest_label_share_ratio",
}


def _enumerate(labels: np.ndarray, b: int) -> tuple[float, float]:
    """Mean distinct labels and largest share over every b-subset (the definition)."""
    distinct, share = [], []
    for subset in itertools.combinations(range(labels.size), b):
        counts = np.unique(labels[list(subset)], return_counts=True)[1]
        distinct.append(counts.size)
        share.append(counts.max() / b)
    return float(np.mean(distinct)), float(np.mean(share))


@pytest.mark.parametrize("counts", [[1], [3, 3], [4, 1, 2], [5, 1, 1, 2, 3], [2, 2, 2, 2, 2, 2]])
def test_expectations_equal_enumeration(counts: list[int]) -> None:
    labels = np.repeat(np.arange(len(counts)), counts)
    for b in range(1, labels.size + 1):
        distinct, share = _enumerate(labels, b)
        assert uniform_distinct_labels(counts, b) == pytest.approx(distinct, rel=1e-9)
        assert uniform_largest_label_share(counts, b) == pytest.approx(share, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(0, 4), min_size=1, max_size=5).filter(lambda c: 0 < sum(c) <= 11),
    data=st.data(),
)
def test_expectations_equal_enumeration_property(counts: list[int], data: Any) -> None:
    labels = np.repeat(np.arange(len(counts)), counts)
    b = data.draw(st.integers(1, labels.size))
    distinct, share = _enumerate(labels, b)
    assert uniform_distinct_labels(counts, b) == pytest.approx(distinct, rel=1e-9)
    assert uniform_largest_label_share(counts, b) == pytest.approx(share, rel=1e-9)


@pytest.mark.parametrize("b", [16, 64])
def test_expectations_match_monte_carlo_on_unequal_classes(b: int) -> None:
    counts = np.array([400, 250, 120, 100, 80, 30, 15, 5])
    labels = np.repeat(np.arange(counts.size), counts)
    rng = np.random.default_rng(1)
    draws = np.stack([rng.choice(labels, b, replace=False) for _ in range(20_000)])
    per_class = np.stack([(draws == c).sum(axis=1) for c in range(counts.size)], axis=1)
    distinct, share = (per_class > 0).sum(axis=1), per_class.max(axis=1) / b
    # within 5 standard errors of the simulated means
    assert abs(uniform_distinct_labels(counts, b) - distinct.mean()) < 5 * distinct.std() / 141
    assert abs(uniform_largest_label_share(counts, b) - share.mean()) < 5 * share.std() / 141


def test_large_population_stays_finite_and_ordered() -> None:
    counts = np.random.default_rng(0).integers(700, 1300, size=1000)  # ImageNet-like
    share_64, share_256 = (uniform_largest_label_share(counts, b) for b in (64, 256))
    assert 0 < share_256 < share_64 < 1
    assert uniform_distinct_labels(counts, 256) == pytest.approx(225.2, abs=0.1)


def test_large_batches_use_a_close_seeded_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = np.array([900, 700, 500, 300, 100])
    exact = uniform_largest_label_share(counts, 512)
    monkeypatch.setattr(mixing, "EXACT_MAX_BATCH", 256)
    estimate = uniform_largest_label_share(counts, 512)
    assert estimate != exact and estimate == pytest.approx(exact, rel=0.005)
    assert uniform_largest_label_share(counts, 512) == estimate  # seeded: repeatable
    # the sizes the exact sum would take minutes for
    assert 0.1 < uniform_largest_label_share([20_000] * 10, 16_384) < 0.11


def _class_sorted_batches(labels_sorted: np.ndarray, b: int) -> list[np.ndarray]:
    return [np.arange(i, min(i + b, labels_sorted.size)) for i in range(0, labels_sorted.size, b)]


def test_class_sorted_order_scores_far_below_one() -> None:
    labels = np.repeat(np.arange(10), 100)
    m = label_mixing(_class_sorted_batches(labels, 64), labels)
    assert set(m) == KEYS and m["batches"] == 16 and m["classes"] == 10
    assert m["distinct_labels"] < 2.0 < 9.0 < m["uniform_distinct_labels"]
    assert m["distinct_labels_ratio"] < 0.25
    assert m["largest_label_share_ratio"] < 0.3


def test_uniform_permutation_scores_about_one() -> None:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(12), [400, 300, 300, 200, 200, 150, 150, 100, 80, 60, 40, 20])
    ratios = []
    for _ in range(20):
        order = rng.permutation(labels.size)
        m = label_mixing(np.array_split(order, labels.size // 64), labels)
        ratios.append((m["distinct_labels_ratio"], m["largest_label_share_ratio"]))
    distinct, largest = np.mean(ratios, axis=0)
    assert abs(distinct - 1) < 0.05 and abs(largest - 1) < 0.05


def test_stratified_batches_score_above_one() -> None:
    labels = np.tile(np.arange(8), 50)  # every batch of 8 holds each class once
    m = label_mixing(np.split(np.arange(400), 50), labels)
    assert m["largest_label_share"] == 1 / 8
    assert m["distinct_labels_ratio"] > 1 and m["largest_label_share_ratio"] > 1


def test_ids_and_labels_agree() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(-3, 5, size=300)  # any ints are labels, negative ones too
    batches = [rng.choice(300, size, replace=False) for size in (32, 32, 7, 0, 1)]
    by_ids = label_mixing(batches, labels)
    by_labels = label_mixing_of_batches(
        [labels[b] for b in batches], np.unique(labels, return_counts=True)[1]
    )
    assert by_ids == pytest.approx(by_labels) and by_ids["batches"] == 4


def test_torch_tensors_and_lists_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    m = label_mixing_of_batches([torch.tensor([0, 1, 1]), [2, 2]], torch.tensor([5, 5, 5]))
    assert m["distinct_labels"] == 1.5


def test_no_batches_gives_neutral_ratios() -> None:
    for batches in ([], [[], np.array([], dtype=np.int64)]):
        m = label_mixing(batches, np.array([0, 1, 1]))
        assert m["batches"] == 0 and m["distinct_labels"] == 0.0
        assert m["distinct_labels_ratio"] == m["largest_label_share_ratio"] == 1.0


def test_whole_population_batch_is_deterministic() -> None:
    m = label_mixing_of_batches([[0, 0, 0, 1]], [3, 1])
    assert m["uniform_distinct_labels"] == 2 and m["uniform_largest_label_share"] == 0.75
    assert m["distinct_labels_ratio"] == pytest.approx(1.0)
    assert m["largest_label_share_ratio"] == pytest.approx(1.0)


def test_stored_label_order_sorted_vs_shuffled() -> None:
    labels = np.repeat(np.arange(20), 300)
    sorted_order = stored_label_order(labels, 256)
    shuffled = stored_label_order(np.random.default_rng(0).permutation(labels), 256)
    assert sorted_order["chunks"] == shuffled["chunks"] == 24
    assert "batches" not in sorted_order
    assert sorted_order["distinct_labels"] < 2.5 and sorted_order["distinct_labels_ratio"] < 0.15
    assert shuffled["distinct_labels_ratio"] == pytest.approx(1.0, abs=0.05)
    sizes = [256] * 23 + [6000 - 23 * 256]
    assert stored_label_order(labels, sizes) == sorted_order


LABELS = np.array([0, 1, 1, 2])
BAD_INPUTS: list[tuple[type[Exception], str, Any]] = [
    (
        TypeError,
        "labels must be a 1-D array of ints; got dtype float64",
        lambda: label_mixing([[0]], LABELS * 1.0),
    ),
    (
        ValueError,
        "labels must be a 1-D array of ints; got 2-D",
        lambda: label_mixing([[0]], LABELS.reshape(2, 2)),
    ),
    (ValueError, "got an empty array", lambda: label_mixing([[0]], [])),
    (ValueError, "sample id 4, outside [0, 4)", lambda: label_mixing([[0], [1, 4]], LABELS)),
    (ValueError, "sample id -1", lambda: label_mixing([[-1, 0]], LABELS)),
    (
        TypeError,
        "batches[0] must be a 1-D array of ints; got dtype float64",
        lambda: label_mixing([[0.0]], LABELS),
    ),
    (TypeError, "batches[0] must be", lambda: label_mixing([["a"]], LABELS)),
    (TypeError, "batches[1] must be", lambda: label_mixing([[0], [True]], LABELS)),
    (ValueError, "class_counts must be >= 0; got", lambda: label_mixing_of_batches([[0]], [2, -1])),
    (ValueError, "at least one sample", lambda: label_mixing_of_batches([[0]], [0, 0])),
    (
        ValueError,
        "more than the population of 2",
        lambda: label_mixing_of_batches([[0, 0, 1]], [1, 1]),
    ),
    (
        ValueError,
        "3 distinct labels but class_counts has only 2",
        lambda: label_mixing_of_batches([[0, 1, 2]], [2, 2]),
    ),
    (ValueError, "batch_size must be in [1, 3]", lambda: uniform_distinct_labels([1, 2], 4)),
    (
        TypeError,
        "batch_size must be an int; got True",
        lambda: uniform_largest_label_share([1, 2], True),
    ),
    (
        ValueError,
        "summing to len(labels) = 4; got [2, 1]",
        lambda: stored_label_order(LABELS, [2, 1]),
    ),
    (ValueError, "must be >= 1; got 0", lambda: stored_label_order(LABELS, 0)),
]


@pytest.mark.parametrize(("error", "message", "call"), BAD_INPUTS)
def test_bad_inputs_say_what_came(error: type[Exception], message: str, call: Any) -> None:
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
