"""The frames that carry the ring's messages: every message comes back as it was sent, however
the pipe splits the bytes, and a frame of no known kind is refused."""

from __future__ import annotations

import numpy as np
import pytest

from chunkio.transport.frames import Inbox, encode
from chunkio.transport.messages import Done, Failed, Hint, ReadRows, Ready, Stop

_SENT = [
    ReadRows(3, 1, 0, 128, 2),
    Done(2**40, 7),
    Stop(),
    Ready(4242),
    Failed(None, None, "Traceback ...\nValueError: é", b"\x80\x04pickled"),
    Failed(5, 0, "text", None),
    ReadRows(4, 2, 128, 256, 0),
]


def _same(got: list[object], sent: list[object]) -> bool:
    return [type(m) for m in got] == [type(m) for m in sent] and all(
        np.array_equal(a[0], b[0]) if isinstance(a, Hint) else a == b  # type: ignore[index]
        for a, b in zip(got, sent, strict=True)
    )


@pytest.mark.parametrize("piece", [1, 2, 5, 7, 64, 10_000])
def test_every_message_comes_back_whatever_pieces_the_pipe_gives(piece: int) -> None:
    sent = [*_SENT, Hint(np.array([9, -1, 2**62], np.int64)), Hint(np.zeros(0, np.int64))]
    stream = b"".join(encode(m) for m in sent)
    inbox = Inbox()
    got = [m for k in range(0, len(stream), piece) for m in inbox.feed(stream[k : k + piece])]
    assert _same(got, sent)
    assert inbox.feed(b"") == []  # nothing left over


def test_a_frame_cut_short_waits_for_the_rest() -> None:
    frame = encode(Done(1, 2))
    inbox = Inbox()
    assert inbox.feed(frame[:-1]) == []
    assert inbox.feed(frame[-1:] + frame) == [Done(1, 2), Done(1, 2)]


def test_an_unknown_kind_or_message_is_refused() -> None:
    frame = bytearray(encode(Stop()))
    frame[4] = 200  # the kind byte, after the payload's 4-byte length
    with pytest.raises(ValueError, match="unknown kind 200"):
        Inbox().feed(bytes(frame))
    with pytest.raises(TypeError, match="not a ring message"):
        encode((1, 2))
