"""Reusable check that a stateful iterable resumes exactly where it stopped.

A *stateful iterable* has ``__iter__``, ``state_dict()`` and ``load_state_dict(state)`` (samplers,
loaders, ...).  ``make`` builds a fresh, identically configured instance (including e.g. a
``set_epoch`` call).  Usage::

    from resume_harness import assert_resume_equals_uninterrupted

    assert_resume_equals_uninterrupted(lambda: ChunkBatchSampler(sizes, 8, seed=3), stop=5)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class Stateful(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def plain(item: Any) -> Any:
    """Comparable plain-Python form of an item (arrays and tensors become lists)."""
    if hasattr(item, "tolist"):
        return item.tolist()
    if isinstance(item, list | tuple):
        return [plain(x) for x in item]
    if isinstance(item, dict):
        return {k: plain(v) for k, v in item.items()}
    return item


def assert_resume_equals_uninterrupted(
    make: Callable[[], Stateful],
    stop: int,
    *,
    json_roundtrip: bool = True,
    convert: Callable[[Any], Any] = plain,
) -> tuple[list[Any], dict[str, Any]]:
    """Assert that stopping after ``stop`` items and resuming yields the uninterrupted sequence.

    Three fresh instances are used: one runs uninterrupted; one is consumed for ``stop`` items
    (``stop`` is clipped to the sequence length) and then asked for ``state_dict()`` (passed through
    JSON if ``json_roundtrip``); the third loads that state and must yield exactly the remaining
    items.  Returns the uninterrupted items (converted) and the saved state.
    """
    full = [convert(x) for x in make()]
    stop = max(0, min(stop, len(full)))
    first = make()
    head: list[Any] = []
    if stop:
        for item in first:
            head.append(convert(item))
            if len(head) == stop:
                break
    state = first.state_dict()
    if json_roundtrip:
        state = json.loads(json.dumps(state))
    resumed = make()
    resumed.load_state_dict(state)
    tail = [convert(x) for x in resumed]
    assert head == full[:stop], f"first {stop} items differ from the uninterrupted run"
    assert tail == full[stop:], (
        f"after resuming at {stop}/{len(full)} got {len(tail)} items, "
        f"expected {len(full) - stop} (the rest of the uninterrupted run)"
    )
    return full, state
