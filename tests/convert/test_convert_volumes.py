"""convert_volumes: formats, layouts, metadata, value policies (RELIABILITY row 22), resume."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import tifffile

from chunkio import Execution, Output
from chunkio.backends import open_reader
from chunkio.convert.volume.sources import match_labels
from chunkio.convert.volumes import convert_volumes
from chunkio.errors import IncompleteDatasetError, SourceError
from chunkio.format.layout import DatasetLayout
from chunkio.patches import PatchDataset, index_label_volume
from chunkio.patches.dataset import read_label_index
from converters import nifti_folder

AFFINE = np.array([[0.0, 0, 1.5, -10], [0, 2.0, 0, 5], [-0.8, 0, 0, 3], [0, 0, 0, 1]])


def _nifti(path: Path, data: np.ndarray, affine: np.ndarray = AFFINE) -> str:
    nib.save(nib.Nifti1Image(data, affine), str(path))
    return str(path)


def _read(path: str, name: str) -> np.ndarray:
    reader = open_reader(path)
    try:
        info = reader.array_info(name)
        out = np.empty(info.shape, info.dtype)
        reader.read_region(name, tuple(slice(0, n) for n in info.shape), out)
        return out
    finally:
        reader.close()


def _meta(path: str) -> dict[str, Any]:
    reader = open_reader(path)
    try:
        layout = DatasetLayout.from_attrs(reader.attrs(), where=path)
        return dict(layout.extra["volumes"], class_names=layout.class_names)
    finally:
        reader.close()


def _volumes(rng: np.random.Generator, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [rng.integers(-500, 1500, s).astype(np.int16) for s in shapes]


def _labels(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    out = []
    for i, s in enumerate(shapes):
        lab = np.zeros(s, np.uint8)
        lab[1:4, 2:5, 1 + i : 3 + i] = 1
        lab[-1, -1, -1] = 2
        out.append(lab)
    return out


@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_nifti_with_labels_stacks_and_keeps_affine_spacing_and_index(tmp_path, suffix):
    shapes = [(10, 12, 9)] * 3
    images, labels = _volumes(np.random.default_rng(0), shapes), _labels(shapes)
    (tmp_path / "img").mkdir(), (tmp_path / "lab").mkdir()
    for i, (im, lab) in enumerate(zip(images, labels, strict=True)):
        _nifti(tmp_path / "img" / f"case{i}.nii.gz", im)
        _nifti(tmp_path / "lab" / f"case{i}.nii.gz", lab)
    dst = str(tmp_path / f"out{suffix}")
    result = convert_volumes(
        tmp_path / "img",
        dst,
        labels=tmp_path / "lab",
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    assert (result.num_samples, result.written_blocks) == (3, 3)
    np.testing.assert_array_equal(_read(dst, "image"), np.stack(images))
    np.testing.assert_array_equal(_read(dst, "label"), np.stack(labels))
    meta = _meta(dst)
    assert meta["stacked"] and meta["chunks"] == [4, 4, 4] and meta["shapes"] == [[10, 12, 9]] * 3
    src = meta["sources"][1]
    assert src["image"].endswith("case1.nii.gz") and src["label"].endswith("case1.nii.gz")
    np.testing.assert_allclose(src["affine"], AFFINE)
    assert src["spacing"] == pytest.approx([0.8, 2.0, 1.5])
    assert src["axcodes"] == list(nib.aff2axcodes(AFFINE))
    reader = open_reader(dst)
    index = read_label_index(reader, meta["label_index"])
    reader.close()
    assert index is not None
    want = np.concatenate(
        [index_label_volume(lab, v, (4, 4, 4))[0] for v, lab in enumerate(labels)]
    )
    np.testing.assert_array_equal(index.rows, want)
    assert meta["label_index"]["values"] == [0, 1, 2]
    assert meta["label_index"]["voxels"][2] == 3
    # every stored point holds the value of its row
    vol, val = index.rows[:, 0], index.rows[:, -2]
    for r in range(len(index.rows)):
        for z, y, x in index.points[r]:
            assert labels[vol[r]][z, y, x] == val[r]


def test_label_index_counts_match_a_brute_force_scan():
    rng = np.random.default_rng(3)
    lab = rng.integers(0, 3, (7, 5, 6)).astype(np.int16)
    rows, points = index_label_volume(lab, 4, (3, 2, 4))
    for v, cz, cy, cx, value, count in rows.tolist():
        box = lab[cz * 3 : cz * 3 + 3, cy * 2 : cy * 2 + 2, cx * 4 : cx * 4 + 4]
        assert v == 4 and count == int((box == value).sum()) > 0
    assert rows[:, -1].sum() == lab.size
    assert points.shape == (len(rows), 4, 3)


def test_different_shapes_give_one_array_per_volume(tmp_path):
    shapes = [(9, 8, 7), (5, 11, 7), (9, 8, 7)]
    images, labels = _volumes(np.random.default_rng(1), shapes), _labels(shapes)
    img = [str(tmp_path / f"v{i}.npy") for i in range(3)]
    lab = [str(tmp_path / f"l{i}.npy") for i in range(3)]
    for i in range(3):
        np.save(img[i], images[i]), np.save(lab[i], labels[i])
    dst = str(tmp_path / "out.zarr")
    result = convert_volumes(
        img,
        dst,
        labels=lab,
        output=Output(chunks=(4, 4, 4)),
        execution=Execution(workers=1, progress=False),
    )
    assert [f.name for f in result.fields] == [
        "image_000",
        "image_001",
        "image_002",
        "label_000",
        "label_001",
        "label_002",
    ]
    assert result.num_samples == 1
    meta = _meta(dst)
    assert not meta["stacked"] and meta["shapes"] == [list(s) for s in shapes]
    for i in range(3):
        np.testing.assert_array_equal(_read(dst, f"image_{i:03d}")[0], images[i])
        np.testing.assert_array_equal(_read(dst, f"label_{i:03d}")[0], labels[i])
    ds = PatchDataset(dst, (4, 4, 4))
    got = ds.read_patches([(1, 1, 7, 3)])
    np.testing.assert_array_equal(got["image"][0], images[1][1:5, 7:11, 3:7])


def test_tiff_stacks_keep_resolution_and_move_channels_first(tmp_path):
    gray = np.arange(4 * 6 * 5, dtype=np.uint16).reshape(4, 6, 5)
    tifffile.imwrite(
        tmp_path / "a.tif",
        gray,
        imagej=True,
        resolution=(1 / 0.5, 1 / 0.25),
        metadata={"spacing": 2.0, "unit": "um", "axes": "ZYX"},
    )
    dst = str(tmp_path / "g.zarr")
    convert_volumes([tmp_path / "a.tif"], dst, execution=Execution(workers=1, progress=False))
    np.testing.assert_array_equal(_read(dst, "image")[0], gray)
    src = _meta(dst)["sources"][0]
    assert src["spacing"] == pytest.approx([2.0, 0.25, 0.5]) and src["unit"] == "um"
    rgb = np.random.default_rng(0).integers(0, 255, (3, 4, 5, 3)).astype(np.uint8)
    tifffile.imwrite(tmp_path / "rgb.tif", rgb, photometric="rgb")
    dst = str(tmp_path / "rgb.zarr")
    convert_volumes([tmp_path / "rgb.tif"], dst, execution=Execution(workers=1, progress=False))
    np.testing.assert_array_equal(_read(dst, "image")[0], np.moveaxis(rgb, -1, 0))
    assert _meta(dst)["channels"] == 3


def test_npz_volume_and_nifti_channels(tmp_path):
    vol = np.random.default_rng(2).random((5, 4, 3)).astype(np.float32)
    np.savez(tmp_path / "a.npz", image=vol, other=np.zeros(2))
    dst = str(tmp_path / "a.zarr")
    convert_volumes([tmp_path / "a.npz"], dst, execution=Execution(workers=1, progress=False))
    np.testing.assert_array_equal(_read(dst, "image")[0], vol)
    four = np.random.default_rng(3).random((5, 4, 3, 2)).astype(np.float32)
    _nifti(tmp_path / "m.nii", four)
    dst = str(tmp_path / "m.zarr")
    convert_volumes([tmp_path / "m.nii"], dst, execution=Execution(workers=1, progress=False))
    np.testing.assert_array_equal(_read(dst, "image")[0], np.moveaxis(four, -1, 0))


# -- RELIABILITY row 22: shapes, NaN/Inf, out-of-range values ---------------------------------


def test_label_of_another_shape_names_both_files(tmp_path):
    img = _nifti(tmp_path / "img.nii.gz", np.zeros((4, 5, 6), np.int16))
    lab = _nifti(tmp_path / "lab.nii.gz", np.zeros((4, 5, 7), np.uint8))
    with pytest.raises(SourceError, match=r"lab\.nii\.gz.*\(4, 5, 7\).*img\.nii\.gz.*\(4, 5, 6\)"):
        convert_volumes(
            [img], tmp_path / "x.zarr", labels=[lab], execution=Execution(progress=False)
        )
    assert not os.path.exists(tmp_path / "x.zarr")


def test_labels_folder_must_match_every_image_by_name(tmp_path):
    (tmp_path / "i").mkdir(), (tmp_path / "l").mkdir()
    for name in ("a", "b"):
        np.save(tmp_path / "i" / f"{name}.npy", np.zeros((2, 2, 2)))
    np.save(tmp_path / "l" / "a.npy", np.zeros((2, 2, 2)))
    images = sorted(str(p) for p in (tmp_path / "i").iterdir())
    with pytest.raises(SourceError, match=r"b\.npy: no label file named 'b'"):
        match_labels(images, tmp_path / "l")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_an_error_by_default(tmp_path, bad):
    vol = np.ones((3, 4, 5), np.float32)
    vol[1, 2, 3] = bad
    np.save(tmp_path / "v.npy", vol)
    with pytest.raises(SourceError, match=r"v\.npy.*1 NaN/Inf value.*\(1, 2, 3\)"):
        convert_volumes(
            [tmp_path / "v.npy"], tmp_path / "x.zarr", execution=Execution(progress=False)
        )
    dst = str(tmp_path / "z.zarr")
    convert_volumes(
        [tmp_path / "v.npy"], dst, nan_policy="zero", execution=Execution(progress=False)
    )
    got = _read(dst, "image")[0]
    assert got[1, 2, 3] == 0 and np.isfinite(got).all()
    dst = str(tmp_path / "k.zarr")
    convert_volumes(
        [tmp_path / "v.npy"], dst, nan_policy="keep", execution=Execution(progress=False)
    )
    np.testing.assert_array_equal(_read(dst, "image")[0], vol)
    with pytest.raises(SourceError, match="NaN/Inf"):  # an integer dtype cannot keep NaN
        convert_volumes(
            [tmp_path / "v.npy"],
            tmp_path / "i.zarr",
            dtype="int16",
            nan_policy="keep",
            execution=Execution(progress=False),
        )


def test_narrowing_never_wraps_around(tmp_path):
    vol = np.array([-20, 0, 100, 300, 1000], np.int32).reshape(1, 1, 5) * np.ones((2, 3, 1), int)
    np.save(tmp_path / "v.npy", vol.astype(np.int32))
    src = [tmp_path / "v.npy"]
    with pytest.raises(SourceError, match=r"v\.npy: values -20\.\.1000 do not fit uint8"):
        convert_volumes(
            src, tmp_path / "e.zarr", dtype="uint8", execution=Execution(progress=False)
        )
    dst = str(tmp_path / "c.zarr")
    convert_volumes(
        src, dst, dtype="uint8", on_overflow="clip", execution=Execution(progress=False)
    )
    assert _read(dst, "image")[0, 0, 0].tolist() == [0, 0, 100, 255, 255]
    dst = str(tmp_path / "s.zarr")
    convert_volumes(
        src, dst, dtype="uint8", on_overflow="scale", execution=Execution(progress=False)
    )
    stored = _read(dst, "image")[0].astype(np.float64)
    scaling = _meta(dst)["scaling"][0]
    assert stored.min() == 0 and stored.max() == 255
    restored = stored * scaling["slope"] + scaling["inter"]
    np.testing.assert_allclose(restored, vol, atol=scaling["slope"] / 2 + 1e-9)


def test_fractions_to_integers_and_float_overflow(tmp_path):
    np.save(tmp_path / "f.npy", np.full((2, 2, 2), 0.5, np.float32))
    with pytest.raises(SourceError, match="non-integer values cannot be stored as int16"):
        convert_volumes(
            [tmp_path / "f.npy"],
            tmp_path / "e.zarr",
            dtype="int16",
            execution=Execution(progress=False),
        )
    big = np.full((2, 2, 2), 1e39, np.float64)
    big[0, 0, 0] = -1e39
    np.save(tmp_path / "b.npy", big)
    with pytest.raises(SourceError, match="do not fit float32"):
        convert_volumes(
            [tmp_path / "b.npy"],
            tmp_path / "b.zarr",
            dtype="float32",
            execution=Execution(progress=False),
        )
    dst = str(tmp_path / "bs.zarr")
    convert_volumes(
        [tmp_path / "b.npy"],
        dst,
        dtype="float32",
        on_overflow="scale",
        execution=Execution(progress=False),
    )
    got, scaling = _read(dst, "image")[0], _meta(dst)["scaling"][0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.astype(np.float64) * scaling["slope"], big, rtol=1e-6)


def test_labels_must_be_integers_and_fit(tmp_path):
    np.save(tmp_path / "i.npy", np.zeros((2, 2, 2), np.uint8))
    np.save(tmp_path / "l.npy", np.full((2, 2, 2), 1.5, np.float32))
    with pytest.raises(SourceError, match=r"l\.npy: labels must be integers; got 1\.5"):
        convert_volumes(
            [tmp_path / "i.npy"],
            tmp_path / "x.zarr",
            labels=[tmp_path / "l.npy"],
            execution=Execution(progress=False),
        )
    np.save(tmp_path / "l.npy", np.full((2, 2, 2), 300, np.int32))
    with pytest.raises(SourceError, match=r"label values 300\.\.300 do not fit uint8"):
        convert_volumes(
            [tmp_path / "i.npy"],
            tmp_path / "x.zarr",
            labels=[tmp_path / "l.npy"],
            label_dtype="uint8",
            execution=Execution(progress=False),
        )


# -- resume, parallel writers, one-call NIfTI folder ---------------------------------------------


def _case_files(tmp_path: Path, n: int) -> tuple[list[str], list[str]]:
    shapes = [(6, 7, 5)] * n
    images, labels = _volumes(np.random.default_rng(7), shapes), _labels(shapes)
    img, lab = [], []
    for i in range(n):
        img.append(str(tmp_path / f"v{i}.npy")), lab.append(str(tmp_path / f"l{i}.npy"))
        np.save(img[-1], images[i]), np.save(lab[-1], labels[i])
    return img, lab


def _same_dataset(a: str, b: str) -> None:
    for name in ("image", "label", "label_index", "label_points"):
        np.testing.assert_array_equal(_read(a, name), _read(b, name))
    ma, mb = _meta(a), _meta(b)
    for key in ("shapes", "chunks", "scaling", "label_index"):
        assert ma[key] == mb[key]


@pytest.mark.parametrize("suffix", [".zarr", ".h5"])
def test_a_failed_conversion_resumes_and_equals_an_uninterrupted_one(tmp_path, suffix):
    img, lab = _case_files(tmp_path, 4)
    good = np.load(img[2])
    np.save(img[2], np.full((6, 7, 5), np.nan, np.float32))  # volume 2 fails
    dst = str(tmp_path / f"out{suffix}")
    with pytest.raises(SourceError, match=r"volume 2 .*v2\.npy"):
        convert_volumes(
            img,
            dst,
            labels=lab,
            dtype="int16",
            output=Output(chunks=4),
            execution=Execution(workers=1, progress=False),
        )
    assert not os.path.exists(dst)  # nothing published
    np.save(img[2], good)
    result = convert_volumes(
        img,
        dst,
        labels=lab,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    assert (result.resumed_blocks, result.written_blocks) == (2, 2)
    ref = str(tmp_path / f"ref{suffix}")
    convert_volumes(
        img,
        ref,
        labels=lab,
        output=Output(chunks=4),
        execution=Execution(workers=1, progress=False),
    )
    _same_dataset(dst, ref)


def test_reading_an_unfinished_conversion_says_incomplete(tmp_path):
    img, lab = _case_files(tmp_path, 2)
    np.save(img[1], np.zeros((6, 7, 6), np.int16))  # a shape mismatch is found up front
    with pytest.raises(SourceError):
        convert_volumes(
            img, "memory://vol-incomplete", labels=lab, execution=Execution(progress=False)
        )
    np.save(img[1], np.full((6, 7, 5), np.inf, np.float32))
    with pytest.raises(SourceError):  # written in place: arrays exist, no completion marker
        convert_volumes(
            img,
            "memory://vol-incomplete",
            labels=lab,
            execution=Execution(workers=1, progress=False),
        )
    with pytest.raises(IncompleteDatasetError):
        PatchDataset("memory://vol-incomplete", (2, 2, 2))


@pytest.mark.timeout(240)
def test_parallel_workers_write_the_same_dataset(tmp_path):
    img, lab = _case_files(tmp_path, 4)
    a, b = str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")
    convert_volumes(
        img, a, labels=lab, output=Output(chunks=4), execution=Execution(workers=2, progress=False)
    )
    convert_volumes(
        img, b, labels=lab, output=Output(chunks=4), execution=Execution(workers=1, progress=False)
    )
    _same_dataset(a, b)


def test_nifti_folder_in_one_call(tmp_path):
    root = tmp_path / "Task99_Toy"
    (root / "imagesTr").mkdir(parents=True), (root / "labelsTr").mkdir()
    (root / "dataset.json").write_text(json.dumps({"labels": {"0": "background", "1": "cyst"}}))
    for i in range(2):
        _nifti(root / "imagesTr" / f"toy_{i:03d}.nii.gz", np.full((4, 5, 6), i, np.int16))
        _nifti(root / "labelsTr" / f"toy_{i:03d}.nii.gz", np.eye(4, 5)[:, :, None].repeat(6, 2))
    (root / "imagesTr" / "._toy_000.nii.gz").write_bytes(b"\x00\x05macOS junk")
    dst = str(tmp_path / "toy.zarr")
    result = nifti_folder.convert(root, dst, execution=Execution(workers=1, progress=False))
    assert result.written_blocks == 2
    meta = _meta(dst)
    assert meta["class_names"] == ("background", "cyst") and meta["label_index"]["values"] == [0, 1]
    assert _read(dst, "label").dtype == np.int16  # float NIfTI labels -> int16
