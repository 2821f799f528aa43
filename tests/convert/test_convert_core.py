"""chunkio.convert: write_arrays / run_conversion, atomic + resumable staging, parallel writers.

Covers RELIABILITY rows 8 (checksums on by default), 10 (SIGKILL then resume), 11 (failure
mid-conversion stays resumable), 12 (two converters, one output), 13 (parallel writers own
whole chunks) and 14 (an unfinished dataset reads as incomplete, never as zeros).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import source_array, zarr_chunk_file
from slow_sources import BadShapeSource, FailingArraySource, SlowOrBadSource, SlowSource

from chunkio import ChunkDataset, Execution, Output
from chunkio.backends import open_reader
from chunkio.convert import (
    DEFAULT_CHUNK_BYTES,
    choose_samples_per_chunk,
    run_conversion,
    write_arrays,
)
from chunkio.convert.array_source import ArraySource
from chunkio.errors import (
    ConversionError,
    DestinationBusyError,
    DestinationExistsError,
    IncompleteDatasetError,
    OptionalDependencyError,
    SourceError,
    UnsafeInputError,
)
from chunkio.format.layout import DatasetLayout

SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}
FORMATS = ["zarr", "hdf5"]


SCRIPT = (
    "from __future__ import annotations\nfrom typing import Any\n\n"
    + inspect.getsource(SlowSource)
    + """
if __name__ == "__main__":
    import json, sys
    from chunkio import Execution, Output
    from chunkio.convert import run_conversion

    dst, delay = sys.argv[1], float(sys.argv[2])
    r = run_conversion(SlowSource(200, delay), dst, output=Output(chunks=5),
                       execution=Execution(progress=False))
    print(json.dumps({"resumed": r.resumed_blocks, "written": r.written_blocks}))
"""
)


def read_all(path: str) -> tuple[DatasetLayout, dict[str, np.ndarray]]:
    """Layout and every dense field of a complete dataset, via the backend reader."""
    reader = open_reader(path)
    try:
        layout = DatasetLayout.from_attrs(reader.attrs(), where=path)
        out = {}
        for f in layout.fields:
            arr = np.empty((layout.num_samples, *(f.sample_shape or ())), f.dtype)
            reader.read_into(f.name, [(0, layout.num_samples)], arr)
            out[f.name] = arr
        return layout, out
    finally:
        reader.close()


def assert_same_dataset(a: str, b: str) -> None:
    la, da = read_all(a)
    lb, db = read_all(b)
    assert la == lb
    assert da.keys() == db.keys()
    for name in da:
        np.testing.assert_array_equal(da[name], db[name])


def arrays(n: int = 100) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 255, size=(n, 3, 5, 5), dtype=np.uint8),
        "label": (np.arange(n) % 7).astype(np.int64),
    }


def staging_of(dst: Path) -> Path:
    return dst.parent / f".{dst.name}.chunkio-staging"


# -- chunk sizing --------------------------------------------------------------------------


def test_choose_samples_per_chunk() -> None:
    assert choose_samples_per_chunk(DEFAULT_CHUNK_BYTES) == 1
    assert choose_samples_per_chunk(1, target_bytes=10, num_samples=3) == 3
    for nbytes in (0, 1, 7, 4096, 10**9):
        for n in (None, 0, 1, 50):
            spc = choose_samples_per_chunk(nbytes, num_samples=n)
            assert spc >= 1 and (n is None or n == 0 or spc <= n)
    with pytest.raises(ValueError):
        choose_samples_per_chunk(-1)


# -- round trips ---------------------------------------------------------------------------


def as_kind(kind: str, data: np.ndarray, tmp_path: Path, name: str) -> Any:
    return source_array(kind, data, tmp_path, name, dask_rows=30)


#: the default suite writes numpy arrays into every format and each other kind of input once
#: (each into another format); the other six pairs run under ``make soak``: how an input is
#: read does not depend on where it is written
ROUND_TRIPS = {
    ("zarr", "numpy"),
    ("hdf5", "numpy"),
    ("memory", "numpy"),
    ("zarr", "dask"),
    ("hdf5", "h5py"),
    ("memory", "zarr"),
}


@pytest.mark.parametrize(
    ("fmt", "kind"),
    [
        pytest.param(
            fmt,
            kind,
            id=f"{fmt}-{kind}",
            marks=() if (fmt, kind) in ROUND_TRIPS else pytest.mark.slow,
        )
        for kind in ("numpy", "dask", "h5py", "zarr")
        for fmt in ("zarr", "hdf5", "memory")
    ],
)
def test_round_trip(fmt: str, kind: str, tmp_path: Path) -> None:
    data = arrays(100)
    inputs = {k: as_kind(kind, v, tmp_path, k) for k, v in data.items()}
    dst = f"memory://rt-{kind}" if fmt == "memory" else str(tmp_path / f"out{SUFFIX[fmt]}")
    result = write_arrays(
        dst, inputs, class_names=["a", "b"], output=Output(chunks=16, extra={"source": kind})
    )
    assert (result.num_samples, result.samples_per_chunk, result.format) == (100, 16, fmt)
    # Shuffled reads of lazy/on-disk arrays touch the whole source per block: blocks of at
    # least SHUFFLED_BLOCK_BYTES, here the whole array.
    assert result.written_blocks == (7 if kind == "numpy" else 1) and result.resumed_blocks == 0
    layout, out = read_all(dst)
    order = {"shuffled": True, "seed": 0}  # write_arrays shuffles by default
    assert layout.class_names == ("a", "b") and layout.extra == {"source": kind, "order": order}
    assert [f.name for f in layout.fields] == ["image", "label", "source_index"]
    np.testing.assert_array_equal(out["source_index"], np.random.default_rng(0).permutation(100))
    for name, value in data.items():
        np.testing.assert_array_equal(out[name], value[out["source_index"]])
    if fmt != "memory":
        assert sorted(os.listdir(tmp_path)) == sorted(
            [Path(dst).name, *(p for p in os.listdir(tmp_path) if p.startswith("in-"))]
        ), "staging and lock are removed"
    if kind == "h5py":
        for v in inputs.values():
            v.file.close()


def test_default_chunking_and_checksums(tmp_path: Path) -> None:
    import h5py

    data = {"v": np.zeros((5000, 100), np.float32)}  # 400 B/sample -> 2621 samples/chunk
    z = write_arrays(tmp_path / "a.zarr", data)
    h = write_arrays(tmp_path / "a.h5", data)
    assert z.samples_per_chunk == h.samples_per_chunk == DEFAULT_CHUNK_BYTES // 400
    meta = json.loads((tmp_path / "a.zarr" / "v" / "zarr.json").read_text())
    assert "crc32c" in [c["name"] for c in meta["codecs"]]
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert f["v"].fletcher32
    _, out = read_all(str(tmp_path / "a.zarr"))  # all-zero chunks are stored, not missing
    assert not out["v"].any()


def test_dask_input_is_computed_block_by_block(
    tmp_path: Path, recorded_dask: tuple[Any, list[int]]
) -> None:
    lazy, seen = recorded_dask
    write_arrays(tmp_path / "d.zarr", {"v": lazy}, shuffle=False, output=Output(chunks=10))
    assert seen and max(seen) <= 10, "never materialised whole"
    assert len(seen) == 10, "each dask chunk computed once"
    np.testing.assert_array_equal(
        read_all(str(tmp_path / "d.zarr"))[1]["v"], np.arange(1000).reshape(100, 10) + 1
    )


def test_hdf5_fewer_samples_than_a_chunk_and_empty(tmp_path: Path) -> None:
    write_arrays(tmp_path / "s.h5", {"v": np.arange(3)}, shuffle=False, output=Output(chunks=8))
    write_arrays(tmp_path / "e.h5", {"v": np.zeros((0, 2))}, output=Output(chunks=8))
    assert read_all(str(tmp_path / "s.h5"))[1]["v"].tolist() == [0, 1, 2]
    assert read_all(str(tmp_path / "e.h5"))[0].num_samples == 0


# -- failures, resume, atomicity -------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_failure_keeps_staging_incomplete_and_resumable(fmt: str, tmp_path: Path) -> None:
    dst = tmp_path / f"r{SUFFIX[fmt]}"
    with pytest.raises(SourceError, match=r"samples 100\.\.104 .*item-102\.bin"):
        run_conversion(
            SlowSource(fail_at=102),
            dst,
            output=Output(chunks=5),
            execution=Execution(progress=False),
        )
    assert not dst.exists(), "the final path appears only when complete"
    reader = open_reader(staging_of(dst) / "data")
    with pytest.raises(IncompleteDatasetError):
        DatasetLayout.from_attrs(reader.attrs(), where="staging", require_complete=True)
    reader.close()
    if fmt == "zarr":  # what a writer killed mid-chunk leaves behind
        chunk = zarr_chunk_file(staging_of(dst) / "data", "x", 0)
        chunk.with_name(chunk.name + ".1234.partial").write_bytes(b"?")
    result = run_conversion(
        SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert (result.resumed_blocks, result.written_blocks) == (20, 20)
    assert not list(dst.rglob("*.partial"))
    run_conversion(
        SlowSource(),
        tmp_path / f"ref{SUFFIX[fmt]}",
        output=Output(chunks=5),
        execution=Execution(progress=False),
    )
    assert_same_dataset(str(dst), str(tmp_path / f"ref{SUFFIX[fmt]}"))


def test_changed_plan_discards_staging(tmp_path: Path) -> None:
    dst = tmp_path / "p.zarr"
    with pytest.raises(SourceError):
        run_conversion(
            SlowSource(fail_at=150),
            dst,
            output=Output(chunks=5),
            execution=Execution(progress=False),
        )
    result = run_conversion(
        SlowSource(), dst, output=Output(chunks=10), execution=Execution(progress=False)
    )
    assert (result.resumed_blocks, result.written_blocks) == (0, 20)
    assert read_all(str(dst))[1]["y"].tolist() == list(range(0, 600, 3))


def test_corrupt_hdf5_block_in_manifest_is_redone(tmp_path: Path) -> None:
    import h5py

    dst = tmp_path / "c.h5"
    with pytest.raises(SourceError):
        run_conversion(
            SlowSource(fail_at=52),
            dst,
            output=Output(chunks=5),
            execution=Execution(progress=False),
        )
    data = staging_of(dst) / "data"
    with h5py.File(data, "r") as f:
        info = f["x"].id.get_chunk_info_by_coord((15, 0, 0))  # chunk 3, in the manifest
    with open(data, "r+b") as fh:
        fh.seek(info.byte_offset + 8)
        byte = fh.read(1)
        fh.seek(info.byte_offset + 8)
        fh.write(bytes([byte[0] ^ 0xFF]))
    result = run_conversion(
        SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert (result.resumed_blocks, result.written_blocks) == (9, 31)
    assert read_all(str(dst))[1]["x"][15:20].ravel().tolist() == list(range(240, 320))


def start_converter(tmp_path: Path, dst: Path, delay: float) -> subprocess.Popen[str]:
    script = tmp_path / "convert_script.py"
    script.write_text(SCRIPT)
    return subprocess.Popen(
        [sys.executable, "-W", "error", str(script), str(dst), str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_manifest(dst: Path, lines: int, proc: subprocess.Popen[str]) -> int:
    manifest = staging_of(dst) / "manifest.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if manifest.exists():
            count = manifest.read_text().count("\n")
            if count >= lines:
                return count
        if proc.poll() is not None:
            raise AssertionError(f"converter exited early: {proc.communicate()}")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no progress from the converter within 60 s")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_then_resume_equals_uninterrupted(fmt: str, tmp_path: Path) -> None:
    dst = tmp_path / f"k{SUFFIX[fmt]}"
    proc = start_converter(tmp_path, dst, delay=0.05)
    done = wait_for_manifest(dst, 5, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not dst.exists()
    assert (tmp_path / f".{dst.name}.chunkio-lock").exists(), "stale lock file: harmless"
    reader = open_reader(staging_of(dst) / "data")
    with pytest.raises(IncompleteDatasetError):
        DatasetLayout.from_attrs(reader.attrs(), where="staging", require_complete=True)
    reader.close()
    result = run_conversion(
        SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert result.resumed_blocks >= done and result.written_blocks > 0
    assert result.resumed_blocks + result.written_blocks == 40
    ref = tmp_path / f"ref{SUFFIX[fmt]}"
    run_conversion(SlowSource(), ref, output=Output(chunks=5), execution=Execution(progress=False))
    assert_same_dataset(str(dst), str(ref))
    assert not staging_of(dst).exists()


@pytest.mark.timeout(120)
def test_second_converter_fails_fast(tmp_path: Path) -> None:
    dst = tmp_path / "race.zarr"
    proc = start_converter(tmp_path, dst, delay=0.05)  # 40 blocks: 2 s at least
    wait_for_manifest(dst, 1, proc)
    with pytest.raises(DestinationBusyError, match=f"pid {proc.pid}"):
        run_conversion(
            SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
        )
    # fast: refused while the first still holds the destination, not after waiting for it
    assert proc.poll() is None
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out) == {"resumed": 0, "written": 40}
    assert read_all(str(dst))[1]["y"].tolist() == list(range(0, 600, 3))


def test_existing_destination(tmp_path: Path) -> None:
    for name in ("e.zarr", "e.h5"):
        dst = tmp_path / name
        write_arrays(dst, {"v": np.arange(10)}, shuffle=False)
        with pytest.raises(DestinationExistsError, match="overwrite=True"):
            write_arrays(dst, {"v": np.arange(20)})
        assert read_all(str(dst))[1]["v"].tolist() == list(range(10)), "old data untouched"
        # an overwrite that fails midway leaves the old data intact
        with pytest.raises(SourceError):
            run_conversion(
                SlowSource(fail_at=100), dst, execution=Execution(overwrite=True, progress=False)
            )
        assert read_all(str(dst))[1]["v"].tolist() == list(range(10))
        write_arrays(dst, {"w": np.arange(20)}, shuffle=False, execution=Execution(overwrite=True))
        layout, out = read_all(str(dst))
        assert layout.field_names == ("w",) and out["w"].tolist() == list(range(20))
    write_arrays("memory://exists", {"v": np.arange(3)})
    with pytest.raises(DestinationExistsError):  # other data (the same: see test_rerun_...)
        write_arrays("memory://exists", {"v": np.arange(4)})
    write_arrays("memory://exists", {"v": np.arange(5)}, execution=Execution(overwrite=True))
    (tmp_path / "notes.zarr").mkdir()
    (tmp_path / "notes.zarr" / "todo.txt").write_text("keep me")
    with pytest.raises(DestinationExistsError, match="refusing"):
        write_arrays(
            tmp_path / "notes.zarr", {"v": np.arange(3)}, execution=Execution(overwrite=True)
        )
    assert (tmp_path / "notes.zarr" / "todo.txt").read_text() == "keep me"


# -- parallel execution ----------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORMATS)
def test_process_pool_matches_in_process(fmt: str, tmp_path: Path) -> None:
    data = arrays(300)
    one, two = tmp_path / f"w1{SUFFIX[fmt]}", tmp_path / f"w2{SUFFIX[fmt]}"
    write_arrays(one, data, output=Output(chunks=7))
    result = write_arrays(two, data, output=Output(chunks=7), execution=Execution(workers=2))
    assert result.written_blocks == 43
    assert_same_dataset(str(one), str(two))


@pytest.mark.timeout(120)
def test_worker_error_is_typed_and_resumable(tmp_path: Path) -> None:
    data = arrays(100)
    dst = tmp_path / "f.zarr"
    with pytest.raises(SourceError, match=r"samples 40\.\.49 \(chunks 4\.\.4\): sample 45"):
        run_conversion(
            FailingArraySource(data),
            dst,
            output=Output(chunks=10),
            execution=Execution(workers=2, progress=False),
        )
    assert not dst.exists()
    result = run_conversion(
        ArraySource(data), dst, output=Output(chunks=10), execution=Execution(progress=False)
    )
    assert result.resumed_blocks >= 4  # blocks 0..3 were submitted before the failing one
    np.testing.assert_array_equal(read_all(str(dst))[1]["image"], data["image"])


@pytest.mark.timeout(120)
def test_dask_distributed_matches_in_process(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    data = arrays(200)
    write_arrays(tmp_path / "ref.zarr", data, output=Output(chunks=9))
    with (
        # one worker process (each imports dask, chunkio and the source afresh), two threads:
        # tasks still travel pickled to another process, and two write at once
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            dashboard_address=":0",
            host="127.0.0.1",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        for name in ("dd.zarr", "dd.h5"):
            write_arrays(
                tmp_path / name, data, output=Output(chunks=9), execution=Execution(client=client)
            )
            assert_same_dataset(str(tmp_path / "ref.zarr"), str(tmp_path / name))


@pytest.mark.timeout(120)
def test_a_failed_dask_run_leaves_no_task_writing(tmp_path: Path) -> None:
    """dask cannot stop a started task: a failed run waits for them, so none of its tasks
    writes into the staging that the next run resets and fills (here: the first run's slow
    chunk 1 would land while the second run waits for its slow chunk 3)."""
    distributed = pytest.importorskip("distributed")
    dst = tmp_path / "d.zarr"
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=4, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        with pytest.raises(SourceError, match="block 0 is bad"):
            run_conversion(
                SlowOrBadSource("A", 1, fail=True, slow=1, slow_s=1.5),
                dst,
                output=Output(chunks=10),
                execution=Execution(client=client, progress=False),
            )
        run_conversion(
            SlowOrBadSource("B", 2, fail=False, slow=3, slow_s=3.0),
            dst,
            output=Output(chunks=10),
            execution=Execution(client=client, progress=False),
        )
    stored = np.asarray(ChunkDataset(dst, fields="x").read_batch(list(range(40)))["x"])
    assert (stored == 2).all(), stored[:, 0]


def test_missing_distributed_is_an_optional_dependency_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(OptionalDependencyError, match="pip install"):
        write_arrays(tmp_path / "x.zarr", {"v": np.arange(4)}, execution=Execution(client=object()))


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ({"../x": np.arange(3)}, UnsafeInputError, "field name"),
        ({"a": np.arange(3), "b": np.arange(4)}, SourceError, r"'a': 3, 'b': 4"),
        ({"s": np.array(5)}, SourceError, "'s': a 0-d array"),
        ({"o": np.array([object()] * 3)}, SourceError, "'o': dtype object"),
        ({"u": np.array(["a", "b"])}, SourceError, "'u': dtype <U1"),
        ({}, SourceError, "at least one field"),
    ],
)
def test_bad_arrays(
    value: dict[str, Any], error: type[Exception], match: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=match):
        write_arrays(tmp_path / "bad.zarr", value)
    assert not list(tmp_path.iterdir()), "nothing written"


def test_bad_source_data_and_options(tmp_path: Path) -> None:
    # the same source with every block well formed converts to exactly what it read
    run_conversion(
        SlowSource(60),
        tmp_path / "a.zarr",
        output=Output(chunks=10),
        execution=Execution(progress=False),
    )
    stored = ChunkDataset(tmp_path / "a.zarr", fields=["x", "y"]).read_batch(np.arange(60))
    for name, want in SlowSource(60).read_block(0, 60).items():
        np.testing.assert_array_equal(stored[name], want)
    with pytest.raises(SourceError, match=r"samples 50\.\.59 .*'x': expected shape"):
        run_conversion(
            BadShapeSource(),
            tmp_path / "b.zarr",
            output=Output(chunks=10),
            execution=Execution(progress=False),
        )
    with pytest.raises(ValueError, match="chunks must be an int >= 1; got 0"):
        write_arrays(tmp_path / "c.zarr", {"v": np.arange(3)}, output=Output(chunks=0))
    with pytest.raises(ValueError, match="workers"):
        write_arrays(tmp_path / "c.zarr", {"v": np.arange(3)}, execution=Execution(workers=0))
    with pytest.raises(ValueError, match="codec"):
        write_arrays(tmp_path / "c.zarr", {"v": np.arange(3)}, output=Output(compression="brotli"))
    with pytest.raises(ConversionError, match="local path"):
        write_arrays("s3://bucket/x.h5", {"v": np.arange(3)}, output=Output(format="hdf5"))
