"""``python -m chunkio``: the same as the ``chunkio`` command (see :mod:`chunkio.diagnose.cli`)."""

from __future__ import annotations

import sys

from .diagnose.cli import main

if __name__ == "__main__":
    sys.exit(main())
