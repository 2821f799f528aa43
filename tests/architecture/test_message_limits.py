"""Messages a person reads: no error over :data:`~chunkio.util.messages.MESSAGE_LIMIT`
characters however many names it could list, and the option table the ``chunkio`` command
rewrites advice with names only flags the command has.

The long-list cases are the ones users met: a wrong field of a legacy h5ad holding dozens of
arrays, steps beyond a 501-step series, a dataset of 40 long-named fields, the files of one
dataset disagreeing on them, an open h5py file passed for its path.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from anndata_files import PBMC

from chunkio import ChunkDataset, Field, write_arrays
from chunkio.diagnose import cli
from chunkio.errors import ChunkioError
from chunkio.util.messages import FLAGS, MESSAGE_LIMIT, as_flags, keyword


def _series(tmp_path: Path, steps: range) -> Callable[[], Any]:
    path = str(tmp_path / "series.zarr")
    write_arrays(path, {"t": np.zeros((501, 2), np.float32)}, shuffle=False)
    return lambda: ChunkDataset(path, fields=[Field("t", steps=list(steps))])


#: fields of the many-field dataset (each is an array: writing 300 takes seconds; long names
#: fill a message as fast)
MANY = 40


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("many") / "many.zarr")
    fields = {f"a_field_with_a_long_name_{i:03d}": np.zeros(2, np.uint8) for i in range(MANY)}
    write_arrays(path, fields, shuffle=False)
    return path


def _files_disagree(tmp_path: Path, many: str) -> Callable[[], Any]:
    first = str(tmp_path / "one.zarr")
    write_arrays(first, {"x": np.zeros(2, np.uint8)})
    return lambda: ChunkDataset([first, many])


def _open_h5py(tmp_path: Path) -> Callable[[], Any]:
    path = tmp_path / "user.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(3)

    def make() -> None:
        with h5py.File(path, "r") as f:
            ChunkDataset(f, fields=["x"])

    return make


#: a case -> (a call that raises, given tmp_path and the many-field dataset; what its message
#: must say)
CASES: dict[str, Callable[[Path, str], tuple[Callable[[], Any], str]]] = {
    "legacy h5ad, wrong field": lambda *_: (
        lambda: ChunkDataset(str(PBMC), fields={"x": "raw.X", "label": "obs/nope"}),
        "more",
    ),
    "steps beyond a 501-step series": lambda p, _: (_series(p, range(600)), "than the 501"),
    "steps after a 501-step series": lambda p, _: (_series(p, range(501, 1100)), "593 more"),
    "a field among many": lambda _, many: (
        lambda: ChunkDataset(many, fields=["nope"]),
        " more]",
    ),
    "read_batch of a field among many": lambda _, many: (
        lambda: ChunkDataset(many).read_batch([0], fields=["nope"]),
        " more]",
    ),
    "files with 1 and many fields": lambda p, many: (_files_disagree(p, many), " more]"),
    "an open h5py file": lambda p, _: (_open_h5py(p), "user.h5'"),
    "a chunkio field renamed": lambda _, many: (
        lambda: ChunkDataset(many, fields={"image": "a_field_with_a_long_name_000"}),
        "fields=['a_field_with_a_long_name_000']",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_messages_stay_short_whatever_they_could_list(case: str, tmp_path: Path, many: str) -> None:
    call, says = CASES[case](tmp_path, many)
    with pytest.raises((ChunkioError, KeyError)) as raised:
        call()
    text = str(raised.value)
    assert says in text, text
    assert len(text) <= MESSAGE_LIMIT, f"{len(text)} characters: {text}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its subcommands, at any depth."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def test_every_advised_option_is_a_flag_of_the_command() -> None:
    options = _options(cli._parser())
    for name, flag in FLAGS.items():
        assert {flag, "--no-" + flag[2:]} & options, (name, flag)
    assert as_flags(keyword("shuffle", False)) in options  # the spelling a refusal advises


def test_as_flags_rewrites_only_known_keywords() -> None:
    assert as_flags(keyword("on_error", "skip")) == "--on-error skip"
    assert as_flags("pass execution=chunkio.Execution(overwrite=True)") == "pass --overwrite"
    assert as_flags("fields={'a': 'x/y'} or fields=['x', 'y']") == "--fields a=x/y or --fields x y"
    kept = "make_loader(pool_bytes=4) and transform=None"  # no command flag: left as written
    assert as_flags(kept) == kept
