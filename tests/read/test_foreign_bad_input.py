"""Bad input in stores chunkio did not write: links, virtual datasets, filters and codecs this
installation cannot decode. Each is a typed error naming the file and the array, raised when
the dataset (or loader) is made, before any worker starts; soft links inside an HDF5 file and
virtual datasets over the same file simply read."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
import torch.utils.data
from foreign_stores import FIELDS, N, data, h5py_file, zarr_v2, zarr_v3, zarr_v3_sharded

import chunkio
from chunkio.backends import open_reader
from chunkio.errors import FormatError, MissingFieldError, OptionalDependencyError, UnsafeInputError


def _loader_labels(ds: chunkio.ChunkDataset, context: str) -> np.ndarray[Any, Any]:
    loader = torch.utils.data.DataLoader(
        ds, batch_size=64, num_workers=2, multiprocessing_context=context
    )
    return np.concatenate([np.asarray(y) for _, y in loader])


# -- links -----------------------------------------------------------------------------------


def test_soft_links_inside_the_file_are_followed(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    with h5py.File(path, "a") as f:
        f["links/images"] = h5py.SoftLink("/train/images")  # absolute
        f["train/alias"] = h5py.SoftLink("labels")  # relative to its group
        f["chain"] = h5py.SoftLink("/links/images")  # a soft link to a soft link
        f["t"] = h5py.SoftLink("/train")  # a soft link to a group, then a path in it
    images, labels = data()
    for fields in (
        {"image": "chain", "label": "train/alias"},
        {"image": "t/images", "l": "t/labels"},
    ):
        ds = chunkio.ChunkDataset(path, fields=fields)  # no trust_codecs needed
        batch = ds.read_batch([5, 299, 0])
        np.testing.assert_array_equal(batch["image"], images[[5, 299, 0]])
        np.testing.assert_array_equal(list(batch.values())[1], labels[[5, 299, 0]])
    reader = open_reader(path)
    try:
        assert reader.read_path("chain") == "raw"  # data in this file: chunkio's own reads
        # and where its chunks lie, for a remote reader of the file's bytes
        raw, _ = reader.describe_raw("chain")  # type: ignore[attr-defined]
        assert raw is not None and raw.index
    finally:
        reader.close()
    ds = chunkio.ChunkDataset(path, fields={"image": "links/images", "label": "train/alias"})
    np.testing.assert_array_equal(_loader_labels(ds, "fork"), labels)


def _external(f: h5py.File, other: Path) -> str:
    with h5py.File(other, "w") as g:
        g.create_group("train")
        g["train/images"] = f["train/images"][...]
    f["ext"] = h5py.ExternalLink(str(other), "/train/images")
    return "ext"


def _external_group(f: h5py.File, other: Path) -> str:
    _external(f, other)
    f["outside"] = h5py.ExternalLink(str(other), "/train")  # a group in another file
    return "outside/images"


def _soft_to_external(f: h5py.File, other: Path) -> str:
    _external(f, other)
    f["inner"] = h5py.SoftLink("/ext")
    return "inner"


@pytest.mark.parametrize("edit", [_external, _external_group, _soft_to_external])
def test_links_out_of_the_file_are_refused_when_the_loader_is_made(
    tmp_path: Path, edit: Callable[[h5py.File, Path], str]
) -> None:
    path = h5py_file(tmp_path)
    with h5py.File(path, "a") as f:
        name = edit(f, tmp_path / "other.h5")
    fields = {"image": name, "label": "train/labels"}
    with pytest.raises(UnsafeInputError, match=r"ExternalLink.*trust_codecs=True") as info:
        chunkio.make_loader(path, 32, fields=fields, num_workers=2)
    assert str(path) in str(info.value) and repr(name) in str(info.value)
    trusted = chunkio.ChunkDataset(path, fields=fields, trust_codecs=True)
    np.testing.assert_array_equal(trusted.read_batch([7])["image"], data()[0][[7]])


def test_contiguous_data_h5py_reads_is_ordered_by_runs_not_as_one_chunk(tmp_path: Path) -> None:
    """Through a trusted external link chunkio's raw reads stand aside and h5py reads a
    contiguous array: it is still ordered by runs of about 1 MiB (as raw reads cut it), never
    as one chunk of the whole array (a pool that must hold all of it)."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 255, (2000, 3, 32, 32), dtype=np.uint8)  # 3,072 bytes a row
    with h5py.File(tmp_path / "other.h5", "w") as g:
        g["images"] = images  # contiguous, uncompressed
    path = tmp_path / "user.h5"
    with h5py.File(path, "w") as f:
        f["images"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/images")
        f["labels"] = np.arange(2000)
    ds = chunkio.ChunkDataset(path, fields=["images", "labels"], trust_codecs=True)
    assert ds.samples_per_chunk == (1 << 20) // 3072  # 341
    batch = ds.read_batch([1999, 0, 341])
    np.testing.assert_array_equal(batch["images"], images[[1999, 0, 341]])


def test_dangling_and_looping_soft_links_are_typed_errors(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    with h5py.File(path, "a") as f:
        f["dangling"] = h5py.SoftLink("/train/nope")
        f["a"] = h5py.SoftLink("/b")
        f["b"] = h5py.SoftLink("/a")
    with pytest.raises(MissingFieldError, match=r"user.h5: no array 'dangling'"):
        chunkio.ChunkDataset(path, fields={"image": "dangling", "label": "train/labels"})
    with pytest.raises(FormatError, match=r"user.h5: array 'a'.*loop of soft links"):
        chunkio.ChunkDataset(path, fields={"image": "a", "label": "train/labels"})


@pytest.mark.parametrize("make", [h5py_file, zarr_v3, zarr_v2], ids=["h5py", "zarr v3", "zarr v2"])
def test_a_group_is_not_an_array_and_a_missing_array_is_told_by_type(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    """Under a folder whose name says "missing", a group named as a field is a FormatError
    saying it is a group (not a MissingFieldError); only an absent array is one, listing the
    arrays found."""
    folder = tmp_path / "missing_runs"
    folder.mkdir()
    path = make(folder)
    where = re.escape(str(path))
    with pytest.raises(
        FormatError, match=rf"{where}: 'train' is a group \(attributes \[\]\), not an array"
    ) as err:
        chunkio.ChunkDataset(path, fields=["train/images", "train"])
    assert not isinstance(err.value, MissingFieldError)
    with pytest.raises(MissingFieldError, match=rf"{where}: no array 'grp'; arrays found: train/"):
        chunkio.ChunkDataset(path, fields=["train/images", "grp"])


# -- virtual datasets ------------------------------------------------------------------------


def _virtual(path: Path, source: str, source_name: str) -> None:
    """``vimages``: the images, mapped in two halves from ``source_name`` of ``source``."""
    images = data()[0]
    layout = h5py.VirtualLayout(shape=images.shape, dtype=images.dtype)
    half = N // 2
    for part in (slice(0, half), slice(half, N)):
        layout[part] = h5py.VirtualSource(source, source_name, shape=images.shape)[part]
    with h5py.File(path, "a") as f:
        f.create_virtual_dataset("vimages", layout, fillvalue=7)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_virtual_dataset_over_its_own_file_reads_under_workers(
    tmp_path: Path, context: str
) -> None:
    path = h5py_file(tmp_path)
    _virtual(path, ".", "/train/images")
    images, labels = data()
    ds = chunkio.ChunkDataset(path, fields={"image": "vimages", "label": "train/labels"})
    np.testing.assert_array_equal(
        ds.read_batch([0, 149, 150, 299])["image"], images[[0, 149, 150, 299]]
    )
    # one spawned worker (each imports torch afresh), two forked ones
    workers = 2 if context == "fork" else 1
    loader = torch.utils.data.DataLoader(
        ds, batch_size=64, num_workers=workers, multiprocessing_context=context
    )
    for _ in range(2):  # workers start and exit each epoch (a spawned one crashed on exit)
        got = [(np.asarray(x), np.asarray(y)) for x, y in loader]
        np.testing.assert_array_equal(np.concatenate([x for x, _ in got]), images)
        np.testing.assert_array_equal(np.concatenate([y for _, y in got]), labels)


@pytest.mark.timeout(120)
def test_a_virtual_dataset_over_other_files_is_refused_unless_trusted(tmp_path: Path) -> None:
    images, labels = data()
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as g:
        g["images"] = images
    path = h5py_file(tmp_path)
    _virtual(path, str(source), "images")
    fields = {"image": "vimages", "label": "train/labels"}
    with pytest.raises(UnsafeInputError, match=r"'vimages' is a virtual dataset.*source.h5"):
        chunkio.make_loader(path, 32, fields=fields, num_workers=2)
    trusted = chunkio.ChunkDataset(path, fields=fields, trust_codecs=True)
    np.testing.assert_array_equal(_loader_labels(trusted, "fork"), labels)
    np.testing.assert_array_equal(trusted.read_batch([3, 290])["image"], images[[3, 290]])
    del trusted
    source.unlink()  # HDF5 would read the missing part as the fill value, 7s
    with pytest.raises(FormatError, match=r"user.h5: virtual dataset 'vimages'.*does not exist"):
        chunkio.ChunkDataset(path, fields=fields, trust_codecs=True)


# -- filters and codecs this installation cannot decode --------------------------------------


def test_an_hdf5_filter_that_is_not_installed_names_hdf5plugin(tmp_path: Path) -> None:
    images, labels = data()
    path = tmp_path / "zstd.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(32, 3, 8, 8), **hdf5plugin.Zstd())
        f["labels"] = labels
    fields = {"image": "images", "label": "labels"}
    h5py.h5z.unregister_filter(hdf5plugin.ZSTD_ID)  # as if hdf5plugin were not installed
    try:
        for trust in (False, True):
            with pytest.raises(OptionalDependencyError) as info:
                if trust:
                    chunkio.ChunkDataset(path, fields=fields, trust_codecs=True)
                else:
                    chunkio.make_loader(path, 32, fields=fields, num_workers=2)
            text = str(info.value)
            assert "zstd.h5: array 'images'" in text and "'zstd' (id 32015)" in text, text
            assert "pip install hdf5plugin" in text, text
    finally:
        hdf5plugin.register("zstd", force=True)
    ds = chunkio.ChunkDataset(path, fields=fields)
    np.testing.assert_array_equal(ds.read_batch([31, 32])["image"], images[[31, 32]])


def _edit_json(document: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    meta = json.loads(document.read_text())
    edit(meta)
    document.write_text(json.dumps(meta))


def test_a_zarr_v2_codec_no_registry_knows_names_its_package(tmp_path: Path) -> None:
    path = zarr_v2(tmp_path)

    def jpeg2k(meta: dict[str, Any]) -> None:
        meta["compressor"] = {"id": "imagecodecs_jpeg2k", "level": 80}

    _edit_json(path / "train" / "images" / ".zarray", jpeg2k)
    with pytest.raises(UnsafeInputError, match=r"'imagecodecs_jpeg2k' is not installed either"):
        chunkio.make_loader(path, 32, fields=FIELDS, num_workers=2)
    with pytest.raises(OptionalDependencyError) as info:
        chunkio.ChunkDataset(path, fields=FIELDS, trust_codecs=True)
    text = str(info.value)
    assert "v2.zarr: array 'train/images' (Zarr v2)" in text, text
    assert "['imagecodecs_jpeg2k']" in text and "pip install imagecodecs" in text, text


@pytest.mark.parametrize(
    ("array", "codec", "package"),
    [("labels", "numcodecs.zfpy", "pip install zfpy"), ("images", "my_codec", "install the")],
)
def test_a_zarr_v3_codec_no_registry_knows_names_its_package(
    tmp_path: Path, array: str, codec: str, package: str
) -> None:
    path = zarr_v3_sharded(tmp_path)

    def add(meta: dict[str, Any]) -> None:
        codecs = meta["codecs"]
        if codecs[0]["name"] == "sharding_indexed":  # inside the shards
            codecs = codecs[0]["configuration"]["codecs"]
        codecs.append({"name": codec, "configuration": {}})

    _edit_json(path / array / "zarr.json", add)
    fields = {"image": "images", "label": "labels"}
    with pytest.raises(UnsafeInputError, match=rf"'{codec}' is not installed either"):
        chunkio.ChunkDataset(path, fields=fields)
    with pytest.raises(OptionalDependencyError) as info:
        chunkio.ChunkDataset(path, fields=fields, trust_codecs=True)
    text = str(info.value)
    assert f"v3.zarr: array '{array}' declares codec(s) ['{codec}']" in text, text
    assert package in text and "Traceback" not in text, text
