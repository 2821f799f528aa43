"""convert_volumes(..., output=Output(ome_zarr=True)): one OME-Zarr 0.5 image per volume
that the NGFF models (ome-zarr-models) validate and ome-zarr-py opens, levels computed from the
source, the label index chunkio stored used by PatchDataset instead of reading the labels, and
the staged, resumable, rerun-safe writing of every other conversion."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import zarr

from chunkio import Execution, Output, write_arrays
from chunkio.convert.volumes import convert_volumes
from chunkio.errors import DestinationExistsError, FormatError, SourceError
from chunkio.patches import LabelBalancedSampler, PatchDataset, index_label_volume, ome_reads

ome_models = pytest.importorskip("ome_zarr_models.v05")
with warnings.catch_warnings():  # ome-zarr-py warns of its own deprecations when imported
    warnings.simplefilter("ignore")
    ome_io = pytest.importorskip("ome_zarr.io")
    ome_reader = pytest.importorskip("ome_zarr.reader")

#: even sizes down to level 2, so that block means have a plain numpy reference below
SHAPES = [(16, 24, 24), (12, 20, 24)]
SPACING = (2.0, 0.5, 0.75)
CHUNKS = 8
QUIET = Execution(workers=1, progress=False)


def _sources(folder: Path) -> tuple[list[str], list[str], list[np.ndarray], list[np.ndarray]]:
    """Volume 0 a NIfTI file with spacing (mm), volume 1 a ``.npy``; labels likewise."""
    rng = np.random.default_rng(3)
    folder.mkdir(exist_ok=True)
    images, labels, img_paths, lab_paths = [], [], [], []
    for v, shape in enumerate(SHAPES):
        image = rng.integers(0, 4000, shape).astype(np.uint16)
        label = np.zeros(shape, np.uint8)
        label[2 + v : 6, 3:9, 4:10] = 1
        label[9, 10 + v : 14, 5:7] = 2
        if v == 0:
            affine = np.diag([*SPACING, 1.0])
            img_paths.append(str(folder / "brain_a.nii.gz"))
            lab_paths.append(str(folder / "brain_a_seg.nii.gz"))
            for data, where in ((image, img_paths[-1]), (label, lab_paths[-1])):
                nifti = nib.Nifti1Image(data, affine)
                nifti.header.set_xyzt_units("mm")
                nib.save(nifti, where)
        else:
            img_paths.append(str(folder / "brain_b.npy"))
            lab_paths.append(str(folder / "brain_b_seg.npy"))
            np.save(img_paths[-1], image)
            np.save(lab_paths[-1], label)
        images.append(image)
        labels.append(label)
    return img_paths, lab_paths, images, labels


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("ome_out")
    img, lab, images, labels = _sources(folder / "src")
    result = convert_volumes(
        img,
        str(folder / "out.zarr"),
        labels=lab,
        class_names=["background", "tumour", "edema"],
        output=Output(chunks=CHUNKS, ome_zarr=True),
        execution=QUIET,
    )
    return {"result": result, "images": images, "labels": labels, "img": img, "lab": lab}


def _mean2(a: np.ndarray) -> np.ndarray:
    d, h, w = a.shape
    return np.rint(a.reshape(d // 2, 2, h // 2, 2, w // 2, 2).mean(axis=(1, 3, 5)))


def test_images_validate_against_the_ngff_models_and_open_in_ome_zarr_py(converted):
    result = converted["result"]
    assert [os.path.basename(p) for p in result.images] == ["brain_a.ome.zarr", "brain_b.ome.zarr"]
    for v, path in enumerate(result.images):
        model = ome_models.Image.from_zarr(zarr.open_group(path, mode="r"))
        label_model = ome_models.ImageLabel.from_zarr(
            zarr.open_group(f"{path}/labels/label", mode="r")
        )
        assert [a.name for a in model.ome_attributes.multiscales[0].axes] == ["z", "y", "x"]
        props = label_model.ome_attributes.image_label.properties
        assert [(p.label_value, p.model_extra["name"]) for p in props] == [
            (0, "background"),
            (1, "tumour"),
            (2, "edema"),
        ]
        nodes = list(ome_reader.Reader(ome_io.parse_url(path))())
        image_node = nodes[0]
        label_node = next(n for n in nodes if n.load(ome_reader.Label) is not None)
        want_image = [converted["images"][v].astype(np.float64)]
        want_label = [converted["labels"][v]]
        for _ in range(2):
            want_image.append(_mean2(want_image[-1]))
            want_label.append(want_label[-1][::2, ::2, ::2])
        assert len(image_node.data) == len(label_node.data) == 3  # 8^3 chunks: s2 fits one
        for k in range(3):
            np.testing.assert_array_equal(np.asarray(image_node.data[k]), want_image[k])
            np.testing.assert_array_equal(np.asarray(label_node.data[k]), want_label[k])


#: the NGFF 0.5 JSON schemas, as the specification publishes them (tests/data/ngff/README.md)
NGFF_SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "ngff" / "0.5"


def _ngff_validator(name: str) -> Any:
    """A validator for the NGFF 0.5 schema ``name``, its ``$ref``s to the other published
    schemas resolved to the copies in tests/data (offline)."""
    import json

    jsonschema = pytest.importorskip("jsonschema")
    specs = pytest.importorskip("referencing.jsonschema")
    referencing = pytest.importorskip("referencing")
    schemas = {p.stem: json.loads(p.read_text()) for p in NGFF_SCHEMAS.glob("*.schema")}
    registry = referencing.Registry().with_resources(
        (doc["$id"], referencing.Resource.from_contents(
            doc, default_specification=specs.DRAFT202012))
        for doc in schemas.values()
    )  # fmt: skip
    return jsonschema.Draft202012Validator(schemas[name], registry=registry)


def test_images_and_labels_validate_against_the_ngff_json_schemas(converted):
    """Every image's and label image's ``zarr.json`` attributes against the specification's
    strict 0.5 schemas (a label image is an image too); a broken copy of the same attributes
    is refused, so the check is live."""
    image, label = _ngff_validator("strict_image"), _ngff_validator("strict_label")
    for path in converted["result"].images:
        attrs = dict(zarr.open_group(path, mode="r").attrs)
        image.validate(attrs)
        label_attrs = dict(zarr.open_group(f"{path}/labels/label", mode="r").attrs)
        image.validate(label_attrs)
        label.validate(label_attrs)
        colours = label_attrs["ome"]["image-label"]["colors"]
        assert [c["label-value"] for c in colours] == [0, 1, 2]  # those held and named
        assert colours[0]["rgba"] == [0, 0, 0, 0]
        broken = {"ome": {**attrs["ome"], "version": "0.4"}}
        assert not image.is_valid(broken)
        axes_gone = [
            {k: v for k, v in m.items() if k != "axes"} for m in attrs["ome"]["multiscales"]
        ]
        assert not image.is_valid({"ome": {**attrs["ome"], "multiscales": axes_gone}})
        assert not label.is_valid(attrs)  # an image is not a label image


@pytest.mark.parametrize("case", ["instances", "uint64"])
def test_label_colours_of_instances_and_of_uint64_values(tmp_path, case):
    """A volume of many instance ids colours 0 and the named values only (its metadata stays
    small), a uint64 value past 2**63 is coloured as itself; both pass the strict schema."""
    rng = np.random.default_rng(1)
    image = rng.integers(0, 4000, (8, 16, 16)).astype(np.uint16)
    if case == "instances":
        label = np.arange(8 * 16 * 16, dtype=np.uint32).reshape(8, 16, 16) % 1000
        names, want = ["background", "cell"], [0, 1]
    else:
        label = np.zeros((8, 16, 16), np.uint64)
        label[2:4, 3:6, 4:9] = 2**63 + 5
        names, want = None, [0, 2**63 + 5]
    np.save(tmp_path / "img.npy", image)
    np.save(tmp_path / "lab.npy", label)
    result = convert_volumes(
        [str(tmp_path / "img.npy")], str(tmp_path / "out.zarr"), labels=[str(tmp_path / "lab.npy")],
        class_names=names, output=Output(chunks=CHUNKS, ome_zarr=True), execution=QUIET,
    )  # fmt: skip
    attrs = dict(zarr.open_group(f"{result.images[0]}/labels/label", mode="r").attrs)
    assert [c["label-value"] for c in attrs["ome"]["image-label"]["colors"]] == want
    _ngff_validator("strict_label").validate(attrs)


def test_levels_carry_spacing_units_and_checksums(converted):
    path = converted["result"].images[0]  # the NIfTI volume: spacing in millimetres
    meta = zarr.open_group(path, mode="r").attrs["ome"]["multiscales"][0]
    assert {a["unit"] for a in meta["axes"]} == {"millimeter"}
    for k, ds in enumerate(meta["datasets"]):
        scale, shift = (t[t["type"]] for t in ds["coordinateTransformations"])
        assert scale == pytest.approx([s * 2**k for s in SPACING])
        assert shift == pytest.approx([s * (2**k - 1) / 2 for s in SPACING])
    s0 = zarr.open_array(f"{path}/s0", mode="r")
    assert s0.chunks == (CHUNKS,) * 3 and s0.metadata.dimension_names == ("z", "y", "x")
    assert any(c.to_dict()["name"] == "crc32c" for c in s0.metadata.codecs)


def test_patch_dataset_reads_the_source_and_the_stored_label_index(converted, monkeypatch):
    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the label volumes were read to index them")

    monkeypatch.setattr(ome_reads, "index_labels_by_slabs", never)
    sampler = LabelBalancedSampler(24, foreground=0.5, seed=1)
    ds = PatchDataset(list(converted["result"].images), (8, 8, 8), sampler=sampler)
    keys = ds.sampler.keys()
    batch = ds.read_patches(keys)
    for i, (v, z, y, x) in enumerate(keys.tolist()):
        box = (slice(z, z + 8), slice(y, y + 8), slice(x, x + 8))
        np.testing.assert_array_equal(batch["image"][i], converted["images"][v][box])
        np.testing.assert_array_equal(batch["label"][i], converted["labels"][v][box])
    stored = sampler.label_index
    monkeypatch.undo()
    rows, points = [], []
    for v, label in enumerate(converted["labels"]):
        r, p = index_label_volume(label, v, (CHUNKS,) * 3)
        rows.append(r), points.append(p)
    np.testing.assert_array_equal(stored.rows, np.concatenate(rows))
    np.testing.assert_array_equal(stored.points, np.concatenate(points))


def test_a_stored_index_pointing_outside_the_volume_is_refused(converted, tmp_path):
    import shutil

    path = str(tmp_path / "copy.ome.zarr")
    shutil.copytree(converted["result"].images[1], path)
    points = zarr.open_array(f"{path}/chunkio/label_points", mode="r+")
    bad = points[...]
    bad[0, 0, 0] = 10**6
    points[...] = bad
    with pytest.raises(FormatError, match=r"chunkio\.label_index: expected .*points inside"):
        PatchDataset(path, (8, 8, 8), sampler=LabelBalancedSampler(4))


def test_a_chunk_missing_from_chunkios_own_output_is_an_error_not_zeros(converted, tmp_path):
    """chunkio writes every chunk of its OME-Zarr images (all-zero ones too): one that is gone
    is lost data. Stores of other writers, which skip fill-value chunks, read them as zeros."""
    import shutil

    from chunkio.errors import ChunkioError

    path = tmp_path / "copy.ome.zarr"
    shutil.copytree(converted["result"].images[0], path)
    chunk = next(p for p in sorted((path / "s0" / "c").rglob("*")) if p.is_file())
    chunk.unlink()
    ds = PatchDataset(str(path), (8, 8, 8), fields=("image",))
    with pytest.raises(ChunkioError, match="s0"):
        ds.read_patches(np.array([[0, 0, 0, 0]]))


def test_interrupted_run_resumes_reruns_return_and_other_requests_are_refused(converted, tmp_path):
    img, lab, *_ = _sources(tmp_path / "src")  # the fixture's data, at other paths
    good = np.load(img[1])
    np.save(img[1], np.full(good.shape, np.nan, np.float32))  # volume 1 fails
    dst = str(tmp_path / "out.zarr")
    kw: dict[str, Any] = {"labels": lab, "execution": QUIET}
    kw["class_names"] = ["background", "tumour", "edema"]
    ome = Output(chunks=CHUNKS, ome_zarr=True)
    with pytest.raises(SourceError, match=r"volume 1 .*brain_b\.npy"):
        convert_volumes(img, dst, dtype="uint16", output=ome, **kw)
    assert not os.path.exists(dst)  # nothing published
    np.save(img[1], good)
    result = convert_volumes(img, dst, output=ome, **kw)
    assert (result.resumed_blocks, result.written_blocks) == (1, 1)
    again = convert_volumes(img, dst, output=ome, **kw)
    assert again.unchanged and again.images == result.images
    for a, b in zip(result.images, converted["result"].images, strict=True):
        ga, gb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
        assert ga.attrs["ome"] == gb.attrs["ome"]
        for name in ("s0", "s2", "labels/label/s0", "labels/label/s2", "chunkio/label_points"):
            np.testing.assert_array_equal(ga[name][...], gb[name][...])
    with pytest.raises(DestinationExistsError, match="option ome_zarr was null, now 2"):
        convert_volumes(img, dst, output=Output(chunks=CHUNKS, ome_zarr=2), **kw)


def test_channels_and_levels_asked_for(tmp_path):
    image = tmp_path / "v.npy"  # 2 channels of 1 x 5 x 9 voxels
    data = np.random.default_rng(0).integers(0, 250, (2, 1, 5, 9), dtype=np.uint8)
    np.save(image, data)
    out = convert_volumes(
        str(image), str(tmp_path / "o.zarr"), output=Output(ome_zarr=4), execution=QUIET
    )
    group = zarr.open_group(out.images[0], mode="r")
    model = ome_models.Image.from_zarr(group)
    assert [a.name for a in model.ome_attributes.multiscales[0].axes] == ["c", "z", "y", "x"]
    datasets = group.attrs["ome"]["multiscales"][0]["datasets"]
    shapes = [group[ds["path"]].shape for ds in datasets]
    assert shapes == [(2, 1, 5, 9), (2, 1, 3, 5), (2, 1, 2, 3), (2, 1, 1, 2)]  # z stays 1
    assert datasets[1]["coordinateTransformations"][0]["scale"] == [1.0, 1.0, 2.0, 2.0]
    assert "labels" not in group
    ds = PatchDataset(out.images[0], (1, 5, 9))
    np.testing.assert_array_equal(ds.read_patches(ds.sampler.keys())["image"][0], data)


@pytest.mark.timeout(60)
def test_worker_processes_write_the_same_images(converted, tmp_path):
    img, lab, *_ = _sources(tmp_path / "src")
    out = convert_volumes(
        img,
        str(tmp_path / "par.zarr"),
        labels=lab,
        class_names=["background", "tumour", "edema"],
        output=Output(chunks=CHUNKS, ome_zarr=True),
        execution=Execution(workers=2, progress=False),
    )
    for a, b in zip(out.images, converted["result"].images, strict=True):
        ga, gb = zarr.open_group(a, mode="r"), zarr.open_group(b, mode="r")
        for name in ("s0", "s1", "labels/label/s1", "chunkio/label_index"):
            np.testing.assert_array_equal(ga[name][...], gb[name][...])


def test_bad_requests_are_refused(tmp_path):
    img, *_ = _sources(tmp_path / "src")
    ome = Output(ome_zarr=True)
    with pytest.raises(ValueError, match=r"writes a Zarr v3 group .*; got format 'hdf5'"):
        convert_volumes(img, str(tmp_path / "out.h5"), output=ome, execution=QUIET)
    with pytest.raises(ValueError, match="number of levels >= 1; got 0"):
        Output(ome_zarr=0)
    with pytest.raises(ValueError, match=r"write_arrays: Output\(ome_zarr=...\) is for volumes"):
        write_arrays(str(tmp_path / "a.zarr"), {"x": np.zeros(3)}, output=ome)
    other = tmp_path / "other"
    other.mkdir()
    np.save(other / "brain_b.npy", np.load(img[1]))
    with pytest.raises(SourceError, match=r"would both be the image 'brain_b\.ome\.zarr'"):
        convert_volumes(
            [*img, str(other / "brain_b.npy")],
            str(tmp_path / "o.zarr"),
            output=ome,
            execution=QUIET,
        )
