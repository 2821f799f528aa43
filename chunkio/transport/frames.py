"""The frames that carry the ring workers' messages (:mod:`.messages`) on their pipes.

A frame is its payload's length and its message's kind, then the fields packed as int64 (a
hint's indices as their bytes; only ``Failed``, with its traceback, is pickled). Both ends
write frames to the pipe's descriptor and read whatever has arrived: per batch the main
process sends one frame to each worker and receives one back, and a packed frame costs a few
microseconds at each end where ``Connection.send``/``recv`` (a pickle, two reads) cost about
four times as much; one ``os.read`` takes every frame that has arrived.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

import numpy as np

from .messages import Done, Failed, Hint, ReadRows, Ready, Stop

__all__ = ["Inbox", "encode", "write_all"]

#: a frame's head: its payload's length in bytes, and its kind (an index into _KINDS)
_HEAD = struct.Struct("<IB")
#: every message, by the kind its frames carry
_KINDS: tuple[type[tuple[Any, ...]], ...] = (ReadRows, Hint, Stop, Ready, Done, Failed)
#: the messages whose fields are all ints: a head and the fields, packed in one call
_PACKED: dict[type[tuple[Any, ...]], struct.Struct] = {
    cls: struct.Struct(f"<IB{len(cls._fields)}q") for cls in (ReadRows, Stop, Ready, Done)
}
#: the packed messages' fields, by kind
_FIELDS = {_KINDS.index(cls): struct.Struct(f"<{s.format[3:]}") for cls, s in _PACKED.items()}


def encode(message: tuple[Any, ...]) -> bytes:
    """One message as the frame that carries it on the pipe.

    >>> Inbox().feed(encode(ReadRows(3, 1, 0, 128, 2)) + encode(Stop()))
    [ReadRows(seq=3, slot=1, start=0, stop=128, epoch=2), Stop()]
    """
    cls = type(message)
    packed = _PACKED.get(cls)
    if packed is not None:
        return packed.pack(packed.size - _HEAD.size, _KINDS.index(cls), *message)
    if cls is Hint:
        body = np.ascontiguousarray(message[0], dtype=np.int64).tobytes()
    elif cls is Failed:
        body = pickle.dumps(tuple(message))
    else:
        raise TypeError(f"not a ring message: {message!r}")
    return _HEAD.pack(len(body), _KINDS.index(cls)) + body


class Inbox:
    """The messages in a stream of frames, read in pieces of any size (:meth:`feed`)."""

    def __init__(self) -> None:
        self._pending = bytearray()  # the start of a frame not all arrived yet

    def feed(self, data: bytes) -> list[Any]:
        """The messages completed by ``data``, the bytes read next from the pipe."""
        if self._pending:
            self._pending += data
            data = bytes(self._pending)
        out: list[Any] = []
        pos, end = 0, len(data)
        while end - pos >= _HEAD.size:
            size, kind = _HEAD.unpack_from(data, pos)
            if kind >= len(_KINDS):
                raise ValueError(f"a ring message of unknown kind {kind} on the pipe")
            if end - pos - _HEAD.size < size:
                break
            body = pos + _HEAD.size
            cls = _KINDS[kind]
            if cls is Hint:
                out.append(Hint(np.frombuffer(data[body : body + size], np.int64)))
            elif cls is Failed:
                out.append(Failed(*pickle.loads(data[body : body + size])))  # our own worker's
            else:
                out.append(cls(*_FIELDS[kind].unpack_from(data, body)))
            pos = body + size
        if pos < end:
            self._pending = bytearray(data[pos:])
        elif self._pending:
            self._pending = bytearray()
        return out


def write_all(fd: int, frame: bytes) -> None:
    """Write all of ``frame`` to ``fd`` (a blocking pipe or socket; OSError if it is closed)."""
    view = memoryview(frame)
    while view:
        view = view[os.write(fd, view) :]
