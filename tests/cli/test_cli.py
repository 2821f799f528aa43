"""The ``chunkio`` command: run as ``python -m chunkio`` in a subprocess where the process is
the point (the entry point, its output and exit status), else ``main`` in this process.

Exit codes: 0 success, 1 ``verify`` found problems, 2 an error (one line on stderr, no
traceback) or a usage error.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import zarr_chunk_file
from PIL import Image

from chunkio import Execution, Output
from chunkio.diagnose import cli


def chunkio(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chunkio", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def chunkio_main(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``main`` in this process with its streams captured: what :func:`chunkio` returns, without
    starting Python and importing chunkio again for each command."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(["chunkio", *argv], status, out.getvalue(), err.getvalue())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        for i in range(3):
            path = tmp_path / "src" / cls / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(path)
    return tmp_path / "src"


@pytest.mark.timeout(300)
def test_convert_info_verify_and_a_flipped_byte(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.zarr"
    done = chunkio_main(
        "convert",
        "images",
        folder,
        dst,
        "--size",
        "8",
        "--no-progress",
        "--workers",
        "1",
        "--samples-per-chunk",
        "4",
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote 6 images to {dst}" in done.stdout

    shown = chunkio_main("info", dst)
    assert shown.returncode == 0, shown.stderr
    assert "samples:           6" in shown.stdout and "class names:       a, b" in shown.stdout
    assert re.search(r"\nimage +6x3x8x8 ", shown.stdout) and "crc32c" in shown.stdout
    assert re.search(r"\nsource_index +6 +int64 ", shown.stdout), "shuffled by default"
    as_json = json.loads(chunkio_main("info", dst, "--json").stdout)
    assert as_json["num_chunks"] == 2 and as_json["arrays"]["image"]["checksum"] is True

    assert chunkio_main("verify", dst).returncode == 0
    chunk = zarr_chunk_file(dst, "image", 1)  # small images: the shard holding chunks 0 and 1
    data = bytearray(chunk.read_bytes())
    data[int((len(data) - 36) * 0.75)] ^= 0x40  # inside chunk 1 (the index is 36 bytes)
    chunk.write_bytes(bytes(data))
    checked = chunkio_main("verify", dst)
    assert checked.returncode == 1, checked.stdout
    assert "1 problem(s)" in checked.stdout
    assert "array 'image', chunk 1" in checked.stdout and "crc32c" in checked.stdout

    # the one real process of this file: the entry point, its status and its one-line error
    again = chunkio("convert", "images", folder, dst, "--no-progress", "--workers", "1")
    assert again.returncode == 2
    assert again.stderr.startswith("chunkio: error: ") and "overwrite" in again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_errors_are_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["info", str(tmp_path / "missing.zarr")]) == 2
    assert (
        cli.main(
            ["convert", "images", str(tmp_path / "none"), str(tmp_path / "o.zarr"), "--no-progress"]
        )
        == 2
    )
    assert (
        cli.main(
            ["convert", "images", str(tmp_path), str(tmp_path / "o.zarr"), "--size", "1", "2", "3"]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("chunkio: error: ") for line in err)
    assert "no dataset" in err[0] and "expected a directory" in err[1] and "--size" in err[2]
    with pytest.raises(SystemExit) as usage:
        cli.main(["convert", "images", "src"])  # argparse: missing DST
    assert usage.value.code == 2


def test_verify_reports_an_incomplete_dataset(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zarr

    dst = tmp_path / "o.zarr"
    assert (
        cli.main(
            [
                "convert",
                "images",
                str(folder),
                str(dst),
                "--no-progress",
                "--workers",
                "1",
                "--mode",
                "L",
            ]
        )
        == 0
    )
    zarr.open_group(str(dst), mode="a").attrs["chunkio_complete"] = False
    assert cli.main(["verify", str(dst), "--no-progress"]) == 1
    assert "did not finish" in capsys.readouterr().out
    assert cli.main(["info", str(dst)]) == 0
    assert "NO (conversion unfinished)" in capsys.readouterr().out


def test_convert_images_shuffle_options(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chunkio import ChunkDataset, read_source_paths

    base = ["convert", "images", str(folder), "--no-progress", "--workers", "1"]
    listing = [f"{c}/{i}.png" for c in "ab" for i in range(3)]
    assert cli.main([*base[:3], str(tmp_path / "s0.zarr"), *base[3:]]) == 0
    assert cli.main([*base[:3], str(tmp_path / "s7.zarr"), *base[3:], "--seed", "7"]) == 0
    assert cli.main([*base[:3], str(tmp_path / "n.zarr"), *base[3:], "--no-shuffle"]) == 0
    for name, seed in (("s0", 0), ("s7", 7)):
        ds = ChunkDataset(tmp_path / f"{name}.zarr")
        order = np.random.default_rng(seed).permutation(6).tolist()
        assert ds.read_batch(range(6))["source_index"].tolist() == order
        assert ds.layout.extra["order"] == {"shuffled": True, "seed": seed}
        assert read_source_paths(tmp_path / f"{name}.zarr") == [listing[k] for k in order]
    plain = ChunkDataset(tmp_path / "n.zarr")
    assert "source_index" not in plain.layout.field_names
    assert plain.layout.extra["order"] == {"shuffled": False, "seed": None}
    assert read_source_paths(tmp_path / "n.zarr") == listing
    capsys.readouterr()
    with pytest.raises(SystemExit) as usage:
        cli.main([*base[:3], str(tmp_path / "x.zarr"), "--seed", "-1"])
    assert usage.value.code == 2
    assert "expected an integer >= 0; got '-1'" in capsys.readouterr().err


def test_volumes_and_doctor_pass_their_options_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: dict[str, Any] = {}

    def convert_volumes(src: str, dst: str, **kw: Any) -> Any:
        calls["volumes"] = (src, dst, kw)
        return types.SimpleNamespace(num_samples=3, path=dst, seconds=0.5)

    def main_doctor(
        path: str,
        *,
        step_time: float | None = None,
        fields: Any,
        storage_options: Any,
        trust_codecs: bool,
    ) -> str:
        calls["doctor"] = (path, step_time, storage_options)
        calls["fields"], calls["trust"] = fields, trust_codecs
        return "doctor report"

    monkeypatch.setattr("chunkio.convert.volumes.convert_volumes", convert_volumes)
    monkeypatch.setattr("chunkio.diagnose.doctor.main_doctor", main_doctor)
    argv = [
        "convert",
        "volumes",
        "vols",
        "v.h5",
        "--chunks",
        "32",
        "--labels",
        "segs",
        "--nan-policy",
        "zero",
        "--workers",
        "3",
        "--no-progress",
        "--overwrite",
    ]
    assert cli.main(argv) == 0
    assert calls["volumes"] == (
        "vols",
        "v.h5",
        {
            "output": Output(chunks=32),
            "execution": Execution(workers=3, progress=False, overwrite=True),
            "labels": "segs",
            "nan_policy": "zero",
        },
    )
    assert cli.main(["convert", "volumes", "vols", "v.zarr", "--chunks", "8", "16", "16"]) == 0
    assert calls["volumes"][2]["output"].chunks == (8, 16, 16)
    assert calls["volumes"][2]["output"].ome_zarr is False
    assert cli.main(["convert", "volumes", "vols", "v.zarr", "--ome-zarr"]) == 0
    assert calls["volumes"][2]["output"].ome_zarr is True  # levels chosen
    assert cli.main(["convert", "volumes", "vols", "v.zarr", "--ome-zarr", "3"]) == 0
    assert calls["volumes"][2]["output"].ome_zarr == 3
    assert cli.main(["doctor", "d.zarr", "--step-time", "0.25"]) == 0
    assert calls["doctor"] == ("d.zarr", 0.25, None)
    assert cli.main(["doctor", "s3://b/d.zarr", "--storage-options", '{"anon": true}']) == 0
    assert calls["doctor"] == ("s3://b/d.zarr", None, {"anon": True})
    assert calls["fields"] is None
    assert cli.main(["doctor", "u.h5", "--fields", "image=a/x", "label=a/y"]) == 0
    assert calls["fields"] == {"image": "a/x", "label": "a/y"} and calls["trust"] is False
    assert cli.main(["doctor", "u.h5", "--fields", "x", "--trust-codecs"]) == 0
    assert calls["trust"] is True
    out = capsys.readouterr().out
    assert "wrote 3 volumes to v.h5" in out and "doctor report" in out


def test_convert_images_with_an_encoding(folder: Path, tmp_path: Path) -> None:
    dst = tmp_path / "j.zarr"
    done = chunkio_main(
        "convert",
        "images",
        folder,
        dst,
        "--encoding",
        "png",
        "--max-size",
        "6",
        "--no-progress",
        "--workers",
        "1",
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(chunkio_main("info", dst, "--json").stdout)
    assert shown["fields"]["image"]["kind"] == "encoded"
    assert shown["fields"]["image"]["encoding"] == "png"
    bad = chunkio_main("convert", "images", folder, tmp_path / "x.zarr", "--encoding", "gif")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
