"""The public API: every exported name resolves; conversion never imports torch."""

from __future__ import annotations

import subprocess
import sys

import chunkio


def test_every_exported_name_resolves() -> None:
    assert chunkio.__all__ == sorted(chunkio.__all__)
    for name in chunkio.__all__:
        assert getattr(chunkio, name) is not None, name


def test_conversion_and_inspection_do_not_import_torch() -> None:
    code = (
        "import sys, chunkio, chunkio.convert.images, chunkio.dataset_report, chunkio.cli; "
        "chunkio.write_arrays; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
