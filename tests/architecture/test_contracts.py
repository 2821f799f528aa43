"""Contracts declare what they can do: optional capabilities (a reader's ``prefetch``, a batch
source's ``prefetch`` and ``channels_last_fields``) have their defaults on the protocol, and
callers call them instead of probing with ``getattr``; everything that resumes follows one
:class:`~chunkio.util.stateful.Stateful` protocol, with no extra arguments."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chunkio
from chunkio.backends import Reader
from chunkio.backends._memory import MemoryReader
from chunkio.backends.hdf5.backend import HDF5Reader
from chunkio.backends.hdf5.remote import RemoteHDF5Reader
from chunkio.backends.zarr.backend import ZarrReader
from chunkio.patches.samplers import GridSampler, RandomPatchSampler
from chunkio.sampling.sampler import ChunkBatchSampler
from chunkio.transport import BatchSource
from chunkio.util.stateful import Stateful

PACKAGE = Path(chunkio.__file__).parent
#: a capability probed rather than called: ``getattr(x, "prefetch", None)`` and the like
_PROBE = re.compile(r"""getattr\([^)]*["'](prefetch\w*|channels_last\w*|remote)["']""")


def _probes(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root.parent)}:{i}"
        for path in sorted(root.rglob("*.py"))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _PROBE.search(line)
    ]


def test_no_capability_is_probed() -> None:
    assert _probes(PACKAGE) == []


def test_the_probe_check_sees_a_probe(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('f = getattr(reader, "prefetch", None)\nok = reader.prefetch\n')
    assert _probes(tmp_path) == [f"{tmp_path.name}/m.py:1"]


@pytest.mark.parametrize("cls", [ZarrReader, HDF5Reader, RemoteHDF5Reader, MemoryReader])
def test_every_backend_reader_subclasses_the_protocol(cls: type[Any]) -> None:
    assert Reader in cls.__mro__  # declared (the protocol's data members rule out issubclass)
    assert "prefetch" in dir(cls) and "prefetches" in dir(cls)


def test_a_local_reader_inherits_the_capability_defaults(tmp_path: Path) -> None:
    path = str(tmp_path / "d.h5")
    chunkio.write_arrays(path, {"x": np.arange(8)}, output=chunkio.Output(format="hdf5"))
    reader = HDF5Reader(path)
    try:
        assert reader.prefetches is False
        assert reader.prefetch("x", [0]) is None  # a hint a local file ignores
    finally:
        reader.close()


def test_a_batch_source_inherits_the_capability_defaults() -> None:
    class Source(BatchSource):
        def batch_fields(self) -> dict[str, Any]:
            return {}

        def read_batch(self, indices: Any, out: Any = None, *, epoch: int = 0) -> dict[str, Any]:
            return {}

        def arrange(self, columns: dict[str, Any]) -> Any:
            return columns

    source = Source()
    assert source.channels_last_fields() == frozenset()
    assert source.prefetch([0, 1]) is None


def _stateful_methods(root: Path) -> dict[str, list[str]]:
    """``Class.method -> its parameters`` of every ``state_dict``/``load_state_dict``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for f in cls.body:
                if isinstance(f, ast.FunctionDef) and f.name in ("state_dict", "load_state_dict"):
                    params = [
                        a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)
                    ]
                    out[f"{cls.name}.{f.name}"] = params
    return out


def test_every_state_dict_follows_one_stateful_protocol() -> None:
    found = _stateful_methods(PACKAGE)
    assert {"ChunkBatchSampler.state_dict", "ChunkLoader.state_dict"} <= set(found)
    bad = {
        name: params
        for name, params in found.items()
        if params != (["self"] if name.endswith(".state_dict") else ["self", "state"])
    }
    assert bad == {}


def test_samplers_are_stateful() -> None:
    assert isinstance(ChunkBatchSampler([4, 4], 2), Stateful)
    for cls in (GridSampler, RandomPatchSampler):
        assert issubclass(cls, Stateful)


def test_a_position_other_than_the_yielded_one_is_a_method_of_its_own() -> None:
    sampler = ChunkBatchSampler([4, 4, 4], 2, seed=1)
    batches = iter(sampler)
    next(batches)
    assert sampler.state_dict()["batches_done"] == 1
    assert sampler.state_at(3)["batches_done"] == 3
    with pytest.warns(DeprecationWarning, match=r"state_dict\(batches_done=\.\.\.\).*state_at"):
        old = sampler.state_dict(batches_done=3)  # type: ignore[call-arg]
    assert old == sampler.state_at(3)
