"""One protocol for everything that resumes: ``state_dict()`` and ``load_state_dict(state)``.

As torchdata's ``Stateful``: the state is a JSON-serialisable dict, taken with no arguments
(what a sampler or loader has yielded so far) and restored into an object built the same way.
A position other than the one yielded (a loader counts the batches *delivered*, not those its
workers prefetched) comes from a method of its own (``state_at``), not an argument here.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Stateful"]


@runtime_checkable
class Stateful(Protocol):
    """Something that saves its position and resumes from it.

    >>> from chunkio.sampling.sampler import ChunkBatchSampler
    >>> isinstance(ChunkBatchSampler([4, 4], 2), Stateful)
    True
    """

    def state_dict(self) -> dict[str, Any]:
        """The position so far, JSON-serialisable."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state`` (taken by :meth:`state_dict` of an object built the same
        way); the next iteration continues right after it."""
        ...
