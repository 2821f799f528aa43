"""An autouse check that no chunkio error made during a test has a message longer than
:data:`chunkio.util.messages.MESSAGE_LIMIT` characters: the bad-input tests of a folder make
hundreds of errors on purpose, and each is held to the bound. ``tests/conftest.py`` loads
this plugin; it checks the tests of :data:`CHECKED` (bad input, damaged and foreign stores,
the command).

Errors are seen where they are made, in this process (a worker's error is seen again when
the loader re-raises it here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chunkio.errors import ChunkioError
from chunkio.util.messages import MESSAGE_LIMIT

#: what precedes the worker's traceback a loader (chunkio's, torch's DataLoader) appends to a
#: worker's error: not counted, the message is what comes before it
TRACEBACKS = ("the worker's traceback:", "Original Traceback (most recent call last)")
#: the test folders whose tests are checked
CHECKED = ("read", "cli", "backends", "architecture")
_TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def messages_within_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test of :data:`CHECKED` if a :class:`~chunkio.errors.ChunkioError` longer than
    the limit was made during it (raised or not, caught or not)."""
    path = Path(str(request.node.path)).resolve()
    if not any(path.is_relative_to(_TESTS / folder) for folder in CHECKED):
        yield
        return
    long: list[str] = []

    def init(self: BaseException, *args: Any, **kwargs: Any) -> None:
        super(ChunkioError, self).__init__(*args, **kwargs)
        text = str(args[0]) if args and isinstance(args[0], str) else ""
        for marker in TRACEBACKS:  # a worker's traceback re-raised with its error
            text = text.split(marker, 1)[0]
        if len(text) > MESSAGE_LIMIT:
            long.append(f"{type(self).__name__} ({len(text)} characters): {text[:300]}...")

    assert "__init__" not in ChunkioError.__dict__  # inherited: deleting it restores that
    ChunkioError.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        del ChunkioError.__init__
    assert not long, "\n".join(long)
