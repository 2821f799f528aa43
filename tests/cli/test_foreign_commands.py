"""``chunkio info``, ``verify`` and ``doctor`` on stores chunkio did not write: h5py files and
zarr-python groups (v2, v3 sharded), described, read chunk by chunk and judged for their
chunking; the source is never written to."""

from __future__ import annotations

import itertools
import json
import shlex
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from foreign_stores import (
    STORES,
    WRITTEN,
    N,
    fields_of,
    h5py_chunked,
    h5py_file,
    h5py_with_holes,
    snapshot,
    zarr_v2,
    zarr_v2_with_holes,
    zarr_v3_chunked,
    zarr_v3_sharded,
    zarr_v3_sharded_with_holes,
)

import chunkio
from chunkio.convert.engine.chunking import choose_samples_per_chunk
from chunkio.diagnose import cli
from chunkio.diagnose.dataset_report import info, verify
from chunkio.diagnose.doctor import run_doctor
from chunkio.errors import FormatError, MissingFieldError
from chunkio.format.foreign import fields_from_words

#: per store: the images' chunks, their codec chain, and the chunks verify reads in all
#: (images and labels; contiguous h5py labels are one run)
EXPECTED = {
    "h5py": ((32, 3, 8, 8), ["gzip"], 10 + 1),
    "zarr v2": ((16, 3, 4, 8), ["blosc(5)"], 19 * 2 + 3),
    "zarr v3 sharded": ((8, 3, 8, 8), ["sharding_indexed[bytes+zstd(0)]"], 38 + 1),
}
TINY = {"worker_counts": [0], "batch_sizes": [64], "batches_per_setting": 3,
        "budget_s_per_setting": 1.0}  # fmt: skip
FLAT = {"image": "images", "label": "labels"}


def words(fields: dict[str, str]) -> list[str]:
    return [f"{name}={path}" for name, path in fields.items()]


@pytest.mark.parametrize("store", list(EXPECTED))
def test_info_lists_every_array_and_says_how_to_name_fields(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = STORES[store](tmp_path)
    before = snapshot(path)
    assert cli.main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "not a chunkio dataset" in out and "--fields NAME=PATH" in out
    chunks, codecs, _ = EXPECTED[store]
    image, label = fields_of(store).values()
    d = info(path)
    assert d["chunkio_dataset"] is False and d["fields"] is None and d["unreadable"] == {}
    assert sorted(d["arrays"]) == sorted([image, label])
    a = d["arrays"][image]
    assert (a["shape"], a["chunks"], a["codecs"]) == ([N, 3, 8, 8], list(chunks), codecs)
    assert a["compression"]["codec"] != "none" and a["stored_nbytes"] > 0
    assert a["compression_ratio"] == round(a["nbytes"] / a["stored_nbytes"], 3)
    for name in (image, label):
        assert name in out
    assert "x".join(map(str, chunks)) in out and codecs[0] in out
    assert snapshot(path) == before


@pytest.mark.parametrize("store", list(EXPECTED))
def test_info_with_fields_describes_what_the_dataset_reads(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = STORES[store](tmp_path)
    fields = fields_of(store)
    assert cli.main(["info", str(path), "--json", "--fields", *words(fields)]) == 0
    d = json.loads(capsys.readouterr().out)
    ds = chunkio.ChunkDataset(path, fields=fields)
    assert (d["num_samples"], d["samples_per_chunk"]) == (len(ds), ds.samples_per_chunk)
    assert d["hint"] is None and list(d["fields"]) == ["image", "label"]
    image = d["fields"]["image"]
    assert image["array"] == fields["image"] and image["sample_shape"] == [3, 8, 8]
    assert image["samples_per_chunk"] == EXPECTED[store][0][0]
    assert d["fields"][d["order_field"]]["samples_per_chunk"] == ds.samples_per_chunk
    # bare array paths work too (fields named by the paths' last parts)
    assert cli.main(["info", str(path), "--fields", *fields.values()]) == 0
    out = capsys.readouterr().out
    assert f"samples:           {N}" in out and "chunk-aware order: follows field" in out


@pytest.mark.parametrize("store", list(EXPECTED))
def test_verify_reads_every_chunk_of_every_array(
    tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = STORES[store](tmp_path)
    before = snapshot(path)
    report = verify(path)
    assert report.ok and not report.missing, str(report)
    assert (report.arrays, report.chunks) == (2, EXPECTED[store][2])
    fields = fields_of(store)
    assert cli.main(["verify", str(path), "--no-progress", "--fields", *words(fields)]) == 0
    assert ": OK" in capsys.readouterr().out
    assert verify(path, fields=[fields["image"]]).arrays == 1
    assert snapshot(path) == before


def _missing_after(path: Path, array: str) -> list[tuple[int, ...]]:
    """Chunk grid coordinates of ``array`` past the first WRITTEN samples."""
    a = info(path)["arrays"][array]
    grid = [-(-n // c) for n, c in zip(a["shape"], a["chunks"], strict=True)]
    rows = a["chunks"][0]
    return [c for c in itertools.product(*map(range, grid)) if c[0] * rows >= WRITTEN]


@pytest.mark.parametrize(
    ("build", "image"),
    [
        (zarr_v2_with_holes, "train/images"),
        (zarr_v3_sharded_with_holes, "images"),
        (h5py_with_holes, "images"),
    ],
)
def test_verify_lists_never_written_chunks_as_information(
    tmp_path: Path,
    build: Callable[[Path], Path],
    image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = build(tmp_path)
    before = snapshot(path)
    report = verify(path, fields=[image])
    expected = _missing_after(path, image)
    assert report.ok and len(report.missing) == 1
    (m,) = report.missing
    assert (m.array, m.count, m.first) == (image, len(expected), tuple(expected[:5]))
    assert report.chunks == m.total - m.count
    # the Zarr (and HDF5) contract: they read as the fill value
    ds = chunkio.ChunkDataset(path, fields=[image])
    assert not np.asarray(ds.read_batch(range(WRITTEN + 32, N))["images"]).any()
    assert cli.main(["verify", str(path), "--no-progress", "--fields", image]) == 0
    out = capsys.readouterr().out
    assert f"{len(expected)} of {m.total} chunks never written" in out and str(expected[0]) in out
    assert snapshot(path) == before


def test_corrupt_zarr_chunk_bytes_are_named_by_array_and_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = zarr_v2(tmp_path)
    chunk = path / "train" / "images" / "3.0.1.0"
    chunk.write_bytes(b"\x13garbage" * (chunk.stat().st_size // 8 + 1))
    report = verify(path)
    assert [(p.array, p.chunk) for p in report.problems] == [("train/images", (3, 0, 1, 0))]
    assert report.chunks == EXPECTED["zarr v2"][2]  # every other chunk still read
    assert cli.main(["verify", str(path), "--no-progress", "--fields", "train/images"]) == 1
    out = capsys.readouterr().out
    assert "array 'train/images', chunk (3, 0, 1, 0)" in out and "1 problem(s)" in out


def test_corrupt_hdf5_chunk_bytes_are_named_by_array_and_chunk(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    with h5py.File(path, "r") as f:
        where = f["train/images"].id.get_chunk_info_by_coord((64, 0, 0, 0))
    with open(path, "r+b") as fh:
        fh.seek(where.byte_offset + where.size // 4)
        fh.write(b"\xff" * (where.size // 2))
    report = verify(path, fields={"image": "train/images", "label": "train/labels"})
    assert [(p.array, p.chunk) for p in report.problems] == [("train/images", (2, 0, 0, 0))]
    assert "CorruptChunkError" in str(report) and not report.ok


@pytest.mark.parametrize("command", ["info", "verify", "doctor"])
def test_a_missing_fields_array_is_a_typed_error_listing_the_arrays(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = zarr_v2(tmp_path)
    assert cli.main([command, str(path), "--fields", "image=train/imgs", "label=train/labels"]) == 2
    err = capsys.readouterr().err
    assert "no array 'train/imgs'" in err and "train/images (300, 3, 8, 8) uint8" in err
    function = {"info": info, "verify": verify, "doctor": run_doctor}[command]
    with pytest.raises(MissingFieldError, match="arrays found: train/images"):
        function(path, fields={"image": "train/imgs"})


def test_doctor_on_a_store_chunkio_did_not_write_needs_fields(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    with pytest.raises(FormatError, match=r"fields must name its arrays.*train/images"):
        run_doctor(path, **TINY)


def _timed_by_the_test(monkeypatch: pytest.MonkeyPatch, source: Path, gain: float) -> None:
    """doctor's measurements still read through the loader, but their timings are the
    test's: the source takes ``gain`` times as long as its rewrite. The advice must follow
    the measurement whatever the machine does (what a rewrite really gains is reported by
    ``benchmarks/bench_doctor.py``, not asserted here)."""
    import dataclasses

    import chunkio.diagnose.doctor as doctor

    real = doctor._measure

    def measure(ds: chunkio.ChunkDataset, **kw: object) -> doctor.Measurement:
        m = real(ds, **kw)  # type: ignore[arg-type]
        batch_s = 1e-3 * (gain if Path(str(ds.location)) == source else 1.0)
        return dataclasses.replace(
            m, first_batch_s=5 * batch_s, samples_per_s=m.batch_size / batch_s
        )

    monkeypatch.setattr(doctor, "_measure", measure)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("build", "samples", "side", "why", "gain"),
    [
        (lambda t: h5py_chunked(t, 1, n=512, side=16), 512, 16, "chunks of 1 sample", 10.0),
        (lambda t: zarr_v3_chunked(t, 1, n=512, side=16), 512, 16, "chunks of 1 sample", 1.2),
        (
            lambda t: h5py_chunked(t, 4096, n=4096, side=32),
            4096,
            32,
            "compressed chunks spanning 4096 samples (12.0 MiB",
            1.6,
        ),
    ],
    ids=["h5py 1 sample", "zarr v3 1 sample", "h5py one chunk of all"],
)
def test_doctor_measures_a_bad_chunking_and_prints_the_rewrite(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    build: Callable[[Path], Path],
    samples: int,
    side: int,
    why: str,
    gain: float,
) -> None:
    """A chunking issue is named and measured; the rewrite is advised exactly when the
    measured gain reaches 1.5x (timings given by the test: 10x and 1.6x advise it, 1.2x does
    not), and the advised command runs as printed."""
    path = build(tmp_path)
    before = snapshot(path)
    _timed_by_the_test(monkeypatch, path, gain)
    report = run_doctor(path, fields=FLAT, preload_bytes=0, **TINY)
    advice = report.chunking
    assert advice is not None, report.render()
    assert advice.speedup == pytest.approx((gain, gain))
    assert advice.recommended == (gain >= 1.5), report.render()
    ((issue),) = advice.issues
    assert (issue.field, issue.array) == ("image", "images") and why in issue.why
    n = choose_samples_per_chunk(3 * side * side, num_samples=samples)
    assert advice.samples_per_chunk == n
    argv = shlex.split(advice.command)
    dst = tmp_path / f"{path.stem}.chunkio.zarr"
    assert argv[:6] == ["chunkio", "convert", "arrays", str(path), str(dst), "--fields"]
    assert fields_from_words(argv[6:8]) == FLAT and argv[8:] == ["--samples-per-chunk", str(n)]
    text = report.render()
    assert "first batch of an epoch" in text
    assert (advice.command in text) == advice.recommended
    assert ("not worth a rewritten copy" in text) == (not advice.recommended)
    assert snapshot(path) == before and sorted(tmp_path.iterdir()) == [path]  # nothing beside
    # the advice runs as printed, and gives what it promised
    assert cli.main([*argv[1:], "--no-progress"]) == 0
    rewritten = chunkio.ChunkDataset(dst)
    assert rewritten.samples_per_chunk == n and len(rewritten) == samples
    got = rewritten.read_batch([0, samples // 2, samples - 1])
    source = chunkio.ChunkDataset(path, fields=FLAT).read_batch(got["source_index"].tolist())
    np.testing.assert_array_equal(got["image"], source["image"])
    np.testing.assert_array_equal(got["label"], source["label"])
    assert snapshot(path) == before


@pytest.mark.timeout(180)
def test_doctor_gives_well_chunked_stores_no_chunking_advice(tmp_path: Path) -> None:
    good = (
        h5py_chunked(tmp_path, 64, n=512, side=32),
        zarr_v3_chunked(tmp_path, 64, n=512, side=32),
    )
    for path in good:
        report = run_doctor(path, fields=FLAT, preload_bytes=0, **TINY)
        assert report.chunking is None and "convert arrays" not in report.render()
    # arrays small enough to be read once per process: their chunks never reach a batch
    (tmp_path / "small").mkdir()
    small = run_doctor(zarr_v3_sharded(tmp_path / "small"), fields=FLAT, **TINY)
    assert small.chunking is None


def test_the_command_on_a_users_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = h5py_with_holes(tmp_path)
    # through main in this process: the entry point as a real process (its status, its
    # one-line errors) is tests/cli/test_cli.py's, and a fresh interpreter takes seconds
    assert cli.main(["info", str(path), "--fields", "images", "labels"]) == 0
    assert "follows field 'images'" in capsys.readouterr().out
    assert cli.main(["verify", str(path), "--fields", "images"]) == 0
    assert "chunks never written" in capsys.readouterr().out
