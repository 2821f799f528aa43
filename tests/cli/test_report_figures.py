"""The figures ``chunkio info`` and ``chunkio doctor`` print, checked against datasets whose
sizes the test knows from what it wrote: JPEG and yuv420 images (one size and several),
sparse rows, windows and a store chunkio did not write. The expected figures are computed
here from the source arrays and images, or from the store read with zarr-python, never by
chunkio's own code.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from PIL import Image

from chunkio import ChunkDataset, Execution, Field, convert_images, write_arrays
from chunkio.convert.images import ImageOptions
from chunkio.diagnose.dataset_report import info
from chunkio.diagnose.doctor import Measurement, _recommend, run_doctor
from chunkio.diagnose.doctor_data import dataset_codecs, sample_nbytes
from chunkio.diagnose.info_text import format_info

#: (height, width) of the source images: one size, or several
SIZES = {"one size": [(8, 10)] * 4, "several sizes": [(8, 10), (6, 12), (9, 9), (8, 10)]}


def _images(tmp_path: Path, sizes: list[tuple[int, int]], encoding: str) -> str:
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate(sizes):
        folder = tmp_path / "src" / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)
    out = str(tmp_path / f"{encoding}.zarr")
    options = ImageOptions(encoding=encoding)
    convert_images(tmp_path / "src", out, images=options, execution=Execution(progress=False))
    return out


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("encoding", ["jpeg", "yuv420"])
def test_info_counts_the_pixels_of_encoded_images(
    tmp_path: Path, encoding: str, sizes: str
) -> None:
    path = _images(tmp_path, SIZES[sizes], encoding)
    found = info(path)
    group = zarr.open_group(path, mode="r")
    others = sum(a.nbytes for n, a in group.arrays() if not n.startswith("image__"))
    pixels = sum(3 * h * w for h, w in SIZES[sizes])
    assert found["nbytes"] == pixels + others  # not the region reserved for encoded bytes
    text = format_info(found)
    assert f"(compression ratio {(pixels + others) / found['stored_nbytes']:.2f})" in text
    assert "class names:       cat, dog" in text


def test_doctor_weighs_a_jpeg_sample_as_its_pixels(tmp_path: Path) -> None:
    path = _images(tmp_path, SIZES["one size"], "jpeg")
    report = run_doctor(
        path,
        fields=["image", "label"],
        worker_counts=[0],
        batch_sizes=[2, 4],
        batches_per_setting=1,
        budget_s_per_setting=0.1,
    )
    assert report.sample_nbytes == 3 * 8 * 10 + 8  # uint8 pixels and an int64 label
    fastest = max(report.measurements, key=lambda m: m.samples_per_s)
    recommended = (report.recommended_workers, report.recommended_batch_size)
    assert recommended == (fastest.num_workers, fastest.batch_size)
    text = report.render()
    marked = [line for line in text.splitlines() if line.endswith("<- recommended")]
    assert len(marked) == 1 and marked[0].split()[:2] == [str(v) for v in recommended]
    assert f"fastest: {fastest.samples_per_s:,.0f}"[:12] in text


def test_sparse_figures(tmp_path: Path) -> None:
    path = str(tmp_path / "s.zarr")
    rows = sp.random(12, 30, density=0.2, format="csr", dtype=np.float32, random_state=0)
    write_arrays(path, {"x": rows, "label": np.arange(12)}, shuffle=False)
    group = zarr.open_group(path, mode="r")
    assert info(path)["nbytes"] == sum(a.nbytes for _, a in group.arrays())
    # dense rows by default (the loader's batches): 30 float32 and an int64 label
    assert sample_nbytes(ChunkDataset(path)) == 30 * 4 + 8


def test_window_and_foreign_figures(tmp_path: Path) -> None:
    path = str(tmp_path / "w.zarr")
    group = zarr.open_group(path, mode="w")
    group.create_array("t", shape=(50, 3), dtype="f4", chunks=(10, 3))[:] = 1
    windows = ChunkDataset(path, fields=[Field("t", steps=[-1, 0, 2])])
    assert sample_nbytes(windows) == 3 * 3 * 4  # three steps of 3 float32
    assert dataset_codecs(windows) == ["zstd"]  # zarr-python's default

    h5 = str(tmp_path / "user.h5")
    with h5py.File(h5, "w") as f:
        f.create_dataset("a/x", data=np.zeros((20, 4, 5), np.uint16), chunks=(5, 4, 5))
        f["b/y"] = np.zeros(20, np.int32)
    foreign = ChunkDataset(h5, fields={"image": "a/x", "label": "b/y"})
    assert sample_nbytes(foreign) == 4 * 5 * 2 + 4
    found = info(h5)
    assert found["nbytes"] == 20 * 4 * 5 * 2 + 20 * 4 and not found["chunkio_dataset"]
    assert os.path.getsize(h5) == found["size_on_disk"]


def _m(workers: int, batch: int, rate: float) -> Measurement:
    return Measurement(workers, batch, 10, 1.0, rate, rate / 1e3)


def test_a_faster_codec_is_advised_only_where_a_slower_one_is_used() -> None:
    ms = [_m(0, 64, 100.0), _m(1, 64, 150.0)]
    on_lz4 = _recommend(ms, 1e6, 64, ["lz4"])[3]
    on_zstd = _recommend(ms, 1e6, 64, ["lz4", "zstd"])[3]
    assert not any("faster codec" in n for n in on_lz4)
    assert any("more cores or larger chunks" in n for n in on_lz4)
    assert any("a faster codec (lz4, not zstd)" in n for n in on_zstd)
