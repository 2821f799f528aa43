"""Files the cheap check pass lets through but a full decode refuses.

The check pass of ``convert_images`` parses headers (and checks PNG CRCs and JPEG end
markers) instead of decoding every file; a JPEG with a damaged Huffman table passes it and
fails only in the write pass. Under ``on_error="skip"`` the conversion then leaves the file out
and writes again; the result must equal a conversion that never saw the file, in one process
or in a pool, and after an interruption of the second attempt.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chunkio import ChunkDataset, Execution, Output
from chunkio.convert.image import check as image_check
from chunkio.convert.image import source as image_source_mod
from chunkio.convert.image import write as image_write
from chunkio.convert.images import convert_images
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import SourceError
from chunkio.images import pillow as decode
from chunkio.images.pillow import DecodePolicy, UndecodableImage, probe_image

BAD = "cls/03.jpg"


def jpeg(path: Path, seed: int, hw: tuple[int, int] = (24, 32)) -> Path:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : hw[0], 0 : hw[1]]
    arr = np.stack([yy * 4 + seed, xx * 4, (yy + xx) * 2], axis=-1) + rng.integers(0, 30, (*hw, 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(path, quality=90)
    return path


def break_huffman_table(path: Path) -> None:
    """Overwrite the codes of the first Huffman table: the headers and end marker stay."""
    data = bytearray(path.read_bytes())
    dht = data.index(b"\xff\xc4")
    data[dht + 5 : dht + 21] = b"\xff" * 16  # the code counts: more codes than can exist
    path.write_bytes(bytes(data))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for i in range(9):
        jpeg(root / "cls" / f"{i:02d}.jpg", seed=i, hw=(24 + i, 32))
    break_huffman_table(root / BAD)
    return root


@pytest.fixture
def without_bad(folder: Path, tmp_path: Path) -> Path:
    """The same folder without the bad file: what a skipping conversion must equal."""
    clean = tmp_path / "clean"
    shutil.copytree(folder, clean)
    (clean / BAD).unlink()
    return clean


def read_all(path: Path) -> dict[str, Any]:
    ds = ChunkDataset(path)
    return ds.read_batch(list(range(len(ds))))


def assert_same_rows(a: Path, b: Path) -> None:
    got, expected = read_all(a), read_all(b)
    assert sorted(got) == sorted(expected)
    for name, values in expected.items():
        if isinstance(values, list):  # ragged images
            assert len(got[name]) == len(values)
            for x, y in zip(got[name], values, strict=True):
                np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], values, err_msg=name)


def test_the_cheap_probe_passes_the_file_and_the_thorough_one_does_not(folder: Path) -> None:
    policy = DecodePolicy()
    assert probe_image(str(folder / BAD), policy).error is None
    assert "cannot decode" in str(probe_image(str(folder / BAD), policy, thorough=True).error)
    with pytest.raises(UndecodableImage, match=r"03\.jpg: cannot decode") as err:
        decode.load_image(str(folder / BAD), policy, stored="RGB")
    assert err.value.path == str(folder / BAD) and err.value.reason in str(err.value)


def test_the_cheap_probe_decodes_no_jpeg_that_ends_with_its_marker(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_decoding(*args: Any, **kw: Any) -> None:
        raise AssertionError("the probe decoded a whole JPEG")

    monkeypatch.setattr(decode, "_load_first_frame", no_decoding)
    good = probe_image(str(folder / "cls" / "00.jpg"), DecodePolicy())
    assert (good.height, good.width, good.stored_mode, good.error) == (24, 32, "RGB", None)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes((folder / "cls" / "01.jpg").read_bytes()[:-2])  # no end marker: decoded
    assert "decoded a whole JPEG" in str(probe_image(str(cut), DecodePolicy()).error)


def test_bytes_after_the_end_marker_cost_a_decode_but_are_no_error(
    folder: Path, tmp_path: Path
) -> None:
    padded = tmp_path / "padded.jpg"
    padded.write_bytes((folder / "cls" / "00.jpg").read_bytes() + b"\0" * 64)
    assert probe_image(str(padded), DecodePolicy()).error is None
    truncated = tmp_path / "truncated.jpg"
    data = (folder / "cls" / "00.jpg").read_bytes()
    truncated.write_bytes(data[: len(data) * 3 // 4])  # within the entropy-coded data
    assert "truncated" in str(probe_image(str(truncated), DecodePolicy()).error)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_raise_names_the_file_and_publishes_nothing(folder: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / ("o.zarr" if fmt == "zarr" else "o.h5")
    with pytest.raises(SourceError, match=r"cls/03\.jpg: cannot decode.*on_error='skip'") as err:
        convert_images(
            folder, dst, output=Output(chunks=2), execution=Execution(workers=1, progress=False)
        )
    assert isinstance(err.value, UndecodableImage) and err.value.path == str(folder / BAD)
    assert not dst.exists()


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_skip_leaves_the_file_out_as_if_it_was_never_there(
    folder: Path, without_bad: Path, tmp_path: Path, fmt: str
) -> None:
    suffix = ".zarr" if fmt == "zarr" else ".h5"
    kw: dict[str, Any] = {
        "execution": Execution(workers=1, progress=False),
        "output": Output(chunks=2),
    }
    result = convert_images(folder, tmp_path / f"o{suffix}", on_error="skip", **kw)
    assert [s.path for s in result.skipped] == [BAD]
    assert "cannot decode" in result.skipped[0].reason
    assert result.num_samples == 8 and result.fields[0].kind == "ragged"
    convert_images(without_bad, tmp_path / f"ref{suffix}", **kw)
    assert_same_rows(tmp_path / f"o{suffix}", tmp_path / f"ref{suffix}")
    stored = ChunkDataset(tmp_path / f"o{suffix}").layout.extra["skipped"]
    assert stored == [s.to_json() for s in result.skipped]
    assert verify(tmp_path / f"o{suffix}").ok
    again = convert_images(folder, tmp_path / f"o{suffix}", on_error="skip", **kw)
    assert again.unchanged and again.skipped == result.skipped


@pytest.mark.timeout(180)
def test_skip_works_when_a_pool_worker_meets_the_file(
    folder: Path, without_bad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image_check, "POOL_MIN_SECONDS", 0.0)  # pools even for 9 files
    kw: dict[str, Any] = {"output": Output(chunks=2)}
    result = convert_images(
        folder,
        tmp_path / "p.zarr",
        on_error="skip",
        **kw,
        execution=Execution(workers=2, progress=False),
    )
    assert [s.path for s in result.skipped] == [BAD]
    convert_images(
        without_bad, tmp_path / "ref.zarr", **kw, execution=Execution(workers=1, progress=False)
    )
    assert_same_rows(tmp_path / "p.zarr", tmp_path / "ref.zarr")


def test_an_interrupted_second_attempt_resumes_to_the_same_dataset(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw: dict[str, Any] = {
        "execution": Execution(workers=1, progress=False),
        "output": Output(chunks=2),
    }
    convert_images(folder, tmp_path / "ref.zarr", on_error="skip", **kw)
    real = image_source_mod.load_image
    after_bad: list[str] = []  # files loaded since the bad one failed: the second attempt

    def dies_in_the_second_attempt(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(BAD):
            after_bad.clear()
            return real(path, *args, **kwargs)
        if after_bad is not None and len(after_bad) == 4:  # two blocks of two written
            raise SourceError(f"{path}: simulated crash")
        after_bad.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(image_write, "_BLOCK_BYTES", 1)  # one chunk per block
    monkeypatch.setattr(image_source_mod, "load_image", dies_in_the_second_attempt)
    dst = tmp_path / "o.zarr"
    with pytest.raises(SourceError, match="simulated crash"):
        convert_images(folder, dst, on_error="skip", **kw)
    assert not dst.exists()
    monkeypatch.setattr(image_source_mod, "load_image", real)
    result = convert_images(folder, dst, on_error="skip", **kw)
    assert [s.path for s in result.skipped] == [BAD]
    assert_same_rows(dst, tmp_path / "ref.zarr")
    assert ChunkDataset(dst).layout.extra == ChunkDataset(tmp_path / "ref.zarr").layout.extra
