"""``make_loader(workers=Workers(decode=...))``: the GPU-decode route's logic, on CPU.

The ``reference`` decoder runs the same route (a reading thread, crop plans keyed as the CPU
path keys them, a float batch rounded at the end) with simplejpeg in place of nvJPEG, so order,
labels, crop geometry, epochs, batch lifetime, errors and shutdown are checked here; the GPU
decoders themselves are measured by ``benchmarks/bench_gpu.py`` on a lent GPU.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import chunkio
from chunkio.errors import CorruptChunkError
from chunkio.images.gpu_jpeg import resize_into
from chunkio.loader.routes import decode_target
from chunkio.transforms import Compose, CropPlan, RandomHorizontalFlip, RandomResizedCrop
from chunkio.transport.gpu_decode import GpuDecodeRoute, crop_boxes


def _images(root: Path, n: int = 48) -> Path:
    """Class folders of JPEGs of several sizes (40-90 px), smooth but asymmetric: a wrong box
    or flip moves every pixel, while decoders and resamplers differ by a few levels."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = int(rng.integers(40, 91)), int(rng.integers(40, 91))
        yy, xx = np.mgrid[0:h, 0:w]
        pixels = 128 + 100 * np.stack(
            [np.sin(xx / 9 + i), np.cos(yy / 11), np.sin((xx + 2 * yy) / 13 + i / 3)], -1
        )
        folder = root / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i:03d}.jpg", quality=92)
    return root


@pytest.fixture(scope="module")
def jpeg_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu_decode")
    dst = root / "images.zarr"
    chunkio.convert_images(
        _images(root / "src"),
        dst,
        images=chunkio.ImageOptions(encoding="jpeg"),
        execution=chunkio.Execution(workers=1, progress=False),
    )
    return dst


def _transform() -> Compose:
    return Compose([RandomResizedCrop(32), RandomHorizontalFlip()])


def _loader(path: Path, decode: str, **kw: Any) -> chunkio.ChunkLoader:
    return chunkio.make_loader(
        str(path),
        8,
        fields=("image", "label"),
        transform=_transform(),
        num_workers=0,
        seed=5,
        workers=chunkio.Workers(decode=decode),
        **kw,
    )


def test_reference_route_matches_the_cpu_path_over_epochs(jpeg_store: Path) -> None:
    """Same order and labels, same crops (pixels within what decoders and resamplers differ
    by), each epoch with its own crops; batches delivered by the route are fresh memory."""
    cpu, ref = _loader(jpeg_store, "cpu"), _loader(jpeg_store, "reference")
    assert ref.transport == "gpu-decode"
    for epoch in (0, 1):
        cpu.set_epoch(epoch)
        ref.set_epoch(epoch)
        expected = [(x.clone(), y.clone()) for x, y in cpu]
        got = list(ref)  # kept without copying: must not be overwritten by later batches
        assert len(got) == len(expected) == 6
        for (xe, ye), (xg, yg) in zip(expected, got, strict=True):
            assert xg.dtype == torch.uint8 and xg.shape == xe.shape == (8, 3, 32, 32)
            assert torch.equal(yg, ye)
            # the CPU path may decode at 1/2 scale (DCT scaling) before its resize: a few
            # levels apart on average; a wrong box or flip is tens of levels apart
            diff = (xg.float() - xe.float()).abs().mean()
            mirrored = (xg.flip(-1).float() - xe.float()).abs().mean()
            assert diff < 3 < 20 < mirrored
        if epoch == 0:
            first_epoch = got[0][0].clone()
    assert not torch.equal(first_epoch, got[0][0])  # another epoch draws other crops


def test_crop_boxes_round_as_the_cpu_path() -> None:
    plans = [
        CropPlan((2.4, 0.0, 7.6, 9.9), (4, 4), True),
        CropPlan((-1, 3.5, 50, 4), (2, 2), False),
    ]
    boxes, flips = crop_boxes(plans, np.array([[3, 10, 10], [3, 20, 30]]))
    assert boxes == [(2, 0, 8, 10), (0, 4, 30, 5)]
    assert flips == [True, False]


def test_resize_into_flips_and_resizes() -> None:
    crop = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(2, 3, 4)
    same = torch.empty(2, 3, 4)
    resize_into(crop, True, same, "bilinear")
    assert torch.equal(same.to(torch.uint8), crop.flip(-1))
    half = torch.empty(2, 3, 2)
    resize_into(torch.full((2, 6, 4), 9, dtype=torch.uint8), False, half, "bilinear")
    assert half.unique().tolist() == [9.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"decode": "gpu"}, "device='cuda'"),
        ({"decode": "torchvision", "device": "cpu"}, "device='cuda'"),
        ({"decode": "magic"}, "decode must be 'cpu' or one of"),
    ],
)
def test_bad_decode_arguments(jpeg_store: Path, kwargs: dict[str, Any], match: str) -> None:
    if torch.cuda.is_available() and "device" not in kwargs and kwargs["decode"] == "gpu":
        pytest.skip("CUDA is available: decode='gpu' without a device is checked on CPU only")
    device = kwargs.get("device")
    with pytest.raises(ValueError, match=match):
        chunkio.make_loader(
            str(jpeg_store),
            8,
            fields=("image", "label"),
            transform=_transform(),
            device=device,
            workers=chunkio.Workers(decode=kwargs["decode"]),
        )


def test_make_loader_decode_is_deprecated_for_workers_decode(jpeg_store: Path) -> None:
    with pytest.warns(DeprecationWarning, match=r"use workers=chunkio\.Workers\(decode=\.\.\.\)"):
        loader = _loader_old(jpeg_store)
    assert loader.transport == "gpu-decode"
    loader.close()


def _loader_old(path: Path) -> chunkio.ChunkLoader:
    return chunkio.make_loader(  # type: ignore[call-arg]
        str(path),
        8,
        fields=("image", "label"),
        transform=_transform(),
        num_workers=0,
        decode="reference",
    )


def test_decode_needs_a_compose_on_a_jpeg_field(jpeg_store: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"needs transform=chunkio\.transforms\.Compose"):
        chunkio.make_loader(
            str(jpeg_store),
            8,
            fields=("image", "label"),
            num_workers=0,
            workers=chunkio.Workers(decode="reference"),
        )
    raw = tmp_path / "raw.zarr"
    chunkio.write_arrays(raw, {"image": np.zeros((8, 3, 16, 16), np.uint8)})
    with pytest.raises(ValueError, match="decodes JPEG fields; field 'image' is dense"):
        chunkio.make_loader(
            str(raw),
            4,
            fields="image",
            transform=_transform(),
            workers=chunkio.Workers(decode="reference"),
        )


class _Failing:
    name = "failing"

    def __init__(self, after: int) -> None:
        self.calls, self.after = 0, after

    def decode(self, data: Any, boxes: Any, flips: Any, out: torch.Tensor, mode: str) -> list[Any]:
        self.calls += 1
        if self.calls > self.after:
            raise CorruptChunkError("sample 3 of the batch: the GPU decoder could not decode it")
        out.zero_()
        return []


def _route(path: Path, decoder: Any) -> GpuDecodeRoute:
    ds = chunkio.ChunkDataset(str(path), fields=("image", "label"), transform=_transform())
    target = decode_target(ds)
    return GpuDecodeRoute(ds, target, device=torch.device("cpu"), decoder=decoder)


def _decode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "chunkio-gpu-decode"]


def test_a_decode_error_reaches_the_consumer_after_the_good_batches(jpeg_store: Path) -> None:
    route = _route(jpeg_store, _Failing(after=2))
    batches = [np.arange(i, i + 8) for i in range(0, 48, 8)]
    got = []
    with pytest.raises(CorruptChunkError, match="sample 3 of the batch"):
        for lease in route.run(batches, None, epoch=0):
            got.append(lease.batch)
    assert len(got) == 2
    assert not _decode_threads()


def test_leaving_an_epoch_early_stops_the_reading_thread(jpeg_store: Path) -> None:
    with _loader(jpeg_store, "reference") as loader:
        for i, _ in enumerate(loader):
            if i == 1:
                break
    assert not _decode_threads()
