"""How the rows of a batch are shared among ring workers: ``parts`` and the workers they go to.

``parts(n, workers)`` (a sampler's ``reader_rows``) cuts rows ``[0, n)`` into 1 to ``workers``
contiguous ranges; part ``i`` of the ``s``-th batch a session dispatches goes to worker
``(s * len(parts) + i) % workers`` (:func:`assign`). Two shapes are meant:

* one part per worker: every batch is read by all workers together, worker ``w`` filling
  part ``w`` of each. A chunk sampler's lane-aligned parts
  (:meth:`chunkio.ChunkBatchSampler.reader_rows`) give each worker its own lanes of every
  batch, so it reads only those lanes' chunks and decodes each chunk once;
* one part: each batch is read whole by one worker, the workers taking batches in turn. The
  patches of a batch can share chunks (a patch sampler groups them by chunk,
  :meth:`chunkio.patches.loading.PatchBatchSampler.reader_rows`), which two workers reading
  halves of it would each decode. The first batch then waits on one worker's read of all of it
  (``Workers(timeout=...)`` covers that read), and each worker's pool holds a whole batch's
  chunks, not its part's.

Which worker reads a row never changes what is read: a row's sample comes with the batch, and
an augmentation is keyed by the sample and the epoch, not by the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import LoaderError
from ..util.numeric import ceil_div

__all__ = ["Parts", "assign", "check_parts", "even_parts"]

#: ``parts(n, workers)``: rows ``[0, n)`` of a batch as 1 to ``workers`` contiguous ranges
Parts = Callable[[int, int], Sequence[tuple[int, int]]]


def even_parts(n: int, workers: int) -> list[tuple[int, int]]:
    """Rows ``[0, n)`` in ``workers`` contiguous, nearly equal ranges.

    >>> even_parts(5, 2)
    [(0, 3), (3, 5)]
    """
    edges = [ceil_div(n * w, workers) for w in range(workers + 1)]
    return [(edges[w], edges[w + 1]) for w in range(workers)]


def check_parts(ranges: Sequence[tuple[int, int]], n: int, workers: int) -> list[tuple[int, int]]:
    """``ranges`` if they are 1 to ``workers`` ranges whose non-empty ones tile ``[0, n)``.

    >>> check_parts([(0, 4)], 4, 2)
    [(0, 4)]
    >>> check_parts([(0, 2), (3, 4)], 4, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    chunkio.errors.LoaderError: batch parts [(0, 2), (3, 4)] do not split rows [0, 4) among ...
    """
    out = [(int(a), int(b)) for a, b in ranges]
    edges = [edge for a, b in sorted(r for r in out if r[1] > r[0]) for edge in (a, b)]
    tiled = edges[:1] == [0] and edges[-1:] == [n] and edges[1:-1:2] == edges[2:-1:2]
    if not 1 <= len(out) <= workers or not tiled:
        raise LoaderError(
            f"batch parts {out} do not split rows [0, {n}) among {workers} workers (1 to "
            f"{workers} contiguous ranges)"
        )
    return out


def assign(ranges: Sequence[tuple[int, int]], seq: int, workers: int) -> dict[int, tuple[int, int]]:
    """The non-empty ``ranges`` (checked parts) of the ``seq``-th batch by the worker reading
    each: part ``i`` goes to worker ``(seq * len(ranges) + i) % workers``.

    >>> assign([(0, 3), (3, 6)], 7, 2)  # one part per worker: always the same worker
    {0: (0, 3), 1: (3, 6)}
    >>> [assign([(0, 6)], s, 3) for s in range(4)]  # whole batches, workers in turn
    [{0: (0, 6)}, {1: (0, 6)}, {2: (0, 6)}, {0: (0, 6)}]
    """
    k = len(ranges)
    return {(seq * k + i) % workers: (a, b) for i, (a, b) in enumerate(ranges) if b > a}
