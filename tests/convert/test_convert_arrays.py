"""``convert_arrays`` / ``chunkio convert arrays``: existing HDF5 files and Zarr stores rewritten
as chunkio datasets, streamed, with the external write-time shuffle
(:mod:`chunkio.convert.shuffle.spill`).

Stores are made by h5py and zarr-python (``tests/support/foreign_stores.py``). Block sizes are
shrunk so that a 300-sample store makes many blocks and many spill files. Covers RELIABILITY
row 10 (SIGKILL during conversion, then resume) in both passes of the shuffle.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import h5py
import killed_converter
import numpy as np
import pytest
from foreign_stores import STORES, data, fields_of, h5py_file, snapshot, zarr_v3_sharded
from killed_converter import manifest_lines

from chunkio import ChunkDataset, Execution, Output, convert_arrays
from chunkio.convert import arrays
from chunkio.convert.engine import workers as pool_policy
from chunkio.convert.shuffle import spill
from chunkio.convert.shuffle.order import permutation
from chunkio.convert.shuffle.spill import SpilledSource
from chunkio.convert.store_source import StoreSource
from chunkio.diagnose.cli import main
from chunkio.errors import (
    ConversionError,
    DestinationExistsError,
    FormatError,
    MissingFieldError,
    SourceError,
)
from chunkio.testing.servers import http_server_factory_fixture  # noqa: F401 (a fixture)

SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}
#: 300 samples of 200 bytes: blocks of 2 chunks of 7, source blocks of 2 chunks (h5py: 32)
SMALL = {"STORE_BLOCK_BYTES": 2 * 7 * 200, "STORE_READ_BYTES": 40 * 200}


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SMALL.items():
        monkeypatch.setattr(arrays, name, value)


def read_all(path: Path) -> dict[str, np.ndarray]:
    ds = ChunkDataset(path)
    out = ds.read_batch(np.arange(len(ds)))
    ds.close()
    return out


def staging_of(dst: Path) -> Path:
    return dst.parent / f".{dst.name}.chunkio-staging"


def assert_equals_source(dst: Path, *, shuffled: bool, seed: int = 0) -> None:
    images, labels = data()
    got = read_all(dst)
    if shuffled:
        np.testing.assert_array_equal(got["source_index"], permutation(len(labels), seed))
        idx = got["source_index"]
    else:
        assert "source_index" not in got
        idx = np.arange(len(labels))
    np.testing.assert_array_equal(got["image"], images[idx])
    np.testing.assert_array_equal(got["label"], labels[idx])


#: the default suite converts each source store once and writes each (format, shuffle) pair at
#: least once; the rest of the 24 combinations run under ``make soak`` (the source is read
#: the same way whatever is written, and the writing does not depend on the source's kind)
ROUND_TRIPS = {
    ("h5py", "zarr", True),
    ("zarr v2", "hdf5", False),
    ("zarr v3 sharded", "hdf5", True),
    ("zarr v3", "zarr", False),
    ("zarr v2 consolidated", "zarr", True),
    ("zarr v3 consolidated", "hdf5", True),
}


def _round_trips() -> list[Any]:
    return [
        pytest.param(
            store,
            fmt,
            shuffle,
            id=f"{store}-{fmt}-{'shuffled' if shuffle else 'in-order'}",
            marks=() if (store, fmt, shuffle) in ROUND_TRIPS else pytest.mark.slow,
        )
        for store in STORES
        for fmt in ("zarr", "hdf5")
        for shuffle in (True, False)
    ]


@pytest.mark.parametrize(("store", "fmt", "shuffle"), _round_trips())
def test_round_trip_equals_the_source(store: str, fmt: str, shuffle: bool, tmp_path: Path) -> None:
    src = STORES[store](tmp_path)
    before = snapshot(src)
    dst = tmp_path / f"out{SUFFIX[fmt]}"
    result = convert_arrays(
        src, dst, fields=fields_of(store), shuffle=shuffle, seed=4, output=Output(chunks=7)
    )
    assert result.written_blocks == 22 and result.num_samples == 300
    assert_equals_source(dst, shuffled=shuffle, seed=4)
    assert snapshot(src) == before, "the source is never written"
    assert not staging_of(dst).exists(), "the staging (and the spill in it) is removed"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, dst.name])


def test_the_shuffle_reads_each_source_block_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pass 1 reads the source in order, each sample once; pass 2 reads only the spill."""
    calls: list[tuple[int, int]] = []
    real = StoreSource.read_block

    def counted(self: StoreSource, start: int, stop: int) -> Any:
        calls.append((start, stop))
        return real(self, start, stop)

    def random_access(self: StoreSource, indices: Any) -> Any:
        raise AssertionError("rows read out of order")

    monkeypatch.setattr(StoreSource, "read_block", counted)
    monkeypatch.setattr(StoreSource, "read_rows", random_access)
    src = h5py_file(tmp_path)
    convert_arrays(src, tmp_path / "o.zarr", fields=fields_of("h5py"), output=Output(chunks=7))
    # source blocks of 2 chunks of 32 rows (the images' gzip chunks): aligned, so each
    # compressed chunk is decoded once
    assert calls == [(a, min(a + 64, 300)) for a in range(0, 300, 64)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_workers_give_the_same_dataset(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_policy, "POOL_MIN_SECONDS", 0.0)  # a pool even for 300 samples
    src = zarr_v3_sharded(tmp_path)
    one, two = tmp_path / f"one{SUFFIX[fmt]}", tmp_path / f"two{SUFFIX[fmt]}"
    for dst, workers in ((one, 1), (two, 2)):
        convert_arrays(
            src,
            dst,
            fields=fields_of("zarr v3 sharded"),
            seed=1,
            output=Output(chunks=7),
            execution=Execution(workers=workers),
        )
    assert_equals_source(two, shuffled=True, seed=1)
    a, b = read_all(one), read_all(two)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    if fmt == "hdf5":  # canonical HDF5: equal content, equal bytes
        assert one.read_bytes() == two.read_bytes()


def test_an_unstaged_destination_keeps_its_spill_for_the_rerun_then_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A destination written in place (memory://, URLs) spills to the temporary directory,
    under a name the rerun finds: a failed pass 2 leaves one spill, the rerun reuses it (the
    source is not read again) and removes it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    src, fields = h5py_file(tmp_path), fields_of("h5py")
    real = SpilledSource.read_block

    def fail(self: SpilledSource, start: int, stop: int) -> Any:
        raise OSError("disk gone")

    monkeypatch.setattr(SpilledSource, "read_block", fail)
    with pytest.raises(ConversionError, match="disk gone"):
        convert_arrays(src, "memory://unstaged", fields=fields, output=Output(chunks=7))
    (left,) = (tmp_path / "tmp").iterdir()
    assert left.name.startswith("chunkio-spill-") and len(list(left.glob("*.rows"))) == 5
    monkeypatch.setattr(SpilledSource, "read_block", real)
    monkeypatch.setattr(StoreSource, "read_block", None)  # pass 1 must not run again
    convert_arrays(
        src,
        "memory://unstaged",
        fields=fields,
        output=Output(chunks=7),
        execution=Execution(overwrite=True),
    )
    assert list((tmp_path / "tmp").iterdir()) == []
    assert_equals_source("memory://unstaged", shuffled=True, seed=0)


def test_a_rerun_names_the_source_any_way_it_likes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative, absolute or through a symlink: the same source, the same conversion."""
    src, dst = h5py_file(tmp_path), tmp_path / "o.zarr"
    (tmp_path / "link.h5").symlink_to(src)
    monkeypatch.chdir(tmp_path)
    convert_arrays(src.name, dst, fields=fields_of("h5py"), output=Output(chunks=7))
    for again in (src, tmp_path / "link.h5"):
        assert convert_arrays(
            again, dst, fields=fields_of("h5py"), output=Output(chunks=7)
        ).unchanged


def test_a_rerun_is_unchanged_and_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = h5py_file(tmp_path), tmp_path / "o.zarr"
    convert_arrays(src, dst, fields=fields_of("h5py"), output=Output(chunks=7))
    monkeypatch.setattr(StoreSource, "read_block", None)  # a read would fail
    again = convert_arrays(src, dst, fields=fields_of("h5py"), output=Output(chunks=7))
    assert again.unchanged and again.written_blocks == 0
    with pytest.raises(DestinationExistsError, match="option seed was 0, now 1"):
        convert_arrays(src, dst, fields=fields_of("h5py"), seed=1, output=Output(chunks=7))


# -- kill and resume --------------------------------------------------------------------------

SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[3])
from chunkio import Execution, Output, convert_arrays
from chunkio.convert import arrays
from chunkio.convert.shuffle.spill import SpilledSource
from chunkio.convert.store_source import StoreSource

arrays.STORE_BLOCK_BYTES, arrays.STORE_READ_BYTES = {block}, {read}
slowed = SpilledSource if sys.argv[4] == "gather" else StoreSource
real = slowed.read_block


def slow(self, start, stop):
    time.sleep(0.15)
    return real(self, start, stop)


slowed.read_block = slow
convert_arrays(sys.argv[1], sys.argv[2], fields={{"image": "train/images",
               "label": "train/labels"}}, seed=3, output=Output(chunks=7),
               execution=Execution(workers=1))
""".format(block=SMALL["STORE_BLOCK_BYTES"], read=SMALL["STORE_READ_BYTES"])


def run_and_kill(tmp_path: Path, src: Path, dst: Path, slow_pass: str) -> None:
    """Run a conversion in a process; SIGKILL it in the middle of ``slow_pass``."""
    spilled = staging_of(dst) / "spill"

    def ready() -> bool:
        if slow_pass == "spill":
            return spilled.is_dir() and len(list(spilled.glob("*.rows"))) >= 2
        return manifest_lines(dst) >= 4

    support = str(Path(__file__).parents[1] / "support")
    args = [str(src), str(dst), support, slow_pass]
    killed_converter.run_and_kill(SCRIPT, args, dst, tmp_path, ready)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("fmt", "slow_pass"),
    # each pass killed and each format resumed by default (a killed converter process costs
    # seconds); the other two pairs under slow
    [
        pytest.param("zarr", "spill", marks=pytest.mark.slow),
        ("zarr", "gather"),
        ("hdf5", "spill"),
        pytest.param("hdf5", "gather", marks=pytest.mark.slow),
    ],
    ids=["zarr-spill", "zarr-gather", "hdf5-spill", "hdf5-gather"],
)
def test_killed_then_rerun_equals_uninterrupted(
    fmt: str, slow_pass: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = h5py_file(tmp_path)
    before = snapshot(src)
    dst = tmp_path / f"k{SUFFIX[fmt]}"
    run_and_kill(tmp_path, src, dst, slow_pass)
    spilled = sorted(p.name for p in (staging_of(dst) / "spill").glob("*.rows"))
    assert spilled, "the spill is in the destination's staging, never beside the source"
    reads: list[int] = []
    real = StoreSource.read_block

    def counted(self: StoreSource, start: int, stop: int) -> Any:
        reads.append(start)
        return real(self, start, stop)

    monkeypatch.setattr(StoreSource, "read_block", counted)
    fields = fields_of("h5py")
    result = convert_arrays(src, dst, fields=fields, seed=3, output=Output(chunks=7))
    assert len(reads) == 5 - len(spilled), "spill files of the killed run are kept"
    if slow_pass == "gather":
        assert result.resumed_blocks >= 4, "blocks of the killed run are kept"
    assert result.resumed_blocks + result.written_blocks == 22
    ref = tmp_path / f"ref{SUFFIX[fmt]}"
    convert_arrays(src, ref, fields=fields, seed=3, output=Output(chunks=7))
    got, want = read_all(dst), read_all(ref)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    if fmt == "hdf5":
        assert dst.read_bytes() == ref.read_bytes()
    assert not staging_of(dst).exists()
    assert snapshot(src) == before
    again = convert_arrays(src, dst, fields=fields, seed=3, output=Output(chunks=7))
    assert again.unchanged


def test_the_external_shuffle_needs_a_seed(tmp_path: Path) -> None:
    """``seed=None`` is the identity order to ShuffledSource; spilled as a seed-0 permutation
    it would disagree with the recorded order, so it is refused."""
    source = StoreSource(h5py_file(tmp_path), fields_of("h5py"))
    sizes = {"read_samples": 64, "spill_samples": 14}
    with pytest.raises(TypeError, match="int seed"):
        spill.ExternalShuffle(source, None, **sizes)  # type: ignore[arg-type]
    assert spill.ExternalShuffle(source, 3, **sizes).spill_plan().seed == 3


def test_a_spill_of_another_plan_is_discarded(tmp_path: Path) -> None:
    """A staged spill whose record differs (other block sizes) is not reused."""
    src, dst = h5py_file(tmp_path), tmp_path / "o.zarr"
    folder = tmp_path / "spill"
    folder.mkdir()
    (folder / "spill.json").write_text('{"num_samples": 1}')
    (folder / "0.rows").write_bytes(b"junk")
    plan = spill.SpillPlan(300, 0, (0, 150, 300), 14, (192, 8))
    spill._open_spill(str(folder), plan)
    assert sorted(p.name for p in folder.iterdir()) == ["spill.json"]
    convert_arrays(src, dst, fields=fields_of("h5py"), output=Output(chunks=7))
    assert_equals_source(dst, shuffled=True)


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_is_a_typed_error_naming_the_store(tmp_path: Path) -> None:
    src = h5py_file(tmp_path)
    before = snapshot(src)
    dst = tmp_path / "o.zarr"
    with pytest.raises(MissingFieldError, match=r"user\.h5: no array 'train/nope'.*train/images"):
        convert_arrays(src, dst, fields={"image": "train/images", "label": "train/nope"})
    with h5py.File(tmp_path / "uneven.h5", "w") as f:
        f["a"], f["b"] = np.zeros((10, 2)), np.zeros(9)
    with pytest.raises(FormatError, match=r"uneven\.h5.*same length.*'a': 10, 'b': 9"):
        convert_arrays(tmp_path / "uneven.h5", dst, fields=["a", "b"])
    with pytest.raises(SourceError, match="is the source itself"):
        convert_arrays(src, src, fields=fields_of("h5py"))
    inside = zarr_v3_sharded(tmp_path)
    with pytest.raises(SourceError, match="inside the source"):
        convert_arrays(inside, inside / "out.zarr", fields=fields_of("zarr v3 sharded"))
    (tmp_path / "taken.zarr").mkdir()
    (tmp_path / "taken.zarr" / "notes.txt").write_text("mine")
    with pytest.raises(DestinationExistsError, match=r"taken\.zarr"):
        convert_arrays(src, tmp_path / "taken.zarr", fields=fields_of("h5py"))
    assert (tmp_path / "taken.zarr" / "notes.txt").read_text() == "mine"
    assert snapshot(src) == before
    assert not (tmp_path / "o.zarr").exists() and not staging_of(dst).exists()


def test_an_existing_destination_needs_overwrite(tmp_path: Path) -> None:
    src, dst = h5py_file(tmp_path), tmp_path / "o.h5"
    convert_arrays(src, dst, fields=fields_of("h5py"), shuffle=False)
    with pytest.raises(
        DestinationExistsError, match=r"pass execution=chunkio\.Execution\(overwrite=True\)"
    ):
        convert_arrays(src, dst, fields=fields_of("h5py"))
    convert_arrays(src, dst, fields=fields_of("h5py"), execution=Execution(overwrite=True))
    assert_equals_source(dst, shuffled=True)


# -- the command ------------------------------------------------------------------------------


def test_the_cli_converts_reruns_and_reports_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = h5py_file(tmp_path), tmp_path / "o.zarr"
    args = ["convert", "arrays", str(src), str(dst), "--fields", "image=train/images",
            "label=train/labels", "--samples-per-chunk", "7", "--compression", "zstd",
            "--seed", "2", "--workers", "1", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    assert f"wrote 300 samples to {dst}" in capsys.readouterr().out
    assert_equals_source(dst, shuffled=True, seed=2)
    assert main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    plain = tmp_path / "plain.h5"
    words = ["--fields", "train/images", "train/labels", "--no-shuffle", "--format", "hdf5"]
    assert main(["convert", "arrays", str(src), str(plain), *words, "--no-progress"]) == 0
    assert list(read_all(plain)) == ["images", "labels"]
    assert main(["convert", "arrays", str(src), str(tmp_path / "x.zarr"), "--fields",
                 "image=train/images", "train/labels"]) == 2  # fmt: skip
    assert "NAME=PATH" in capsys.readouterr().err
    assert main(["convert", "arrays", str(src), str(src), "--fields", "train/images"]) == 2
    assert "is the source itself" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_remote_store_converts_like_a_local_one(http_server_factory: Any, tmp_path: Path) -> None:
    from chunkio.testing.servers import HTTPServer

    src = zarr_v3_sharded(tmp_path)
    server: HTTPServer = http_server_factory(tmp_path)
    dst = tmp_path / "from_http.zarr"
    convert_arrays(
        f"{server.url}/{src.name}",
        dst,
        fields=fields_of("zarr v3 sharded"),
        output=Output(chunks=7),
    )
    assert_equals_source(dst, shuffled=True)
