"""Untrusted input: codecs, filters, links, field names and indices (RELIABILITY rows 23, 25, 26).

A dataset is data someone else may have written. Opening one must never run code (the
numcodecs pickle codec), follow a link out of the file, decode with a filter chunkio does not
vouch for, or turn a field name into a path outside the dataset root, unless the caller says
``trust_codecs=True``. Batch indices from a sampler are checked as strictly.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest
import torch
from conftest import zarr_chunk_file

from chunkio import ChunkDataset, Output, write_arrays
from chunkio.backends import open_reader
from chunkio.diagnose.dataset_report import verify
from chunkio.errors import OptionalDependencyError, UnsafeInputError

N, SPC = 40, 8


def arrays() -> dict[str, np.ndarray]:
    return {"image": np.arange(N * 4, dtype="f4").reshape(N, 4), "label": np.arange(N)}


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- row 25: codecs, filters and links --------------------------------------------------------


class _Touch:
    """Unpickling this creates a file: the proof that a chunk was decoded with pickle."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def _pickle_codecs(meta: dict[str, Any]) -> None:
    meta["codecs"] = [{"name": "bytes"}, {"name": "numcodecs.pickle"}]


def _unknown_codec(meta: dict[str, Any]) -> None:
    meta["codecs"].insert(1, {"name": "my-compressor", "configuration": {}})


def _pickle_inside_shard(meta: dict[str, Any]) -> None:
    inner = [{"name": "bytes"}, {"name": "numcodecs.pickle"}]
    meta["codecs"] = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": meta["chunk_grid"]["configuration"]["chunk_shape"],
                "codecs": inner,
                "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
            },
        }
    ]


@pytest.mark.parametrize("edit", [_pickle_codecs, _unknown_codec])
def test_zarr_unsafe_codec_is_refused_before_decoding(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None]
) -> None:
    path = tmp_path / "d.zarr"
    write_arrays(path, arrays(), shuffle=False, output=Output(chunks=SPC))  # just image, label
    meta_path = path / "image" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta_path.write_text(json.dumps(meta))
    marker = tmp_path / "pickle-ran"
    zarr_chunk_file(path, "image", 0).write_bytes(pickle.dumps(_Touch(str(marker))))

    with pytest.raises(UnsafeInputError, match=r"'image'.*codec.*trust_codecs=True"):
        ChunkDataset(path)
    reader = open_reader(path)
    with pytest.raises(UnsafeInputError, match="'image'"):
        reader.read_into("image", [(0, SPC)], np.empty((SPC, 4), "f4"))
    assert reader.array_names() == ["image", "label"]  # listing decodes nothing
    # Trusting cannot make zarr decode a codec it does not know: a typed error naming the
    # codec and what to install, not zarr's traceback.
    codec = meta["codecs"][1]["name"]
    with pytest.raises(OptionalDependencyError, match=rf"'image'.*\['{codec}'\].*install"):
        ChunkDataset(path, trust_codecs=True)
    assert not marker.exists(), "a chunk was unpickled"


def test_an_unsafe_codec_inside_shards_is_refused_before_anything_is_decoded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.zarr"
    write_arrays(path, arrays(), output=Output(chunks=SPC))
    meta_path = path / "image" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    _pickle_inside_shard(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UnsafeInputError, match=r"numcodecs.pickle"):
        ChunkDataset(path)


def _external_link(f: h5py.File, other: Path) -> None:
    with h5py.File(other, "w") as g:
        g.create_dataset("image", data=f["image"][...], chunks=(SPC, 4))
    del f["image"]
    f["image"] = h5py.ExternalLink(str(other), "/image")


def _virtual_dataset(f: h5py.File, other: Path) -> None:
    with h5py.File(other, "w") as g:
        g.create_dataset("image", data=f["image"][...], chunks=(SPC, 4))
    layout = h5py.VirtualLayout(shape=(N, 4), dtype="f4")
    layout[:] = h5py.VirtualSource(str(other), "image", shape=(N, 4))
    del f["image"]
    f.create_virtual_dataset("image", layout, fillvalue=0)


def _external_storage(f: h5py.File, other: Path) -> None:
    data = f["image"][...]
    other.write_bytes(data.tobytes())
    del f["image"]
    f.create_dataset(
        "image", shape=data.shape, dtype=data.dtype, external=[(str(other), 0, data.nbytes)]
    )


def _plugin_filter(f: h5py.File, other: Path) -> None:
    data = f["image"][...]
    del f["image"]
    f.create_dataset("image", data=data, chunks=(SPC, 4), **hdf5plugin.BZip2())


def test_plugin_compressors_that_cannot_run_code_open_without_trust(tmp_path: Path) -> None:
    path = tmp_path / "d.h5"
    write_arrays(path, arrays(), shuffle=False, output=Output(chunks=SPC))  # row i = arrays()[i]
    with h5py.File(path, "a") as f:
        _plugin_filter(f, tmp_path)  # bzip2, decoded by h5py through hdf5plugin
    ds = ChunkDataset(path, fields=["image"])
    batch = ds.read_batch(list(range(len(ds))))
    np.testing.assert_array_equal(np.asarray(batch["image"]), arrays()["image"])


def _unknown_filter(f: h5py.File, other: Path) -> None:
    data = f["image"][...]
    del f["image"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((SPC, 4))
    # Optional, so HDF5 writes the data although no filter 40000 is registered anywhere.
    dcpl.set_filter(40000, h5py.h5z.FLAG_OPTIONAL, ())
    space = h5py.h5s.create_simple((N, 4))
    dsid = h5py.h5d.create(f.id, b"image", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl)
    h5py.Dataset(dsid)[...] = data


HDF5_CASES = {
    "external link": (_external_link, "ExternalLink"),
    "virtual dataset": (_virtual_dataset, "virtual dataset"),
    "external storage": (_external_storage, "external raw files"),
    "unknown filter": (_unknown_filter, "filter id 40000"),
}


@pytest.mark.parametrize("case", list(HDF5_CASES))
def test_hdf5_links_and_filters_are_refused(tmp_path: Path, case: str) -> None:
    edit, what = HDF5_CASES[case]
    path = tmp_path / "d.h5"
    write_arrays(path, arrays(), shuffle=False, output=Output(chunks=SPC))  # row i = arrays()[i]
    with h5py.File(path, "a") as f:
        edit(f, tmp_path / "other.h5")

    with pytest.raises(UnsafeInputError) as info:
        ChunkDataset(path)
    text = str(info.value)
    assert "'image'" in text and what in text and "trust_codecs=True" in text, text
    assert str(path) in text
    if case not in ("virtual dataset", "external storage"):  # unchunked: nothing to read back
        trusted = ChunkDataset(path, trust_codecs=True)
        np.testing.assert_array_equal(
            trusted.read_batch([1, 30])["image"], arrays()["image"][[1, 30]]
        )


# -- row 26: field names that would be paths --------------------------------------------------

BAD_NAMES = ["../x", "/abs", "a/b", "a\\b", "x\x00", "..", ".", "", "x" * 200]


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_field_names_are_refused_on_write(tmp_path: Path, fmt: str, name: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    before = listing(tmp_path)
    dst = root / ("d.zarr" if fmt == "zarr" else "d.h5")
    with pytest.raises(UnsafeInputError, match="field name"):
        write_arrays(dst, {"ok": np.arange(4), name: np.arange(4)}, output=Output(chunks=2))
    assert listing(tmp_path) == before, "nothing written anywhere"


def _tamper_zarr(path: Path, name: str) -> None:
    meta = json.loads((path / "zarr.json").read_text())
    fields = meta["attributes"]["chunkio"]["fields"]
    fields[name] = fields.pop("label")
    (path / "zarr.json").write_text(json.dumps(meta))


def _tamper_hdf5(path: Path, name: str) -> None:
    with h5py.File(path, "a") as f:
        meta = json.loads(f.attrs["chunkio"])
        meta["fields"][name] = meta["fields"].pop("label")
        f.attrs["chunkio"] = json.dumps(meta)


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
@pytest.mark.parametrize("name", ["../x", "/abs", "a/b", "a\\b", "x\x00", ".."])
def test_bad_field_names_are_refused_on_open(tmp_path: Path, fmt: str, name: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    path = root / ("d.zarr" if fmt == "zarr" else "d.h5")
    write_arrays(path, arrays(), output=Output(chunks=SPC))
    (_tamper_zarr if fmt == "zarr" else _tamper_hdf5)(path, name)
    before = listing(tmp_path)
    with pytest.raises(UnsafeInputError, match="field name") as info:
        ChunkDataset(path)
    assert str(path) in str(info.value) and repr(name) in str(info.value)
    try:  # verify may refuse the dataset outright or report it: either way, not "ok"
        report = verify(path)
    except UnsafeInputError:
        pass
    else:
        assert not report.ok
    assert listing(tmp_path) == before, "nothing created or removed"


# -- row 23: what __getitems__ accepts as indices ------------------------------------------------


@pytest.fixture
def dataset(make_dataset: Callable[..., tuple[str, dict[str, np.ndarray]]]) -> ChunkDataset:
    path, _ = make_dataset("zarr", arrays(), samples_per_chunk=SPC)
    return ChunkDataset(path, fields=["image", "label"])


@pytest.mark.parametrize(
    "indices",
    [
        [np.int64(3), np.int32(-1), np.uint8(9)],
        np.array([3, 39, 9], dtype=np.int16),
        torch.tensor([3, -1, 9]),
        range(3, 12, 4),
    ],
    ids=["numpy-scalars", "int16-array", "torch-tensor", "range"],
)
def test_integer_index_types_equal_per_sample_reads(dataset: ChunkDataset, indices: Any) -> None:
    x, y = dataset.__getitems__(indices).collated
    want = [int(i) % N for i in indices]
    assert y.tolist() == want
    for row, i in zip(x, want, strict=True):
        assert torch.equal(row, dataset[i][0])


@pytest.mark.parametrize(
    ("indices", "error"),
    [
        ([True, False], TypeError),
        (np.array([True, False]), TypeError),
        (torch.tensor([True]), TypeError),
        ([1.0, 2.0], TypeError),
        (torch.tensor([1.5]), TypeError),
        (["1"], TypeError),
        ([[1, 2], [3, 4]], ValueError),
        ([0, N], IndexError),
        (torch.tensor([-N - 1]), IndexError),
    ],
)
def test_bad_indices_are_refused(dataset: ChunkDataset, indices: Any, error: type) -> None:
    with pytest.raises(error) as info:
        dataset.__getitems__(indices)
    if error is IndexError:
        text = str(info.value)
        assert "out of range" in text and str(N) in text and dataset.location in text, text


def test_scalar_index_type_checks(dataset: ChunkDataset) -> None:
    assert dataset[np.int64(5)][1].item() == 5
    for bad in (True, np.bool_(True), 1.0, torch.tensor([1])):
        with pytest.raises(TypeError, match="int"):
            dataset[bad]
