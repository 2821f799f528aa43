"""Idempotent reruns, byte-identical HDF5, and small things a new user hit.

1. Rerunning a finished conversion returns ``unchanged`` without reading or writing; any
   other source or option is refused, naming the difference.
2. HDF5 output is byte-identical across identical runs, worker counts and kill-and-resume.
3. Default-collate DataLoaders, codec names in ``info``, refused unknown suffixes, the
   ``pin_memory`` warning, packaging metadata and README links.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
import zarr
from PIL import Image
from test_convert_core import SlowSource, staging_of, start_converter, wait_for_manifest
from torch.utils.data import DataLoader

from chunkio import (
    ChunkDataset,
    Execution,
    ImageOptions,
    Output,
    Workers,
    append_arrays,
    collate,
    make_loader,
    write_arrays,
)
from chunkio.backends import UnknownFormatError, detect_format
from chunkio.convert import images as images_mod
from chunkio.convert import pipeline, run_conversion
from chunkio.convert.array_source import ArraySource
from chunkio.convert.images import convert_images
from chunkio.convert.volumes import convert_volumes
from chunkio.diagnose.dataset_report import info
from chunkio.diagnose.info_text import format_info
from chunkio.errors import DatasetNotFoundError, DestinationExistsError, FormatError
from converters import imagefolder

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}
_ids = itertools.count()


def arrays(n: int = 60, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 255, size=(n, 3, 4, 4), dtype=np.uint8),
        "label": (np.arange(n) % 5).astype(np.int64),
    }


def image_folder(root: Path, sizes: list[tuple[int, int]]) -> Path:
    rng = np.random.default_rng(0)
    for i, hw in enumerate(sizes):
        path = root / "ab"[i % 2] / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8)).save(path)
    return root


def location(fmt: str, tmp_path: Path, name: str = "d") -> str:
    if fmt == "memory":
        return f"memory://rerun-{next(_ids)}"
    return str(tmp_path / f"{name}{SUFFIX[fmt]}")


def forbid(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> None:
    """Make ``target.name`` fail the test if called."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{name} was called on a rerun")

    monkeypatch.setattr(target, name, fail)


def snapshot(path: str) -> dict[str, tuple[int, int]]:
    """Every file under ``path`` with its size and mtime."""
    if os.path.isfile(path):
        st = os.stat(path)
        return {path: (st.st_size, st.st_mtime_ns)}
    out = {}
    for folder, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(folder, f))
            out[os.path.join(folder, f)] = (st.st_size, st.st_mtime_ns)
    return out


# -- 1. idempotent reruns ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "memory"])
def test_rerun_of_write_arrays_returns_unchanged(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = location(fmt, tmp_path)
    first = write_arrays(dst, arrays(), output=Output(chunks=8))
    assert not first.unchanged and first.written_blocks == 8
    before = None if fmt == "memory" else snapshot(dst)
    forbid(monkeypatch, pipeline, "open_destination")  # nothing is opened for writing
    forbid(monkeypatch, ArraySource, "read_block")
    forbid(monkeypatch, ArraySource, "read_rows")
    again = write_arrays(dst, arrays(), output=Output(chunks=8))
    assert again.unchanged and (again.written_blocks, again.resumed_blocks) == (0, 8)
    for name in ("path", "format", "num_samples", "samples_per_chunk", "fields"):
        assert getattr(again, name) == getattr(first, name), name
    if before is not None:
        assert snapshot(dst) == before, "not a byte rewritten"


#: the options of Output among a test's changes (the others are write_arrays' own keywords)
OUTPUT_FIELDS = ("chunks", "compression", "checksum", "extra", "format")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chunks": 10}, "option samples_per_chunk was 8, now 10"),
        ({"seed": 3}, "option seed was 0, now 3"),
        ({"shuffle": False}, "option shuffle was true, now false"),
        ({"compression": "zstd"}, r'option compression was \{.*"lz4".*now \{.*"zstd"'),
        ({"checksum": False}, r'option compression was \{.*"checksum": true\}, now \{.*false'),
        ({"class_names": ["a"]}, r'option class_names was null, now \["a"\]'),
        ({"extra": {"k": 1}}, r'option extra was \{\}, now \{"k": 1\}'),
        ({"data_seed": 1}, "the source arrays changed"),
        ({"format": "zarr"}, 'option format was "hdf5", now "zarr"'),
    ],
)
def test_rerun_with_other_sources_or_options_is_refused(
    change: dict[str, Any], message: str, tmp_path: Path
) -> None:
    dst = str(tmp_path / "d.h5")
    write_arrays(dst, arrays(), output=Output(chunks=8))
    before = snapshot(dst)
    output = {"chunks": 8, **{k: v for k, v in change.items() if k in OUTPUT_FIELDS}}
    kw: dict[str, Any] = {k: v for k, v in change.items() if k not in OUTPUT_FIELDS}
    kw["output"] = Output(**output)
    data = arrays(seed=kw.pop("data_seed", 0))
    with pytest.raises(DestinationExistsError, match=message) as err:
        write_arrays(dst, data, **kw)
    assert "overwrite=True" in str(err.value)
    assert snapshot(dst) == before
    replaced = write_arrays(dst, data, **kw, execution=Execution(overwrite=True))
    assert not replaced.unchanged and replaced.written_blocks > 0


def test_run_conversion_rerun_and_records_that_never_match(tmp_path: Path) -> None:
    dst = tmp_path / "r.zarr"
    run_conversion(SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False))
    again = run_conversion(
        SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert again.unchanged and (again.resumed_blocks, again.written_blocks) == (40, 0)
    with pytest.raises(DestinationExistsError, match="the source changed"):
        run_conversion(
            SlowSource(n=100), dst, output=Output(chunks=5), execution=Execution(progress=False)
        )
    with pytest.raises(DestinationExistsError, match="option samples_per_chunk was 5, now 4"):
        run_conversion(
            SlowSource(), dst, output=Output(chunks=4), execution=Execution(progress=False)
        )
    # A dataset written before reruns were recorded (no record) keeps being refused ...
    group = zarr.open_group(str(dst), mode="r+")
    del group.attrs["chunkio_request"]
    with pytest.raises(DestinationExistsError, match="no record of the sources"):
        run_conversion(
            SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
        )


def test_rerun_refuses_an_appended_or_legacy_hdf5_dataset(tmp_path: Path) -> None:
    dst = str(tmp_path / "a.h5")
    write_arrays(dst, arrays(), shuffle=False, output=Output(chunks=8))
    append_arrays(dst, arrays(8, seed=1), shuffle=False)
    with pytest.raises(DestinationExistsError, match="changed after it was made"):
        write_arrays(dst, arrays(), shuffle=False, output=Output(chunks=8))
    with h5py.File(dst, "r+") as f:
        del f.attrs["chunkio_request"]
    with pytest.raises(DestinationExistsError, match="no record"):
        write_arrays(dst, arrays(), shuffle=False, output=Output(chunks=8))


def test_incomplete_in_place_dataset_is_not_reused() -> None:
    dst = f"memory://incomplete-{next(_ids)}"
    write_arrays(dst, arrays(), output=Output(chunks=8))
    from chunkio.backends._memory import memory_store

    memory_store(dst).attrs["chunkio_complete"] = False
    with pytest.raises(DestinationExistsError, match="incomplete"):
        write_arrays(dst, arrays(), output=Output(chunks=8))


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_rerun_of_convert_images_skips_the_check_pass(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = image_folder(tmp_path / "src", [(10, 12)] * 5)
    (src / "b" / "broken.png").write_bytes(b"\x89PNG not really")
    dst = str(tmp_path / f"img{SUFFIX[fmt]}")
    kw: dict[str, Any] = {
        "size": 8,
        "on_error": "skip",
        "execution": Execution(workers=1, progress=False),
    }
    first = convert_images(src, dst, **kw)
    assert [s.path for s in first.skipped] == ["b/broken.png"]
    before = snapshot(dst)
    forbid(monkeypatch, images_mod, "check_all")  # the check pass decodes every file
    again = convert_images(src, dst, **kw)
    assert again.unchanged and again.written_blocks == 0
    for name in ("num_samples", "samples_per_chunk", "fields", "skipped", "ignored"):
        assert getattr(again, name) == getattr(first, name), name
    assert again.class_names == first.class_names == ("a", "b")
    assert snapshot(dst) == before
    with pytest.raises(DestinationExistsError, match=r"option size was \[8, 8\], now \[6, 6\]"):
        convert_images(src, dst, **{**kw, "size": 6})
    with pytest.raises(DestinationExistsError, match='option resize was "shorter-crop", now "pad"'):
        convert_images(src, dst, **kw, images=ImageOptions(resize="pad"))
    with pytest.raises(DestinationExistsError, match='option mode was "RGB", now "L"'):
        convert_images(src, dst, **kw, images=ImageOptions(mode="L"))
    os.utime(src / "a" / "0.png", ns=(1, 1))  # same bytes, another mtime: a changed listing
    with pytest.raises(DestinationExistsError, match="the source listing changed"):
        convert_images(src, dst, **kw)
    assert snapshot(dst) == before


def test_rerun_of_convert_volumes_and_a_converter(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "vol").mkdir()
    for i in range(2):
        np.save(tmp_path / "vol" / f"v{i}.npy", rng.integers(0, 100, (6, 5, 4)).astype(np.int16))
    dst = str(tmp_path / "v.h5")
    first = convert_volumes(
        tmp_path / "vol",
        dst,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    again = convert_volumes(
        tmp_path / "vol",
        dst,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    assert again.unchanged and (again.resumed_blocks, again.written_blocks) == (2, 0)
    assert again.fields == first.fields and again.num_samples == first.num_samples
    with pytest.raises(DestinationExistsError, match=r"option chunks was \[4, 4, 4\], now"):
        convert_volumes(
            tmp_path / "vol",
            dst,
            output=Output(chunks=2),
            execution=Execution(workers=1, progress=False),
        )
    with pytest.raises(DestinationExistsError, match='option dtype was "int16", now "float32"'):
        convert_volumes(
            tmp_path / "vol",
            dst,
            dtype="float32",
            output=Output(chunks=4),
            execution=Execution(progress=False),
        )
    np.save(tmp_path / "vol" / "v2.npy", np.zeros((6, 5, 4), np.int16))
    with pytest.raises(DestinationExistsError, match="the source listing changed"):
        convert_volumes(
            tmp_path / "vol",
            dst,
            output=Output(chunks=4),
            execution=Execution(workers=1, progress=False),
        )

    src = image_folder(tmp_path / "imgs", [(9, 9)] * 4)
    execution = Execution(workers=1, progress=False)
    done = imagefolder.convert(src, tmp_path / "f.zarr", execution=execution)
    again = imagefolder.convert(src, tmp_path / "f.zarr", execution=execution)
    assert again.unchanged and again.num_samples == done.num_samples == 4


# -- 2. byte-identical HDF5 ----------------------------------------------------------------


def test_hdf5_bytes_identical_across_runs_and_worker_counts(tmp_path: Path) -> None:
    data = arrays(150)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    write_arrays(tmp_path / "a" / "x.h5", data, output=Output(chunks=7))
    write_arrays(
        tmp_path / "b" / "x.h5", data, output=Output(chunks=7), execution=Execution(workers=2)
    )
    assert (tmp_path / "a" / "x.h5").read_bytes() == (tmp_path / "b" / "x.h5").read_bytes()


@pytest.mark.parametrize("sizes", [[(10, 12)] * 6, [(10 + i, 12) for i in range(6)]])
def test_hdf5_bytes_identical_for_convert_images(sizes: list[tuple[int, int]], tmp_path: Path):
    src = image_folder(tmp_path / "src", sizes)  # equal sizes: dense; different: ragged
    outs = [tmp_path / d / "x.h5" for d in ("a", "b")]
    for out in outs:
        convert_images(
            src, out, output=Output(chunks=4), execution=Execution(workers=1, progress=False)
        )
    assert outs[0].read_bytes() == outs[1].read_bytes()


def test_hdf5_bytes_identical_for_convert_volumes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "vol").mkdir(), (tmp_path / "lab").mkdir()
    for i in range(2):
        np.save(tmp_path / "vol" / f"v{i}.npy", rng.integers(0, 100, (6, 5, 4)).astype(np.int16))
        np.save(tmp_path / "lab" / f"v{i}.npy", (rng.random((6, 5, 4)) > 0.7).astype(np.uint8))
    outs = [str(tmp_path / f"{d}.h5") for d in ("a", "b")]
    for out in outs:
        convert_volumes(
            tmp_path / "vol",
            out,
            labels=tmp_path / "lab",
            output=Output(chunks=4),
            execution=Execution(workers=1, progress=False),
        )
    assert Path(outs[0]).read_bytes() == Path(outs[1]).read_bytes()


def files(path: Path) -> dict[str, bytes]:
    """Every file of a dataset (an HDF5 file, or the files of a Zarr directory) by name."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(f.relative_to(path)): f.read_bytes() for f in path.rglob("*") if f.is_file()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["hdf5", "zarr"])
def test_killed_and_resumed_equals_uninterrupted_byte_for_byte(fmt: str, tmp_path: Path) -> None:
    dst = tmp_path / f"k{SUFFIX[fmt]}"
    proc = start_converter(tmp_path, dst, delay=0.05)
    wait_for_manifest(dst, 5, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not dst.exists() and staging_of(dst).exists()
    resumed = run_conversion(
        SlowSource(), dst, output=Output(chunks=5), execution=Execution(progress=False)
    )
    assert resumed.resumed_blocks >= 5 and resumed.written_blocks > 0
    assert resumed.resumed_blocks + resumed.written_blocks == 40
    ref = tmp_path / f"ref{SUFFIX[fmt]}"
    run_conversion(SlowSource(), ref, output=Output(chunks=5), execution=Execution(progress=False))
    assert files(dst) == files(ref)


# -- 3a. DataLoader with torch's default collate -----------------------------------------


def _plus_one(sample: Any) -> Any:
    """A per-sample transform that keeps the sample's structure."""
    if isinstance(sample, dict):
        return {k: v + 1 for k, v in sample.items()}
    if isinstance(sample, tuple):
        return tuple(v + 1 for v in sample)
    return sample + 1


def _times_two(batch: Any) -> Any:
    """A batch transform that keeps the batch's structure."""
    if isinstance(batch, dict):
        return {k: v * 2 for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(v * 2 for v in batch)
    return batch * 2


def _stack(samples: list[Any]) -> Any:
    first = samples[0]
    if isinstance(first, dict):
        return {k: torch.stack([s[k] for s in samples]) for k in first}
    if isinstance(first, tuple):
        return tuple(torch.stack([s[j] for s in samples]) for j in range(len(first)))
    return torch.stack(samples)


def _tensors(batch: Any) -> list[tuple[str, torch.Tensor]]:
    """A batch as (key, tensor) pairs; default_collate's lists compare like tuples."""
    if isinstance(batch, dict):
        return sorted((str(k), v) for k, v in batch.items())
    if isinstance(batch, (tuple, list)):
        return [(str(j), v) for j, v in enumerate(batch)]
    return [("", batch)]


@pytest.fixture(scope="module")
def loader_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("loader") / "d.zarr")
    write_arrays(path, arrays(36), shuffle=False, output=Output(chunks=8))
    return path


#: with 2 (forked) workers the default suite runs a pairwise cover of the other four choices:
#: every value of each with every value of each other, in 6 of the 24 combinations (the rest
#: under ``make soak``); without workers all 24
WORKER_PAIRS = {
    ("all", "no_t", "no_bt", "default_collate"),
    ("all", "t", "bt", "chunkio"),
    ("one", "no_t", "bt", "chunkio"),
    ("one", "t", "no_bt", "default_collate"),
    ("two", "no_t", "no_bt", "chunkio"),
    ("two", "t", "bt", "default_collate"),
}


def _loader_cases() -> list[Any]:
    cases = []
    for fid, fields in (("all", None), ("one", "image"), ("two", ["image", "label"])):
        for tid, transform in (("no_t", None), ("t", _plus_one)):
            for bid, batch_transform in (("no_bt", None), ("bt", _times_two)):
                for cid, collate_fn in (("default_collate", None), ("chunkio", collate)):
                    for num_workers in (0, 2):
                        key = (fid, tid, bid, cid)
                        heavy = num_workers and key not in WORKER_PAIRS
                        cases.append(
                            pytest.param(
                                fields,
                                transform,
                                batch_transform,
                                collate_fn,
                                num_workers,
                                id="-".join((*key, str(num_workers))),
                                marks=pytest.mark.slow if heavy else (),
                            )
                        )
    return cases


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("fields", "transform", "batch_transform", "collate_fn", "num_workers"), _loader_cases()
)
def test_dataloader_batches_equal_per_sample_reads(
    loader_dataset: str,
    fields: Any,
    transform: Callable[[Any], Any] | None,
    batch_transform: Callable[[Any], Any] | None,
    collate_fn: Callable[[Any], Any] | None,
    num_workers: int,
) -> None:
    ds = ChunkDataset(loader_dataset, fields, transform, batch_transform=batch_transform)
    plain = ChunkDataset(loader_dataset, fields)
    kw: dict[str, Any] = {} if collate_fn is None else {"collate_fn": collate_fn}
    if num_workers:
        kw["multiprocessing_context"] = "fork"
    loader = DataLoader(ds, batch_size=8, num_workers=num_workers, **kw)
    batches = list(loader)
    assert len(batches) == 5  # 36 samples: four of 8, one of 4
    for b, got in enumerate(batches):
        samples = [plain[i] for i in range(8 * b, min(8 * b + 8, 36))]
        if transform is not None:
            samples = [transform(s) for s in samples]
        want = _stack(samples)
        if batch_transform is not None:
            want = batch_transform(want)
        if collate_fn is collate or fields is None or isinstance(fields, str):
            assert type(got) is type(want)  # default_collate makes lists of tuples
        pairs, expected = _tensors(got), _tensors(want)
        assert [k for k, _ in pairs] == [k for k, _ in expected]
        for (key, g), (_, w) in zip(pairs, expected, strict=True):
            assert g.dtype == w.dtype and torch.equal(g, w), (b, key)


def test_sample_batch_pickles_as_it_was_built(loader_dataset: str) -> None:
    import pickle

    for transform in (None, _plus_one):
        ds = ChunkDataset(loader_dataset, ["image", "label"], transform)
        batch = ds.__getitems__([3, 9, 3])
        copy = pickle.loads(pickle.dumps(batch))
        assert len(copy) == len(list(copy)) == 3
        for got, want in zip([*copy, collate(copy)], [*batch, collate(batch)], strict=True):
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
        assert isinstance(collate(batch), tuple)  # tuples stay tuples, transform or not
        with pytest.raises(IndexError, match="sample 3 out of range"):
            batch[3]


# -- 3b. codec names in `chunkio info` -----------------------------------------------------


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("codec", ["lz4", "zstd", "blosc-lz4", "blosc-zstd", "gzip", "none"])
@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_info_names_codecs_as_users_know_them(
    fmt: str, codec: str, checksum: bool, tmp_path: Path
) -> None:
    dst = str(tmp_path / f"c{SUFFIX[fmt]}")
    write_arrays(
        dst,
        {"x": np.arange(40)},
        shuffle=False,
        output=Output(compression=codec, checksum=checksum),
    )
    d = info(dst)
    got = d["arrays"]["x"]["compression"]
    levels = {"lz4": 5, "zstd": 3, "blosc-lz4": 5, "blosc-zstd": 3, "gzip": 6, "none": None}
    level = None if (fmt, codec) == ("hdf5", "lz4") else levels[codec]  # HDF5 LZ4: no level
    check = ("crc32c" if fmt == "zarr" else "fletcher32") if checksum else None
    assert (got["codec"], got["level"], got["checksum"]) == (codec, level, check)
    assert d["arrays"]["x"]["checksum"] is checksum
    table = format_info(d)
    name = codec + ("" if level is None else f"({level})") + ("" if check is None else f"+{check}")
    assert got["name"] == name and d["compression"] == [name]
    assert re.search(rf"\nx +40 +int64 +40 +{re.escape(name)} ", table), table
    assert f"compression:       {name}" in table and "blosc(" not in table


# -- 3c. unknown destination suffixes --------------------------------------------------------


@pytest.mark.parametrize("name", ["out.npz", "out.tiff", "out", "out.zarr.bak"])
def test_unknown_destination_suffix_is_refused(name: str, tmp_path: Path) -> None:
    dst = tmp_path / name
    for convert in (
        lambda: write_arrays(dst, {"x": np.arange(4)}),
        lambda: convert_images(
            image_folder(tmp_path / "src", [(8, 8)] * 2), dst, execution=Execution(progress=False)
        ),
    ):
        with pytest.raises(UnknownFormatError, match=r"'\.zarr' directory, an HDF5 file \('\.h5'"):
            convert()
    assert isinstance(UnknownFormatError("x"), FormatError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing written"
    with pytest.raises(DatasetNotFoundError):
        ChunkDataset(dst)  # reading a path that is not there: "no dataset", as before


def test_known_locations_keep_working(tmp_path: Path) -> None:
    data = {"x": np.arange(12).reshape(6, 2)}
    for dst in ("a.zarr", "a.zarr/", "b.h5", "c.hdf5", "file.HDF5"):
        write_arrays(str(tmp_path / dst), data, shuffle=False, execution=Execution(overwrite=True))
    write_arrays(f"file://{tmp_path}/url.zarr", data, shuffle=False)
    write_arrays(f"memory://suffix-{next(_ids)}", data)
    store = zarr.storage.MemoryStore()
    write_arrays(store, data, shuffle=False)
    assert ChunkDataset(store).read_batch([5])["x"].tolist() == [[10, 11]]
    assert detect_format("s3://bucket/train") == "zarr"
    # Existing datasets without a telling suffix are recognised by their content ...
    os.rename(tmp_path / "a.zarr", tmp_path / "plain")
    os.rename(tmp_path / "b.h5", tmp_path / "plain-h5")
    assert detect_format(str(tmp_path / "plain")) == "zarr"
    assert detect_format(f"file://{tmp_path}/plain") == "zarr"
    assert detect_format(str(tmp_path / "plain-h5")) == "hdf5"
    for path in ("plain", "plain-h5"):
        assert ChunkDataset(tmp_path / path).read_batch([5])["x"].tolist() == [[10, 11]]
        assert info(tmp_path / path)["num_samples"] == 6
    # ... and an explicit format= names one for a new destination.
    write_arrays(tmp_path / "raw", data, output=Output(format="zarr"))
    assert detect_format(str(tmp_path / "raw")) == "zarr"
    (tmp_path / "notes").mkdir()
    with pytest.raises(UnknownFormatError, match="not a Zarr v3 group"):
        write_arrays(tmp_path / "notes", data, execution=Execution(overwrite=True))
    (tmp_path / "x.npz").write_bytes(b"PK")
    with pytest.raises(UnknownFormatError, match="not an HDF5 file"):
        info(tmp_path / "x.npz")


# -- 3d. pin_memory without CUDA -------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works where CUDA is available")
def test_pin_memory_without_cuda_warns_once(loader_dataset: str) -> None:
    with pytest.warns(UserWarning, match="CUDA is not available") as record:
        loader = make_loader(loader_dataset, 8, num_workers=0, workers=Workers(pin_memory=True))
        batches = list(loader)
    assert len(batches) == 5 and not batches[0]["image"].is_pinned()
    assert len([w for w in record if "pin" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_loader(loader_dataset, 8, num_workers=0)  # the default: no warning


# -- 3e / 3f. packaging metadata and README links ------------------------------------------


def test_pyproject_uses_an_spdx_license_string() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "BSD-3-Clause"
    requires = meta["build-system"]["requires"]
    versions = [int(m[1]) for r in requires if (m := re.fullmatch(r"setuptools>=(\d+)", r))]
    assert versions and versions[0] >= 77  # SPDX strings need setuptools 77
    classifiers = meta["project"].get("classifiers", [])
    assert not [c for c in classifiers if c.startswith("License ::")]  # conflicts with SPDX


def test_readme_links_stay_inside_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r'(?:href|src)="([^"]+)"', text)
    for target in targets:
        if re.match(r"[a-z]+://", target) or target.startswith(("#", "mailto:")):
            continue
        path = (ROOT / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"README links outside the repository: {target}"
        assert path.exists(), f"README links a missing file: {target}"
    assert not re.search(r"(?<![\w.])(\.\./|/work/|/home/|/Users/)", text)
