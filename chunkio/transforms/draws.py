"""Counter-based randomness of transform plans: uniform draws keyed by ``(seed, epoch, index)``.

Randomness comes from a counter-based hash (splitmix64 over ``(seed, epoch, index, op number,
draw number)``), not from a generator per sample: a draw costs well under a microsecond and
is a pure function of its key, so a plan (:mod:`chunkio.transforms.image`) is too. The key's state
is chained through the mix: :func:`epoch_state` of ``(seed, epoch)``, then the index
(:func:`key_state`).

>>> s = key_state((0, 3, 5))
>>> uniform(s, 0, 0) == uniform(key_state((0, 3, 5)), 0, 0), 0.0 <= uniform(s, 1, 2) < 1.0
(True, True)
"""

from __future__ import annotations

__all__ = [
    "GAMMA",
    "M64",
    "Key",
    "draw_bits",
    "epoch_state",
    "fmix",
    "key_state",
    "uniform",
    "uniform2",
]

Key = tuple[int, int, int]
"""``(seed, epoch, sample index)``: all randomness of a plan is a pure function of it."""

#: 64-bit mask and splitmix64's increment (the golden ratio)
M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
_TO_UNIT = 2.0**-53
_M32 = (1 << 32) - 1
_TO_UNIT32 = 2.0**-32
#: draws each op may take from its stream
_DRAWS_PER_OP = 64


def fmix(z: int) -> int:
    """splitmix64's finaliser: a bijective, well-avalanched 64-bit mix."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def epoch_state(seed: int, epoch: int) -> int:
    """The first two links of :func:`key_state`'s chain."""
    h = fmix(((seed & M64) + GAMMA) & M64)
    return fmix(((h ^ (epoch & M64)) + GAMMA) & M64)


def key_state(key: Key) -> int:
    """64-bit stream state of one sample: the three key parts chained through the mix."""
    seed, epoch, index = key
    return fmix(((epoch_state(seed, epoch) ^ (index & M64)) + GAMMA) & M64)


def draw_bits(state: int, op: int, draw: int) -> int:
    """Output ``draw`` of op ``op``'s splitmix64 stream: 64 well-mixed bits."""
    z = (state + (op * _DRAWS_PER_OP + draw + 1) * GAMMA) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def uniform(state: int, op: int, draw: int) -> float:
    """Uniform float in [0, 1) with 53 random bits."""
    return (draw_bits(state, op, draw) >> 11) * _TO_UNIT


def uniform2(state: int, op: int, draw: int) -> tuple[float, float]:
    """Two independent uniform floats in [0, 1) with 32 random bits each (one hash).

    32 bits is more than torchvision's float32 draws carry.
    """
    z = (state + (op * _DRAWS_PER_OP + draw + 1) * GAMMA) & M64  # draw_bits, inlined
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 32) * _TO_UNIT32, (z & _M32) * _TO_UNIT32
