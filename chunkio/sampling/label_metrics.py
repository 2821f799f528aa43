"""Label mixing: how many classes each training batch sees, against a uniform shuffle.

Pure NumPy, no I/O, no torch. A model learns from batches, and a batch drawn from a few classes
gives gradients that chase those classes: the symptom of a class-sorted dataset read with
chunk-aware (locality-keeping) shuffling. Two figures per batch of ``b`` samples, each compared
with its *exact* expectation when the batch is ``b`` samples drawn uniformly without
replacement from the whole population (what ``DataLoader(shuffle=True)`` gives):

``distinct_labels``
    Number of different labels in the batch. Uniform expectation, with ``n_c`` samples of class
    ``c`` and ``N`` in all: ``sum_c 1 - C(N - n_c, b) / C(N, b)`` (computed with ``lgamma``).
    Ratio ``observed / uniform``.
``largest_label_share``
    Count of the batch's most frequent label over ``b``. Uniform expectation: ``E[max]/b``
    for the multivariate hypergeometric, exact: ``P(max <= m)`` is the ``x**b`` coefficient
    of ``prod_c Binom(n_c, p)`` truncated at ``m`` over that of the untruncated product
    (independent binomials conditioned on their sum are hypergeometric; ``p = b / N`` keeps
    every coefficient in floating-point range). Batches over ``EXACT_MAX_BATCH`` samples (or
    many distinct class sizes) use a seeded Monte Carlo estimate instead: the exact sum costs
    ``b**2`` per class size there, and the max of a large batch varies little. Ratio
    ``uniform / observed``.

Both ratios are oriented alike: **1.0 is as mixed as a uniform shuffle, lower is worse** (a
class-sorted order scores far below 1; batches more balanced than chance, e.g. stratified,
score slightly above 1). Means are over non-empty batches; with none, every figure is 0.0 and
every ratio 1.0.

:func:`label_mixing` takes sample ids and the label array; :func:`label_mixing_of_batches`
takes the labels of each batch directly (what a training loop sees); :func:`stored_label_order`
applies the same figures to the dataset's stored chunks, to spot a class-sorted conversion.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from ..util.numeric import IntArray, ceil_div

__all__ = [
    "label_mixing",
    "label_mixing_of_batches",
    "stored_label_order",
    "uniform_distinct_labels",
    "uniform_largest_label_share",
]

FloatArray: TypeAlias = npt.NDArray[np.float64]

#: ``P(max > m)`` below this ends the sum for ``E[max]``: the remaining terms are negligible.
_TAIL = 1e-13
#: The exact ``E[max]`` costs about (distinct class sizes) x b x b: beyond these bounds it is
#: estimated from at most ``MONTE_CARLO_DRAWS`` seeded draws instead (standard error ~0.1%).
EXACT_MAX_BATCH = 2048
EXACT_MAX_WORK = 2**21
MONTE_CARLO_DRAWS = 2000

_repr = reprlib.Repr()
_repr.maxother = 80
_repr.maxlist = 8


def _short(value: object) -> str:
    return _repr.repr(value)


def _int_vector(name: str, value: object) -> IntArray:
    """``value`` as a 1-D int64 array (empty allowed); ``TypeError``/``ValueError`` otherwise."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a 1-D array of ints; got {_short(value)}") from err
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D array of ints; got {arr.ndim}-D shape {arr.shape}: "
            f"{_short(value)}"
        )
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(
            f"{name} must be a 1-D array of ints; got dtype {arr.dtype}: {_short(value)}"
        )
    return arr.astype(np.int64, copy=False)


def _class_counts(class_counts: object) -> IntArray:
    """Non-zero class sizes, validated (labels themselves do not matter for the expectations)."""
    counts = _int_vector("class_counts", class_counts)
    if counts.size and counts.min() < 0:
        raise ValueError(f"class_counts must be >= 0; got {_short(class_counts)}")
    if counts.sum() <= 0:
        raise ValueError(f"class_counts must count at least one sample; got {_short(class_counts)}")
    return counts[counts > 0]


def _check_batch_size(counts: IntArray, batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise TypeError(f"batch_size must be an int; got {batch_size!r}")
    n = int(counts.sum())
    if not 1 <= int(batch_size) <= n:
        raise ValueError(f"batch_size must be in [1, {n}] (the population); got {batch_size!r}")
    return int(batch_size)


def uniform_distinct_labels(class_counts: npt.ArrayLike, batch_size: int) -> float:
    """Expected distinct labels in ``batch_size`` samples drawn uniformly without replacement.

    Parameters
    ----------
    class_counts
        Samples per class (1-D ints >= 0; e.g. ``np.bincount(labels)``).
    batch_size
        Samples drawn, ``1 <= batch_size <= sum(class_counts)``.

    Examples
    --------
    >>> round(uniform_distinct_labels([2, 2, 2], 2), 12)  # 3 * (1 - C(4, 2) / C(6, 2))
    1.8
    >>> uniform_distinct_labels([5, 5], 10)
    2.0
    """
    counts = _class_counts(class_counts)
    return _distinct(counts, _check_batch_size(counts, batch_size))


def uniform_largest_label_share(class_counts: npt.ArrayLike, batch_size: int) -> float:
    """Expected share of the most frequent label in a uniformly drawn batch (exact).

    Parameters
    ----------
    class_counts
        Samples per class (1-D ints >= 0).
    batch_size
        Samples drawn without replacement, ``1 <= batch_size <= sum(class_counts)``.

    Examples
    --------
    >>> round(uniform_largest_label_share([2, 2, 2], 2), 12)  # max 2 w.p. 0.2, else 1
    0.6
    >>> uniform_largest_label_share([3, 1], 4)
    0.75
    """
    counts = _class_counts(class_counts)
    b = _check_batch_size(counts, batch_size)
    return _largest(counts, b) / b


def _distinct(counts: IntArray, b: int) -> float:
    n = int(counts.sum())
    lg = math.lgamma
    total = 0.0
    sizes, mult = np.unique(counts, return_counts=True)
    for c, k in zip(sizes.tolist(), mult.tolist(), strict=True):
        # P(class untouched) = C(n - c, b) / C(n, b), zero once the other classes hold < b
        untouched = (
            math.exp(lg(n - c + 1) - lg(n - c - b + 1) - lg(n + 1) + lg(n - b + 1))
            if n - c >= b
            else 0.0
        )
        total += k * (1.0 - untouched)
    return total


def _binomial_pmf(c: int, p: float, top: int, log_fact: FloatArray) -> FloatArray:
    """``P(Binom(c, p) = k)`` for ``k = 0 .. min(c, top)``."""
    k = np.arange(min(c, top) + 1)
    log_c_minus_k = np.array([math.lgamma(c - j + 1) for j in k.tolist()])
    logp = math.lgamma(c + 1) - log_fact[k] - log_c_minus_k + k * math.log(p)
    logp += (c - k) * math.log1p(-p)
    pmf: FloatArray = np.exp(logp)
    return pmf


def _times(a: FloatArray, c: FloatArray, b: int) -> FloatArray:
    return np.convolve(a, c)[: b + 1]


def _power(a: FloatArray, k: int, b: int) -> FloatArray:
    """``a ** k`` as polynomials, truncated above degree ``b`` (square and multiply)."""
    out: FloatArray = np.ones(1)
    while k:
        if k & 1:
            out = _times(out, a, b)
        k >>= 1
        if k:
            a = _times(a, a, b)
    return out


def _coefficient(groups: list[tuple[FloatArray, int]], cap: int, b: int) -> float:
    """``x**b`` coefficient of ``prod pmf[: cap + 1] ** multiplicity``."""
    poly: FloatArray = np.ones(1)
    for pmf, mult in groups:
        poly = _times(poly, _power(pmf[: cap + 1], mult, b), b)
    return float(poly[b]) if poly.size > b else 0.0


def _largest(counts: IntArray, b: int) -> float:
    """``E[max_c X_c]`` for ``X`` multivariate hypergeometric (``b`` draws, classes ``counts``)."""
    n, top = int(counts.sum()), min(b, int(counts.max()))
    if b == n:
        return float(counts.max())
    if b > EXACT_MAX_BATCH or np.unique(counts).size * b > EXACT_MAX_WORK:
        return _largest_monte_carlo(counts, b)
    p = b / n
    log_fact = np.array([math.lgamma(j + 1) for j in range(b + 1)])
    sizes, mult = np.unique(counts, return_counts=True)
    groups = [
        (_binomial_pmf(c, p, b, log_fact), k)
        for c, k in zip(sizes.tolist(), mult.tolist(), strict=True)
    ]
    full = _coefficient(groups, top, b)
    lowest = ceil_div(b, counts.size)  # the largest class count is at least ceil(b / classes)
    expected = float(lowest)  # E[max] = sum_m P(max > m); the terms below `lowest` are 1
    for m in range(lowest, top):
        tail = max(0.0, 1.0 - _coefficient(groups, m, b) / full)
        expected += tail
        if tail < _TAIL:
            break
    return expected


def _largest_monte_carlo(counts: IntArray, b: int) -> float:
    """``E[max]`` from seeded draws (large batches: the max varies little from batch to batch)."""
    rng = np.random.default_rng(0)
    # each draw costs one binomial per class: fewer draws for many classes (at least 400)
    n_draws = min(MONTE_CARLO_DRAWS, max(400, 4_000_000 // counts.size))
    total = 0.0
    for start in range(0, n_draws, 250):  # blocks bound the memory for many classes
        size = min(250, n_draws - start)
        draws = rng.multivariate_hypergeometric(counts, b, size=size, method="marginals")
        total += float(draws.max(axis=1).sum())
    return total / n_draws


def _summary(
    sizes: list[int], distinct: list[int], largest: list[int], counts: IntArray
) -> dict[str, float]:
    """Means over batches and their uniform expectations (one computation per batch size)."""
    out = {"batches": float(len(sizes)), "classes": float(counts.size)}
    if not sizes:
        means = ["distinct_labels", "uniform_distinct_labels"]
        means += ["largest_label_share", "uniform_largest_label_share"]
        ratios = ["distinct_labels_ratio", "largest_label_share_ratio"]
        return out | dict.fromkeys(means, 0.0) | dict.fromkeys(ratios, 1.0)
    b = np.asarray(sizes, dtype=np.int64)
    uniq, inverse = np.unique(b, return_inverse=True)
    e_distinct = np.array([_distinct(counts, int(s)) for s in uniq])[inverse]
    e_share = np.array([_largest(counts, int(s)) / int(s) for s in uniq])[inverse]
    seen_distinct = float(np.mean(distinct))
    seen_share = float(np.mean(np.asarray(largest) / b))
    out |= {
        "distinct_labels": seen_distinct,
        "uniform_distinct_labels": float(e_distinct.mean()),
        "largest_label_share": seen_share,
        "uniform_largest_label_share": float(e_share.mean()),
    }
    out["distinct_labels_ratio"] = seen_distinct / out["uniform_distinct_labels"]
    out["largest_label_share_ratio"] = out["uniform_largest_label_share"] / seen_share
    return out


def label_mixing_of_batches(
    batch_labels: Iterable[npt.ArrayLike], class_counts: npt.ArrayLike
) -> dict[str, float]:
    """Label mixing of batches given by their labels (see the module docstring for the keys).

    Parameters
    ----------
    batch_labels
        One 1-D int array (or list, or CPU tensor) of labels per batch; empty ones are skipped.
    class_counts
        Samples per class in the population the batches are drawn from (e.g.
        ``np.bincount(train_labels)``): the uniform expectations depend only on these sizes.

    Returns
    -------
    dict
        ``distinct_labels``, ``uniform_distinct_labels``, ``distinct_labels_ratio``
        (observed / uniform), ``largest_label_share``, ``uniform_largest_label_share``,
        ``largest_label_share_ratio`` (uniform / observed), ``batches`` (non-empty batches
        counted) and ``classes`` (non-empty classes). Both ratios: 1.0 as good as a uniform
        shuffle, lower is worse.

    Raises
    ------
    TypeError
        A batch or ``class_counts`` that is not 1-D ints.
    ValueError
        Negative class counts, a batch larger than the population, or with more distinct
        labels than ``class_counts`` has classes.

    Examples
    --------
    >>> m = label_mixing_of_batches([[7, 7], [3, 3], [5, 5]], [2, 2, 2])  # class-sorted
    >>> m["distinct_labels"], round(m["uniform_distinct_labels"], 6)
    (1.0, 1.8)
    >>> round(m["distinct_labels_ratio"], 3), round(m["largest_label_share_ratio"], 3)
    (0.556, 0.6)
    """
    counts = _class_counts(class_counts)
    n = int(counts.sum())
    sizes: list[int] = []
    distinct: list[int] = []
    largest: list[int] = []
    for i, labels in enumerate(batch_labels):
        arr = _int_vector(f"batch_labels[{i}]", labels)
        if arr.size == 0:
            continue
        if arr.size > n:
            raise ValueError(
                f"batch_labels[{i}] has {arr.size} samples, more than the population of {n} "
                f"(sum of class_counts); got {_short(labels)}"
            )
        _, per_label = np.unique(arr, return_counts=True)
        if per_label.size > counts.size:
            raise ValueError(
                f"batch_labels[{i}] has {per_label.size} distinct labels but class_counts has "
                f"only {counts.size} non-empty classes; got {_short(labels)}"
            )
        sizes.append(int(arr.size))
        distinct.append(int(per_label.size))
        largest.append(int(per_label.max()))
    return _summary(sizes, distinct, largest, counts)


def _label_codes(labels: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    """Labels as dense codes ``0..K-1`` and the count of each code."""
    arr = _int_vector("labels", labels)
    if arr.size == 0:
        raise ValueError("labels must hold at least one sample; got an empty array")
    _, codes, counts = np.unique(arr, return_inverse=True, return_counts=True)
    return codes.reshape(-1).astype(np.int64), counts.astype(np.int64)


def label_mixing(batches: Iterable[npt.ArrayLike], labels: npt.ArrayLike) -> dict[str, float]:
    """Label mixing of batches of sample ids (keys as :func:`label_mixing_of_batches`).

    Parameters
    ----------
    batches
        One 1-D int array or list of sample ids per batch (e.g. a batch sampler's output);
        empty batches are skipped.
    labels
        1-D int array: the label of each sample id. Any int values (negative too) are labels.

    Raises
    ------
    TypeError
        ``labels`` or a batch that is not 1-D ints.
    ValueError
        A sample id outside ``[0, len(labels))``, or empty ``labels``.

    Examples
    --------
    >>> labels = np.array([0, 0, 1, 1, 2, 2])
    >>> sorted_order = label_mixing([[0, 1], [2, 3], [4, 5]], labels)
    >>> sorted_order["distinct_labels"], round(sorted_order["distinct_labels_ratio"], 3)
    (1.0, 0.556)
    >>> label_mixing([[0, 2], [4, 1], [3, 5]], labels)["largest_label_share"]
    0.5
    >>> label_mixing([], labels)["distinct_labels_ratio"]
    1.0
    """
    codes, counts = _label_codes(labels)
    n = codes.size

    def batch_labels() -> Iterable[IntArray]:
        for i, batch in enumerate(batches):
            ids = _int_vector(f"batches[{i}]", batch)
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                bad = int(ids[(ids < 0) | (ids >= n)][0])
                raise ValueError(
                    f"batches[{i}] holds sample id {bad}, outside [0, {n}) (len(labels)); "
                    f"got {_short(batch)}"
                )
            yield codes[ids]

    return label_mixing_of_batches(batch_labels(), counts)


def _as_chunk_sizes(chunk_sizes: int | Sequence[int] | npt.ArrayLike, n: int) -> IntArray:
    if isinstance(chunk_sizes, int | np.integer) and not isinstance(chunk_sizes, bool):
        step = int(chunk_sizes)
        if step < 1:
            raise ValueError(f"chunk_sizes as one int must be >= 1; got {chunk_sizes!r}")
        full, rest = divmod(n, step)
        return np.array([step] * full + ([rest] if rest else []), dtype=np.int64)
    sizes = _int_vector("chunk_sizes", chunk_sizes)
    if sizes.size == 0 or sizes.min() < 1 or int(sizes.sum()) != n:
        raise ValueError(
            f"chunk_sizes must be ints >= 1 summing to len(labels) = {n}; "
            f"got {_short(chunk_sizes)} (sum {int(sizes.sum())})"
        )
    return sizes


def stored_label_order(
    labels: npt.ArrayLike, chunk_sizes: int | Sequence[int] | npt.ArrayLike
) -> dict[str, float]:
    """How label-sorted the stored order is: label mixing of each chunk against a uniform shuffle.

    A loader that keeps chunk locality can only mix labels as well as the chunks it draws
    from do, so a ``distinct_labels_ratio`` far below 1 here (a class-sorted conversion)
    predicts poorly mixed batches unless the loader mixes many chunks per batch.

    Parameters
    ----------
    labels
        1-D int array: the labels in storage order.
    chunk_sizes
        Samples per chunk along the sample axis, in storage order (summing to
        ``len(labels)``; e.g. ``ChunkDataset.chunk_sizes()``), or one int: chunks of that
        many samples, the last one shorter.

    Returns
    -------
    dict
        The keys of :func:`label_mixing`, with chunks in the place of batches (``chunks``
        instead of ``batches``).

    Examples
    --------
    >>> labels = np.repeat(np.arange(4), 6)  # 24 samples, class-sorted
    >>> s = stored_label_order(labels, 6)
    >>> s["distinct_labels"], s["chunks"], round(s["distinct_labels_ratio"], 2)
    (1.0, 4.0, 0.29)
    >>> interleaved = np.tile(np.arange(4), 6)  # every chunk holds all 4: better than chance
    >>> round(stored_label_order(interleaved, [8, 8, 8])["distinct_labels_ratio"], 2)
    1.06
    """
    codes, counts = _label_codes(labels)
    sizes = _as_chunk_sizes(chunk_sizes, codes.size)
    runs = np.split(codes, np.cumsum(sizes)[:-1])
    out = label_mixing_of_batches(runs, counts)
    out["chunks"] = out.pop("batches")
    return out
