"""How a held stack's rows reach its shared-memory segment (chunkio.util.shared_stack): a block
of every variable within ``BLOCK_BYTES`` by one ``pwrite``, a larger one variable by variable
through the mapping (no private chunk of every variable); a part's chunk by one ``pwrite``
straight from its cache slot (the part laid out as slots), however many calls it takes; a
``pwrite`` the system refuses tried once, then the mapping."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from held_fill import attached_stack, pattern

import chunkio.util.shared_stack as shared_stack
from chunkio.read.windows.held import HeldPart
from chunkio.util.shared_stack import FREE, READY, SharedStack, StackShape

#: 3 variables of 30 rows, 4 rows a chunk, 32 bytes a row: 384 bytes a chunk of all of them
SMALL = StackShape(("a", "b", "c"), (4, 4, 4), 30, (8,), "<f4", 3 * 4 * 32)
#: 2 variables, 4 rows a chunk, rows of 4 KiB, one chunk a block (a held part's shape)
WIDE = StackShape(("a", "b"), (4, 4), 12, (1024,), "<f4", 0)
#: the same with rows of 32 bytes
NARROW = StackShape(("a", "b"), (4, 4), 12, (8,), "<f4", 0)
_PWRITE, _PWRITEV = os.pwrite, os.pwritev


@pytest.fixture
def small() -> Iterator[SharedStack]:
    yield from attached_stack(SMALL)


@pytest.fixture(params=[WIDE, NARROW], ids=["wide", "narrow"])
def part_stack(request: pytest.FixtureRequest) -> Iterator[SharedStack]:
    yield from attached_stack(request.param)


def _read_block(want: Any) -> Any:
    def read_block(out: Any, j: int, a: int, b: int) -> None:
        out[...] = want[a:b, j]

    return read_block


def _record(monkeypatch: pytest.MonkeyPatch, answer: Any = None) -> list[tuple[str, Any]]:
    """Calls of ``os.pwrite`` / ``os.pwritev`` (name, data), answered by ``answer`` if given."""
    calls: list[tuple[str, Any]] = []
    for name, real in (("pwrite", _PWRITE), ("pwritev", _PWRITEV)):

        def call(fd: int, data: Any, offset: int, name: str = name, real: Any = real) -> int:
            calls.append((name, data))
            return int((answer or real)(fd, data, offset))

        monkeypatch.setattr(shared_stack.os, name, call)
    return calls


def _refused(fd: int, data: Any, offset: int) -> int:
    raise OSError(errno.ESPIPE, "Illegal seek")


def test_a_refused_pwrite_is_tried_once_then_the_mapping_writes(
    small: SharedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS refuses ``pwrite`` on a POSIX shared-memory descriptor (ESPIPE): the fill goes
    on through the mapping, with the same bytes."""
    calls = _record(monkeypatch, _refused)
    want = pattern(SMALL)
    np.testing.assert_array_equal(small.fill(_read_block(want)), want)
    assert len(calls) == 1 and small.write.fd == -1 and (small.states == READY).all()


def test_a_fill_never_holds_a_chunk_of_every_variable_past_block_bytes(
    small: SharedStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row chunk of every variable larger than ``BLOCK_BYTES`` (ERA5: 5 x 95 MiB) is filled
    variable by variable through the mapping: no private buffer of the block; within it, one
    private block and one ``pwrite``."""
    calls = _record(monkeypatch)
    want = pattern(SMALL)
    monkeypatch.setattr(shared_stack, "BLOCK_BYTES", 3 * 4 * 32 - 1)
    np.testing.assert_array_equal(small.fill(_read_block(want)), want)
    # only the last block, 2 rows, is within the bound: one private buffer of it, one pwrite
    assert small.write.rows is not None and small.write.rows.nbytes == 3 * 2 * 32
    assert [(name, len(data)) for name, data in calls] == [("pwrite", 3 * 2 * 32)]
    calls.clear()
    small.write.rows = None
    monkeypatch.setattr(shared_stack, "BLOCK_BYTES", 3 * 4 * 32)
    small.states[:] = FREE
    small.stack[...] = 0
    np.testing.assert_array_equal(small.fill(_read_block(want)), want)
    assert small.write.rows is not None and small.write.rows.nbytes <= 3 * 4 * 32
    assert [name for name, _ in calls] == ["pwrite"] * len(SMALL.blocks)


def _slot(want: Any, chunk: int) -> Any:
    """A streamed cache's slot ``(V, rows per chunk, -1)`` holding row chunk ``chunk``."""
    rows = want[chunk * 4 : chunk * 4 + 4]
    return np.ascontiguousarray(rows.reshape(len(rows), 2, -1).swapaxes(0, 1))


@pytest.mark.parametrize("write", ["whole", "short", "refused", "failed"])
def test_a_part_chunk_is_written_from_its_slot(
    part_stack: SharedStack, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A part's chunk goes by one ``pwrite`` straight from its slot (no private copy; the
    part's chunks are laid out as slots, ``(V, rows per chunk, row)``), however small its rows;
    cut short, finished where each call stopped; refused, through the mapping; failed
    (nothing written), the chunk is left free and nothing raised."""

    def short(fd: int, data: Any, offset: int) -> int:
        return _PWRITE(fd, bytes(data)[:100], offset)

    answer = {"short": short, "refused": _refused, "failed": lambda *args: 0}.get(write)
    calls = _record(monkeypatch, answer)
    want = pattern(part_stack.shape)
    part = HeldPart(part_stack)
    slot = _slot(want, 1)
    part.keep(1, slot)
    assert part_stack.states.tolist() == [FREE, FREE if write == "failed" else READY, FREE]
    expected = np.zeros_like(part.data)
    if write != "failed":
        expected[1] = slot
    np.testing.assert_array_equal(part.data, expected)  # chunk 1 alone, as its slot
    assert {name for name, _ in calls} == {"pwrite"}
    first = np.frombuffer(calls[0][1], np.uint8)
    assert np.shares_memory(first, slot)  # straight from the slot
    if write == "short":
        assert len(calls) == -(-slot.nbytes // 100)  # finished where each call stopped
    else:
        assert len(calls) == 1 and len(first) == slot.nbytes
    if write != "failed":  # the chunk copies back out as it went in
        back = np.empty_like(slot)
        assert part.copy_out(1, back)
        np.testing.assert_array_equal(back, slot)
        assert not part.copy_out(0, back)  # chunk 0 not written
