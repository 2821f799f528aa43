"""Where a conversion writes, durably: staging, one converter per destination, idempotent reruns.

:mod:`.staging` (atomic, resumable, exclusive local destinations), :mod:`.locking` (an
``flock`` per destination) and :mod:`.rerun` (a finished conversion, run again, returns at
once). Modules here may import :mod:`chunkio.util`, :mod:`chunkio.errors`,
:mod:`chunkio.format` and :mod:`chunkio.backends`.
"""

from __future__ import annotations
