"""converters/: each on tiny data written here in the exact published layout."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chunkio import ChunkDataset, Execution
from chunkio.errors import SourceError, UnsafeInputError
from converters import cifar10, imagefolder, mnist

# -- ImageFolder ----------------------------------------------------------------------------


def test_imagefolder(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = {}
    for cls in ("tench", "church"):
        for i in range(2):
            arr = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
            path = tmp_path / "train" / cls / f"n{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(arr).save(path)
            pixels[(cls, i)] = arr
    execution = Execution(workers=1, progress=False)
    result = imagefolder.convert(tmp_path / "train", tmp_path / "t.h5", execution=execution)
    assert result.class_names == ("church", "tench")
    batch = ChunkDataset(tmp_path / "t.h5").read_batch(range(4))
    listing = [("church", 0), ("church", 1), ("tench", 0), ("tench", 1)]
    order = batch["source_index"].tolist()  # shuffled by default
    assert sorted(order) == [0, 1, 2, 3]
    assert batch["label"].tolist() == [k // 2 for k in order]
    for j, k in enumerate(order):
        np.testing.assert_array_equal(batch["image"][j], pixels[listing[k]].transpose(2, 0, 1))
    imagefolder.convert(tmp_path / "train", tmp_path / "u.zarr", execution=execution, shuffle=False)
    batch = ChunkDataset(tmp_path / "u.zarr").read_batch([0, 3])
    assert batch["label"].tolist() == [0, 1] and "source_index" not in batch
    np.testing.assert_array_equal(batch["image"][1], pixels[("tench", 1)].transpose(2, 0, 1))
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.fromarray(pixels[("tench", 0)]).save(flat / "x.png")
    with pytest.raises(SourceError, match="no class subfolders"):
        imagefolder.convert(flat, tmp_path / "f.zarr")


# -- CIFAR-10 -------------------------------------------------------------------------------

NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _python2_style_pickle(obj: object) -> bytes:
    # The published files are Python 2 protocol-2 pickles naming numpy.core.multiarray.
    return pickle.dumps(obj, protocol=2).replace(
        b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n"
    )


@pytest.fixture
def cifar(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(1)
    data, labels = {}, {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data[name] = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
        labels[name] = rng.integers(0, 10, 3).tolist()
        batch = {
            "batch_label": f"training batch {name}",
            "labels": labels[name],
            "data": data[name],
            "filenames": [f"img_{i}.png" for i in range(3)],
        }
        (root / name).write_bytes(_python2_style_pickle(batch))
    meta = {"num_cases_per_batch": 3, "label_names": NAMES, "num_vis": 3072}
    (root / "batches.meta").write_bytes(_python2_style_pickle(meta))
    return root, {**{f"{k}_labels": np.array(v) for k, v in labels.items()}, **data}


def test_cifar10_train_and_test(cifar: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    root, raw = cifar
    result = cifar10.convert(root, tmp_path / "train.zarr")
    assert result.num_samples == 15
    ds = ChunkDataset(tmp_path / "train.zarr")
    assert ds.class_names == tuple(NAMES)
    batch = ds.read_batch(range(15))
    assert batch["image"].shape == (15, 3, 32, 32) and batch["image"].dtype == np.uint8
    order = batch["source_index"]  # shuffled by default: stored row j is sample order[j]
    assert sorted(order.tolist()) == list(range(15))
    # Sample 4 is the second image of data_batch_2: 1024 red, then green, then blue values.
    row, j = raw["data_batch_2"][1], order.tolist().index(4)
    np.testing.assert_array_equal(batch["image"][j, 0], row[:1024].reshape(32, 32))
    np.testing.assert_array_equal(batch["image"][j, 2, 5], row[2048 + 5 * 32 : 2048 + 6 * 32])
    images = np.concatenate([raw[f"data_batch_{i}"] for i in range(1, 6)])
    np.testing.assert_array_equal(batch["image"].reshape(15, -1), images[order])
    expected = np.concatenate([raw[f"data_batch_{i}_labels"] for i in range(1, 6)])
    assert batch["label"].tolist() == expected[order].tolist()
    cifar10.convert(root, tmp_path / "test.h5", split="test", shuffle=False)
    test = ChunkDataset(tmp_path / "test.h5").read_batch([0, 1, 2])
    assert test["label"].tolist() == raw["test_batch_labels"].tolist()


def test_cifar10_pickles_cannot_run_code(
    cifar: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    root, _ = cifar
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            import os

            return (os.system, (f"touch {marker}",))

    (root / "data_batch_3").write_bytes(pickle.dumps({"data": Exploit()}, protocol=2))
    with pytest.raises(UnsafeInputError, match=r"data_batch_3: .*refusing"):
        cifar10.convert(root, tmp_path / "x.zarr")
    assert not marker.exists()
    (root / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(SourceError, match="data_batch_3: not a readable CIFAR pickle"):
        cifar10.convert(root, tmp_path / "x.zarr")


# -- MNIST ----------------------------------------------------------------------------------


def _idx(path: Path, magic: int, arr: np.ndarray, *, gz: bool) -> None:
    body = struct.pack(f">i{arr.ndim}i", magic, *arr.shape) + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(body) if gz else body)


@pytest.fixture
def mnist_dir(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    arrays = {
        "train_x": rng.integers(0, 256, (7, 28, 28), dtype=np.uint8),
        "train_y": rng.integers(0, 10, 7).astype(np.uint8),
        "test_x": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        "test_y": rng.integers(0, 10, 4).astype(np.uint8),
    }
    root = tmp_path / "mnist"
    root.mkdir()
    _idx(root / "train-images-idx3-ubyte.gz", 2051, arrays["train_x"], gz=True)
    _idx(root / "train-labels-idx1-ubyte.gz", 2049, arrays["train_y"], gz=True)
    _idx(root / "t10k-images-idx3-ubyte", 2051, arrays["test_x"], gz=False)
    _idx(root / "t10k-labels-idx1-ubyte", 2049, arrays["test_y"], gz=False)
    return root, arrays


def test_mnist_gzipped_and_raw(
    mnist_dir: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    root, arrays = mnist_dir
    for split, shuffle in (("train", True), ("test", False)):
        dst = tmp_path / f"{split}.zarr"
        mnist.convert(root, dst, split=split, shuffle=shuffle)  # type: ignore[arg-type]
        ds = ChunkDataset(dst)
        batch = ds.read_batch(range(len(ds)))
        n = len(arrays[f"{split}_y"])
        order = batch["source_index"] if shuffle else np.arange(n)
        assert sorted(order.tolist()) == list(range(n))
        assert ("source_index" in batch) == shuffle
        np.testing.assert_array_equal(batch["image"][:, 0], arrays[f"{split}_x"][order])
        assert batch["image"].shape[1:] == (1, 28, 28)
        assert batch["label"].tolist() == arrays[f"{split}_y"][order].tolist()
        assert ds.class_names == tuple(str(i) for i in range(10))


def test_mnist_headers_are_checked(
    mnist_dir: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    root, arrays = mnist_dir
    _idx(root / "t10k-labels-idx1-ubyte", 2051, arrays["test_y"], gz=False)
    with pytest.raises(
        SourceError, match=r"t10k-labels-idx1-ubyte: magic number 2051; expected 2049"
    ):
        mnist.convert(root, tmp_path / "a.zarr", split="test")
    _idx(root / "t10k-labels-idx1-ubyte", 2049, arrays["test_y"][:3], gz=False)
    with pytest.raises(SourceError, match=r"4 images .* but 3 labels"):
        mnist.convert(root, tmp_path / "b.zarr", split="test")
    images = root / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-5])
    with pytest.raises(SourceError, match=r"declares \(4, 28, 28\) = 3136 bytes"):
        mnist.convert(root, tmp_path / "c.zarr", split="test")
