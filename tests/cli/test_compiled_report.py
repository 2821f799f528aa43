"""Users see which compiled accelerations are active: ``chunkio --version`` and the end of
``chunkio doctor`` list each part (chunkio.testing.compiled.report), and a missing one with
what building it needs, so a ``pip install`` that went on without one does not stay silent."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

import chunkio
from chunkio.diagnose import doctor
from chunkio.diagnose.cli import main
from chunkio.images.libjpeg import Libjpeg
from chunkio.testing import compiled
from chunkio.testing.compiled import PARTS, problems, report
from chunkio.testing.servers import unavailable

JPEG, YUV, FLETCHER, SPARSE_ROWS = PARTS


def test_version_lists_every_compiled_part(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"chunkio {chunkio.__version__}", "compiled parts:"]
    assert [line.split(" (", 1)[0].strip() for line in lines[2:]] == [
        "_jpegcrop",
        "_yuv",
        "_fletcher",
        "_sparse_rows",
    ]
    assert lines[2:] == [f"  {line}" for line in report()]


def test_an_active_decoder_says_what_it_runs_on() -> None:
    if problems():
        unavailable(f"chunkio's compiled parts are not all built: {problems()}")
    jpeg_line, yuv_line, fletcher_line, sparse_line = report()
    assert jpeg_line.startswith("_jpegcrop (partial JPEG decode of crops): active (")
    assert "headers; libjpeg-turbo: " in jpeg_line
    assert yuv_line == "_yuv (yuv420 colour conversion): active"
    assert fletcher_line == "_fletcher (HDF5 fletcher32 checksums): active"
    assert sparse_line == "_sparse_rows (sparse rows scattered into dense batches): active"


def test_a_part_that_is_not_built_is_reported_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a C compiler neither part builds: each line says so and how to fix it."""
    from chunkio.images import jpeg, libjpeg

    monkeypatch.setitem(sys.modules, JPEG.module, None)  # its import fails, as unbuilt
    monkeypatch.setattr(jpeg, "LIBJPEG", libjpeg.attach(None))
    with pytest.raises(SystemExit):
        main(["--version"])
    jpeg_line = next(line for line in capsys.readouterr().out.splitlines() if "_jpegcrop" in line)
    assert "_jpegcrop (partial JPEG decode of crops): missing, slower without it: not built" in (
        jpeg_line
    )
    assert jpeg_line.endswith(f"; fix: {compiled.FIX}")
    assert "pip install --force-reinstall --no-deps ." in compiled.FIX


def test_a_decoder_without_a_library_is_reported_with_its_own_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Built against the vendored headers, but no libjpeg-turbo could be bound: unusable."""
    from chunkio.images import jpeg

    monkeypatch.setattr(jpeg, "LIBJPEG", Libjpeg(None, "no libjpeg-turbo (tried x); do y"))
    found = problems([JPEG])
    assert found == {JPEG: "built, but unusable: no libjpeg-turbo (tried x); do y"}
    line = report(found)[0]
    assert line == (
        "_jpegcrop (partial JPEG decode of crops): missing, slower without it: built, but "
        "unusable: no libjpeg-turbo (tried x); do y"
    )


def test_doctor_ends_with_the_compiled_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "run_doctor", lambda *a, **kw: SimpleNamespace(render=lambda: "R"))
    text = doctor.main_doctor("anywhere")
    section = doctor.compiled_parts_section()
    assert text == f"R\n\n{section}"
    assert section.splitlines() == ["  compiled parts:", *(f"    {line}" for line in report())]
