"""A seeded permutation of ``[0, N)`` computed a slice at a time, in both directions.

The stored order of a large shuffled conversion (:mod:`chunkio.convert.shuffle.order`):
``numpy``'s ``permutation(N)`` is a Fisher-Yates shuffle of the whole array, so any slice of
it costs the whole ``8 N`` bytes (and its inverse as much again) in every process that needs
one. :class:`KeyedPermutation` is a bijection instead, evaluated element-wise: a balanced
Feistel network of :data:`ROUNDS` rounds over ``2 * half`` bits (``4 ** half >= N``), its
round function the SplitMix64 finaliser of the right half xor a round key drawn from
``seed``, and cycle-walking (re-applied while a value falls outside ``[0, N)``: fewer than 4
applications on average, since ``4 ** half < 4 N``) to stay in ``[0, N)``. Each direction
costs ``O(len(slice))`` time and memory, whatever ``N``.

Pure numpy, no I/O: it pickles as ``(N, seed)``.

>>> p = KeyedPermutation(10, seed=3)
>>> sorted(p.take(np.arange(10)).tolist()) == list(range(10))
True
>>> bool((p.inverse(p.take(np.arange(10))) == np.arange(10)).all())
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ...util.numeric import IntArray

__all__ = ["ROUNDS", "KeyedPermutation"]

#: Feistel rounds: 4 make a pseudo-random permutation of a good round function; 6 for margin
ROUNDS = 6
#: elements computed at a time
_PIECE = 1 << 16
_KEY_TAG = 0x6B657965  # separates the round keys' stream from default_rng(seed)'s own
_U64 = npt.NDArray[np.uint64]
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The SplitMix64 finaliser (a bijection of uint64 that mixes every bit into every bit);
    numpy array arithmetic wraps modulo 2**64, which is what it needs."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


class KeyedPermutation:
    """The permutation of ``[0, num_samples)`` that ``seed`` picks (see the module docstring).

    ``take(i)`` is ``perm[i]``; ``inverse(v)`` is the ``i`` with ``perm[i] == v``.
    """

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples, self.seed = int(num_samples), int(seed)
        bits = max(2, (self.num_samples - 1).bit_length())
        self.half = np.uint64((bits + 1) // 2)
        self.mask = np.uint64((1 << int(self.half)) - 1)
        keys = np.random.default_rng([self.seed, _KEY_TAG]).integers(
            0, np.iinfo(np.int64).max, ROUNDS, dtype=np.int64
        )
        self.keys = tuple(np.uint64(k) for k in keys.tolist())

    def __reduce__(self) -> tuple[type[KeyedPermutation], tuple[int, int]]:
        return (KeyedPermutation, (self.num_samples, self.seed))

    def take(self, positions: npt.ArrayLike) -> IntArray:
        """``perm[positions]`` (int64, each in ``[0, num_samples)``)."""
        return self._walk(positions, self._encrypt)

    def inverse(self, values: npt.ArrayLike) -> IntArray:
        """Where each of ``values`` stands in the permutation."""
        return self._walk(values, self._decrypt)

    def _walk(self, at: npt.ArrayLike, step: Callable[[_U64], _U64]) -> IntArray:
        x = np.asarray(at, dtype=np.int64)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.num_samples):
            raise IndexError(
                f"positions must lie in [0, {self.num_samples}); got {int(x.min())}..{int(x.max())}"
            )
        out = np.empty(x.shape, dtype=np.int64)
        flat, source = out.reshape(-1), x.reshape(-1)
        n = np.uint64(self.num_samples)
        # a piece at a time: the rounds' temporaries stay a few MiB for a block of any size
        for at in range(0, flat.size, _PIECE):
            piece = source[at : at + _PIECE].astype(np.uint64)
            todo = np.arange(piece.size)
            while todo.size:  # cycle-walking: the values outside [0, N) are stepped again
                got = step(piece[todo])
                piece[todo] = got
                todo = todo[got >= n]
            flat[at : at + _PIECE] = piece
        return out

    def _round(self, right: npt.NDArray[np.uint64], key: np.uint64) -> npt.NDArray[np.uint64]:
        return _mix(right ^ key) & self.mask

    def _encrypt(self, x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        left, right = x >> self.half, x & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        out: npt.NDArray[np.uint64] = (left << self.half) | right
        return out

    def _decrypt(self, x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        left, right = x >> self.half, x & self.mask
        for key in reversed(self.keys):
            left, right = right ^ self._round(left, key), left
        out: npt.NDArray[np.uint64] = (left << self.half) | right
        return out
