"""Moving batches from reader processes to the consumer.

:class:`RingTransport` runs worker processes that read each batch straight into a slot of a
preallocated shared-memory ring (:mod:`.ring`), so only slot numbers travel between processes;
:class:`LocalTransport` reads in-process into a reused buffer. Both yield :class:`Lease`
objects: a batch plus the callback that returns its memory for reuse.

Modules here may import :mod:`chunkio.util` and :mod:`chunkio.errors`, and for the
GPU-decode route (:mod:`.gpu_decode`) :mod:`chunkio.images` and :mod:`chunkio.transforms`;
what a batch is comes in through :class:`BatchSource`. :mod:`.gpu` moves batches onto the device.
"""

from __future__ import annotations

from .iterator import STARTUP_TIMEOUT_S, RingOptions, RingTransport
from .lease import Lease, as_lease
from .local import LocalTransport
from .ring import SHM_PREFIX, RingLayout, RingSpec, SlotRing
from .source import BatchSource, FieldShapes

__all__ = [
    "SHM_PREFIX",
    "STARTUP_TIMEOUT_S",
    "BatchSource",
    "FieldShapes",
    "Lease",
    "LocalTransport",
    "RingLayout",
    "RingOptions",
    "RingSpec",
    "RingTransport",
    "SlotRing",
    "as_lease",
]
