"""Errors of the ``chunkio`` command speak its flags: an error that advises an option shows
``--on-error skip`` / ``--overwrite`` / ``--fields NAME=PATH``, never the Python keyword the
library spells it with (``on_error='skip'``, ``Execution(overwrite=True)``, ``fields={...}``).

Each case runs the command in-process into one such error and reads its one line on stderr.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

from chunkio import write_arrays
from chunkio.diagnose import cli
from chunkio.util.messages import MESSAGE_LIMIT

#: Python spellings a command-line error must not show: a keyword argument, a chunkio name
PYTHON_SYNTAX = re.compile(r"\b[a-z_]+=(['\"\[{(]|True\b|False\b)|chunkio\.|Execution\(")


def _images(tmp_path: Path, *, bad: bool = False, mode: str = "RGB") -> Path:
    src = tmp_path / "src"
    src.mkdir()
    pixels = np.zeros((6, 5, 4 if mode == "RGBA" else 3), np.uint8)
    Image.fromarray(pixels, mode).save(src / "a.png")
    if bad:
        (src / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    return src


def _bad_file(tmp_path: Path) -> list[str]:
    return ["convert", "images", str(_images(tmp_path, bad=True)), str(tmp_path / "o.zarr")]


def _existing(tmp_path: Path) -> list[str]:
    (tmp_path / "o.zarr").mkdir()
    (tmp_path / "o.zarr" / "x").write_text("data")
    return ["convert", "images", str(_images(tmp_path)), str(tmp_path / "o.zarr")]


def _alpha_as_jpeg(tmp_path: Path) -> list[str]:
    src = str(_images(tmp_path, mode="RGBA"))
    out = str(tmp_path / "o.zarr")
    return ["convert", "images", src, out, "--mode", "keep", "--encoding", "jpeg"]


def _nan_volume(tmp_path: Path) -> list[str]:
    (tmp_path / "v").mkdir()
    volume = np.zeros((2, 3, 4), np.float32)
    volume[1, 2, 3] = np.nan
    np.save(tmp_path / "v" / "a.npy", volume)
    return ["convert", "volumes", str(tmp_path / "v"), str(tmp_path / "o.zarr")]


def _foreign(tmp_path: Path) -> str:
    path = tmp_path / "user.h5"
    with h5py.File(path, "w") as f:
        f["a/x"] = np.zeros((4, 2), np.float32)
        f["b/x"] = np.zeros(4, np.int64)
    return str(path)


def _same_names(tmp_path: Path) -> list[str]:
    out = str(tmp_path / "o.zarr")
    return ["convert", "arrays", _foreign(tmp_path), out, "--fields", "a/x", "b/x"]


def _reserved_name(tmp_path: Path) -> list[str]:
    out = str(tmp_path / "o.zarr")
    return ["convert", "arrays", _foreign(tmp_path), out, "--fields", "source_index=a/x"]


def _info_same_names(tmp_path: Path) -> list[str]:
    return ["info", _foreign(tmp_path), "--fields", "a/x", "b/x"]


def _verify_link(tmp_path: Path) -> list[str]:
    return ["verify", *_external_link(tmp_path)[1:2], "--fields", "x=x"]


def _no_fields(tmp_path: Path) -> list[str]:
    return ["doctor", _foreign(tmp_path)]


def _renamed(tmp_path: Path) -> list[str]:
    path = str(tmp_path / "d.zarr")
    write_arrays(path, {"x": np.zeros(4), "y": np.ones(4)}, shuffle=False)
    return ["stats", path, "--out", str(tmp_path / "s.json"), "--fields", "image=x"]


def _external_link(tmp_path: Path) -> list[str]:
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["x"] = np.arange(6, dtype=np.float32)
    with h5py.File(tmp_path / "user.h5", "w") as f:
        f["x"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/x")
    out = str(tmp_path / "s.json")
    return ["stats", str(tmp_path / "user.h5"), "--out", out, "--fields", "x=x"]


#: a command line that fails (made in tmp_path), and the flags its message must advise
CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "bad image file": (_bad_file, "--on-error skip"),
    "existing destination": (_existing, "--overwrite"),
    "alpha as jpeg": (_alpha_as_jpeg, "--encoding png or --encoding webp, or --mode RGB"),
    "NaN volume": (_nan_volume, "(--nan-policy error); pass --nan-policy zero"),
    "two arrays one name": (_same_names, "--fields image=a/x label=b/x"),
    "reserved field name": (_reserved_name, "--no-shuffle"),
    "store without fields": (_no_fields, "--fields image="),
    "renaming a chunkio field": (_renamed, "select with a list, --fields x"),
    "an external link": (_external_link, "--trust-codecs"),
    "info: two arrays one name": (_info_same_names, "--fields image=a/x label=b/x"),
    "verify: an external link": (_verify_link, "--trust-codecs"),
}


@pytest.mark.parametrize("case", CASES)
def test_an_error_of_the_command_advises_its_flags(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, advice = CASES[case]
    argv = make(tmp_path)
    assert cli.main([*argv, "--no-progress"] if argv[0] == "convert" else argv) == cli.EXIT_ERROR
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chunkio: error: "), lines
    assert advice in lines[0]
    assert not PYTHON_SYNTAX.search(lines[0]), lines[0]
    assert len(lines[0]) <= MESSAGE_LIMIT + len("chunkio: error: ")


def test_the_advised_trust_flag_is_one_the_command_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _external_link(tmp_path)
    assert cli.main(argv) == cli.EXIT_ERROR
    assert "--trust-codecs" in capsys.readouterr().err
    assert cli.main([*argv, "--trust-codecs"]) == cli.EXIT_OK
    assert "wrote" in capsys.readouterr().out
