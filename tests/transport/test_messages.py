"""The ring workers' protocol: the table in :mod:`chunkio.transport.messages` lists every
message both ends define, and both ends send nothing else (the table once listed 4 worker
items while 5 were sent, and left out the main process's hint)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import chunkio
from chunkio.transport import messages
from chunkio.transport.messages import FROM_MAIN, FROM_WORKER
from chunkio.transport.workers import RingWorkers

_ROW = re.compile(r"^(main|worker)\s+``(\w+)\(([^)]*)\)``")


def _table() -> set[tuple[str, str, tuple[str, ...]]]:
    rows = set()
    for line in (messages.__doc__ or "").splitlines():
        found = _ROW.match(line)
        if found:
            sender, name, args = found.groups()
            fields = tuple(a.strip() for a in args.split(",") if a.strip())
            rows.add((sender, name, fields))
    return rows


def _defined() -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (sender, cls.__name__, tuple(cls._fields))  # type: ignore[attr-defined]
        for sender, kinds in (("main", FROM_MAIN), ("worker", FROM_WORKER))
        for cls in kinds
    }


def test_the_protocol_table_lists_every_message_as_defined() -> None:
    assert _table() == _defined()


def test_the_table_check_catches_a_missing_or_stale_row() -> None:
    rows = _table()
    assert len(rows) == len(FROM_MAIN) + len(FROM_WORKER) == 6
    without_hint = {r for r in rows if r[1] != "Hint"}
    assert without_hint != _defined()
    stale = {(s, n, f[:-1] if n == "Failed" else f) for s, n, f in rows}
    assert stale != _defined()


def test_every_message_name_in_the_module_is_in_the_table() -> None:
    defined = {name for name in messages.__all__ if name[0].isupper() and name != "ToWorker"}
    assert defined - {"FROM_MAIN", "FROM_WORKER"} == {n for _, n, _ in _table()}


@pytest.mark.timeout(120)
def test_both_ends_send_only_the_defined_messages(
    make_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, arrays = make_dataset("zarr")
    sent: list[Any] = []
    received: list[Any] = []
    send, receive = RingWorkers.send, RingWorkers.receive

    def recording_send(self: RingWorkers, w: int, message: Any) -> None:
        sent.append(message)
        send(self, w, message)

    def recording_receive(self: RingWorkers, timeout: float) -> Any:
        got, dead = receive(self, timeout)
        received.extend(m for _, m in got)
        return got, dead

    monkeypatch.setattr(RingWorkers, "send", recording_send)
    monkeypatch.setattr(RingWorkers, "receive", recording_receive)
    with chunkio.make_loader(
        path,
        16,
        fields="label",
        num_workers=2,
        workers=chunkio.Workers(context="fork"),
        seed=0,
    ) as loader:
        assert loader.transport == "ring"
        labels = np.concatenate([b.numpy().copy() for b in loader])  # views: copied
    assert sorted(labels.tolist()) == sorted(arrays["label"].tolist())
    assert sent and all(isinstance(m, FROM_MAIN) for m in sent), {type(m) for m in sent}
    assert received and all(isinstance(m, FROM_WORKER) for m in received)
    assert {type(m).__name__ for m in received} >= {"Ready", "Done"}
