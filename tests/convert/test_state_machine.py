"""A state machine over convert / append / interrupted convert + resume / read (RELIABILITY 24).

Hypothesis drives random sequences of operations on one on-disk dataset per backend and
checks, after every step, that what a fresh ``ChunkDataset`` reads equals a NumPy model; plus
direct tests of ``append_arrays``' atomicity (failure midway, leftovers of a killed append).
The model follows the write-time shuffle: a shuffled conversion stores ``data[perm]`` and
``source_index = perm``; an append into it stores ``new[perm_k]`` and ``n + perm_k``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from conftest import zarr_chunk_file
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chunkio import ChunkDataset, Execution, Output, append_arrays, write_arrays
from chunkio.backends.hdf5.write import HDF5Writer
from chunkio.backends.zarr.backend import ZarrWriter
from chunkio.convert import run_conversion
from chunkio.convert.array_source import ArraySource
from chunkio.errors import ConversionError, SourceError

SAMPLE = (2, 3)


def perm(n: int, seed: int = 0) -> np.ndarray:
    """The documented stored order of a shuffled write."""
    return np.random.default_rng(seed).permutation(n)


def make_arrays(seed: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.integers(0, 255, size=(n, *SAMPLE), dtype=np.uint8),
        "y": rng.integers(-1000, 1000, size=n).astype(np.int32),
    }


class FailingSource(ArraySource):
    """The same samples (and fingerprint) as ArraySource, but failing from sample ``fail_at``."""

    def __init__(self, arrays: dict[str, np.ndarray], fail_at: int) -> None:
        super().__init__(arrays)
        self.fail_at = fail_at

    def read_block(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if stop > self.fail_at:
            raise SourceError(f"sample {self.fail_at}: injected failure")
        return super().read_block(start, stop)


class DatasetMachine(RuleBasedStateMachine):
    fmt = "zarr"

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="chunkio-sm-")
        self.path = os.path.join(self.root, "d.zarr" if self.fmt == "zarr" else "d.h5")
        self.model: dict[str, np.ndarray] = {}
        self.spc = 1

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _convert(self, seed: int, n: int, spc: int, shuffle: bool) -> None:
        data = make_arrays(seed, n)
        write_arrays(
            self.path,
            data,
            shuffle=shuffle,
            output=Output(chunks=spc),
            execution=Execution(overwrite=True),
        )
        if shuffle:
            order = perm(n)
            data = {**{f: v[order] for f, v in data.items()}, "source_index": order}
        self.model, self.spc = data, spc

    @initialize(
        seed=st.integers(0, 2**16),
        n=st.integers(0, 25),
        spc=st.integers(1, 7),
        shuffle=st.booleans(),
    )
    def convert_first(self, seed: int, n: int, spc: int, shuffle: bool) -> None:
        self._convert(seed, n, spc, shuffle)

    @rule(
        seed=st.integers(0, 2**16),
        n=st.integers(0, 25),
        spc=st.integers(1, 7),
        shuffle=st.booleans(),
    )
    def convert_over(self, seed: int, n: int, spc: int, shuffle: bool) -> None:
        self._convert(seed, n, spc, shuffle)

    @rule(
        seed=st.integers(0, 2**16),
        k=st.integers(0, 12),
        shuffle=st.sampled_from([None, False]),
        order_seed=st.integers(0, 3),
    )
    def append(self, seed: int, k: int, shuffle: bool | None, order_seed: int) -> None:
        new = make_arrays(seed, k)
        result = append_arrays(self.path, new, shuffle=shuffle, seed=order_seed)
        n = len(self.model["y"])
        if "source_index" in self.model:  # shuffled by default, source_index continues
            order = perm(k, order_seed) if shuffle is None else np.arange(k)
            new = {**{f: v[order] for f, v in new.items()}, "source_index": n + order}
        self.model = {f: np.concatenate([self.model[f], new[f]]) for f in new}
        assert result.num_samples == len(self.model["y"])

    @rule(
        seed=st.integers(0, 2**16),
        n=st.integers(2, 25),
        spc=st.integers(1, 7),
        cut=st.floats(0.0, 0.99),
    )
    def interrupted_convert_then_resume(self, seed: int, n: int, spc: int, cut: float) -> None:
        data = make_arrays(seed, n)
        fail_at = int(cut * n)
        with pytest.raises(SourceError, match="injected failure"):
            run_conversion(
                FailingSource(data, fail_at),
                self.path,
                output=Output(chunks=spc),
                execution=Execution(overwrite=True, progress=False),
            )
        self._check_model(staging_allowed=True)  # the old dataset is untouched
        result = run_conversion(
            ArraySource(data),
            self.path,
            output=Output(chunks=spc),
            execution=Execution(overwrite=True, progress=False),
        )
        assert result.resumed_blocks == fail_at // spc  # whole chunks before the failure
        self.model, self.spc = data, spc

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        n = len(self.model["y"])
        if n == 0:
            return
        indices = data.draw(st.lists(st.integers(-n, n - 1), max_size=12), label="indices")
        got = ChunkDataset(self.path, preload_bytes=0).read_batch(indices)
        for name, values in self.model.items():
            np.testing.assert_array_equal(got[name], values[indices])

    @invariant()
    def check_store_equals_model(self) -> None:
        self._check_model(staging_allowed=False)

    def _check_model(self, *, staging_allowed: bool) -> None:
        if not self.model:
            return
        ds = ChunkDataset(self.path, preload_bytes=0)
        assert len(ds) == len(self.model["y"]) and ds.samples_per_chunk == self.spc
        got = ds.read_batch(np.arange(len(ds)))
        for name, values in self.model.items():
            assert got[name].dtype == values.dtype
            np.testing.assert_array_equal(got[name], values)
        leftovers = [p for p in os.listdir(self.root) if p.startswith(".")]
        assert staging_allowed or not leftovers, f"staging or lock files left behind: {leftovers}"


#: the default suite's runs: each example converts and appends several times, so a few; the
#: ``slow`` classes below run many more of the same machines (``make soak``)
SETTINGS = settings(
    max_examples=6,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LONG = settings(SETTINGS, max_examples=40)


class ZarrMachine(DatasetMachine):
    fmt = "zarr"


class HDF5Machine(DatasetMachine):
    fmt = "hdf5"


TestZarrStateMachine = ZarrMachine.TestCase
TestZarrStateMachine.settings = SETTINGS
TestHDF5StateMachine = HDF5Machine.TestCase
TestHDF5StateMachine.settings = SETTINGS


@pytest.mark.slow
class TestZarrStateMachineLong(ZarrMachine.TestCase):
    settings = LONG


@pytest.mark.slow
class TestHDF5StateMachineLong(HDF5Machine.TestCase):
    settings = LONG


# -- append_arrays: atomicity and input checks -------------------------------------------------


def digest(path: Path) -> str:
    """sha256 over every file (name and bytes) under ``path``, or of the file itself."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        h.update(str(p.relative_to(path.parent)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_failed_append_leaves_the_dataset_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    path = tmp_path / ("d.zarr" if fmt == "zarr" else "d.h5")
    old = make_arrays(0, 23)
    write_arrays(path, old, output=Output(chunks=5))  # shuffled: x, y and source_index
    before = digest(path)
    reader = ChunkDataset(path, preload_bytes=0)  # a reader already open keeps working
    reader.read_batch([0])
    calls = {"n": 0}
    cls: Any = ZarrWriter if fmt == "zarr" else HDF5Writer
    original = cls.write_block

    def write_block(self: Any, name: str, start: int, data: np.ndarray) -> None:
        calls["n"] += 1
        if calls["n"] == 4:  # after the rewritten partial chunk, mid-way through new chunks
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        original(self, name, start, data)

    monkeypatch.setattr(cls, "write_block", write_block)
    with pytest.raises(ConversionError, match=r"d\.(zarr|h5).*No space left.*unchanged"):
        append_arrays(path, make_arrays(1, 40))
    assert digest(path) == before
    assert sorted(os.listdir(tmp_path)) == [path.name], "no staging or lock left"
    np.testing.assert_array_equal(reader.read_batch(range(23))["x"], old["x"][perm(23)])
    monkeypatch.setattr(cls, "write_block", original)
    append_arrays(path, make_arrays(1, 40))
    got = ChunkDataset(path, preload_bytes=0).read_batch(range(63))
    both = np.concatenate([old["y"], make_arrays(1, 40)["y"]])
    np.testing.assert_array_equal(got["source_index"], np.r_[perm(23), 23 + perm(40)])
    np.testing.assert_array_equal(got["y"], both[got["source_index"]])


def test_leftovers_of_a_killed_append_are_discarded_or_restored(tmp_path: Path) -> None:
    path = tmp_path / "d.zarr"
    old = make_arrays(0, 12)
    write_arrays(path, old, output=Output(chunks=5))
    staging = tmp_path / ".d.zarr.chunkio-append"
    # Killed while building the copy: a half-built copy that was never published.
    (staging / "data" / "x").mkdir(parents=True)
    (staging / "data" / "x" / "junk").write_bytes(b"\0")
    append_arrays(path, make_arrays(1, 3))
    assert not staging.exists()
    assert len(ChunkDataset(path)) == 15
    # Killed between the two renames of a publish without renameat2: the old version is
    # put back first, so rerunning that append applies it once.
    staging.mkdir()
    path.rename(staging / "replaced")
    append_arrays(path, make_arrays(2, 4))
    assert len(ChunkDataset(path)) == 19


def test_append_rejects_mismatched_samples(tmp_path: Path) -> None:
    path = tmp_path / "d.h5"
    write_arrays(path, make_arrays(0, 6), output=Output(chunks=4))
    before = digest(path)
    good = make_arrays(1, 2)
    bad_inputs = [
        ({"x": good["x"]}, "exactly the fields"),
        ({**good, "z": good["y"]}, "exactly the fields"),
        ({**good, "x": np.zeros((2, 3, 2), np.uint8)}, r"shape \(2, 3\)"),
        ({**good, "y": good["y"].astype(np.float64)}, "without loss"),
        ({**good, "y": good["y"][:1]}, "same number of samples"),
    ]
    for arrays, match in bad_inputs:
        with pytest.raises(SourceError, match=match):
            append_arrays(path, arrays)
    assert digest(path) == before
    with pytest.raises(ConversionError, match="local"):
        append_arrays("memory://nowhere", good)


@pytest.mark.timeout(120)
def test_append_takes_the_converters_execution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers read the new samples (here a pool, forced), a bar counts the blocks; the
    dataset is the one an append in this process writes. No overwrite: refused."""
    from chunkio.convert.engine import workers as pool_policy

    here, pooled = tmp_path / "here.zarr", tmp_path / "pooled.zarr"
    for path in (here, pooled):
        write_arrays(path, make_arrays(0, 6), output=Output(chunks=4))
    new = make_arrays(1, 30)
    append_arrays(here, new, execution=Execution(workers=1, progress=False))
    monkeypatch.setattr(pool_policy, "POOL_MIN_SECONDS", 0.0)
    append_arrays(pooled, new, execution=Execution(workers=2, progress=True))
    assert "append" in capsys.readouterr().err
    a = ChunkDataset(here, fields=("x", "y")).read_batch(range(36))
    b = ChunkDataset(pooled, fields=("x", "y")).read_batch(range(36))
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    before = digest(here)
    with pytest.raises(ValueError, match="never replaces"):
        append_arrays(here, new, execution=Execution(overwrite=True))
    assert digest(here) == before


def test_append_without_renameat2_swaps_with_two_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chunkio.convert.durability import staging as publish_module

    monkeypatch.setattr(publish_module, "_exchange", lambda a, b: False)
    path = tmp_path / "d.zarr"
    old = make_arrays(0, 7)
    write_arrays(path, old, shuffle=False, output=Output(chunks=3))  # about the swap, not order
    append_arrays(path, make_arrays(1, 5))
    got = ChunkDataset(path, preload_bytes=0).read_batch(range(12))
    np.testing.assert_array_equal(got["x"], np.concatenate([old["x"], make_arrays(1, 5)["x"]]))
    assert sorted(os.listdir(tmp_path)) == ["d.zarr"]


def test_append_never_shares_the_chunk_it_rewrites(tmp_path):
    """The staging copy hard-links published chunks except the partial last one it rewrites."""
    import os

    from chunkio.backends import storage_for

    src = str(tmp_path / "d.zarr")
    write_arrays(
        src,
        {"x": np.arange(10, dtype=np.int64)},
        output=Output(chunks=4),
        execution=Execution(progress=False),
    )
    dst = str(tmp_path / "copy")
    storage_for("zarr").copy_for_growth(src, dst, ["x"], 10, 13)
    links = {c: os.stat(zarr_chunk_file(dst, "x", c)).st_nlink for c in range(3)}
    assert links == {0: 2, 1: 2, 2: 1}  # chunk 2 (samples 8..9) is partial: copied


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_identical_appends_give_identical_bytes(tmp_path: Path, suffix: str) -> None:
    """An append is sealed like a conversion (HDF5: chunks rewritten in sorted order), so two
    identical histories give the same bytes."""
    digests = []
    for run in ("a", "b"):
        path = tmp_path / run / f"d{suffix}"
        write_arrays(
            path, make_arrays(0, 7), output=Output(chunks=3), execution=Execution(progress=False)
        )
        append_arrays(path, make_arrays(1, 5))
        append_arrays(path, make_arrays(2, 4))
        digests.append(digest(path))  # names relative to the run folder
        assert sorted(os.listdir(path.parent)) == [path.name]  # no staging left behind
    assert digests[0] == digests[1]
