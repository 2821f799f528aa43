"""Where a chunkio JPEG or ``yuv420`` sample's time goes, stage by stage, in one process (one
core): CPU microseconds (``time.process_time``), so that other jobs on the machine do not count.

The stages of an encoded field's read with ``RandomResizedCrop + RandomHorizontalFlip``
(:mod:`chunkio.read.encoded`), timed one sample at a time with the reader's own pieces, three
ways: ``whole`` (simplejpeg's whole-image decode: the path without the extension), ``region``
(the crop's iMCU rows and columns, decoded as RGBX) and ``yuv420`` (the crop's bands
decompressed and colour-converted to RGBX, one C call):

``read``
    the bytes chunks of each batch (file reads, checksums, decompression), per sample;
``span``
    the sample's bytes located in its cached chunk (a view);
``plan``
    the transform's crop box and flip, from ``(seed, epoch, index)``;
``decode``
    libjpeg-turbo: the crop's iMCU rows and columns (``region``), or the whole image
    (``whole``), DCT-scaled where the crop allows; ``yuv420``: LZ4 of the crop's bands and the
    colour conversion of its box (colour is inside ``decode`` for JPEG too: libjpeg-turbo
    converts YCbCr to RGB as it writes rows);
``resize``
    the one antialiased resize of the crop to 224x224 (torch's uint8 kernel; RGBX crops go
    in as they are);
``flip + scatter``
    the mirror and the copy into the (channels-last) batch row;
``python``
    what the loader's in-process epoch (``num_workers=0``) costs beyond these stages
    (batching, the per-sample Python between them);
``transport``
    what workers add per sample: the CPU time per sample of the loader's processes with
    workers (measured in the same run by the caller) less the in-process cost.

    python -m benchmarks.jpeg_stages PATH.zarr [--images 1000] [--yuv420 PATH.zarr]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np
import torch

import chunkio
from chunkio.images import jpeg, yuv
from chunkio.transforms import Compose, RandomHorizontalFlip, RandomResizedCrop
from chunkio.transforms.render import TORCH_MODES

__all__ = ["STAGES", "jpeg_stages", "yuv_stages"]

STAGES = ("read", "span", "plan", "decode", "resize", "flip + scatter")


def _loader_us(path: str, transform: Compose, batch_size: int, n: int) -> float:
    with chunkio.make_loader(
        path,
        batch_size=batch_size,
        num_workers=0,
        fields=("image",),
        transform=transform,
        seed=0,
        shuffle=False,
    ) as loader:
        for _ in loader:  # warm-up
            pass
        start = time.process_time()
        count = 0
        for batch in loader:
            count += len(batch[0])
        return (time.process_time() - start) / max(count, 1) * 1e6


def jpeg_stages(
    path: str, *, region: bool, n: int = 1000, batch_size: int = 128, size: int = 224
) -> dict[str, float]:
    """Microseconds per sample of each stage (see the module docstring), ``region`` or
    whole-image decoding, over the first ``n`` samples of the JPEG dataset at ``path``."""
    return _stages(path, "region" if region else "whole", n, batch_size, size)


def yuv_stages(
    path: str, *, n: int = 1000, batch_size: int = 128, size: int = 224
) -> dict[str, float]:
    """:func:`jpeg_stages` of the ``yuv420`` dataset at ``path``."""
    return _stages(path, "yuv420", n, batch_size, size)


def _stages(path: str, way: str, n: int, batch_size: int, size: int) -> dict[str, float]:
    from chunkio.dataset import ChunkDataset

    saved = jpeg.REGION_DECODE
    jpeg.REGION_DECODE = way != "whole"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker
    try:
        transform = Compose([RandomResizedCrop(size), RandomHorizontalFlip()])
        dataset = ChunkDataset(path)
        field: Any = dataset._open_handle().field("image")
        total = min(n, int(field.shapes.shape[0]))
        spent = dict.fromkeys(STAGES, 0.0)
        # a channels-last batch, its rows seen channels-first: the loader's layout
        batch = np.empty((batch_size, size, size, 3), np.uint8).transpose(0, 3, 1, 2)
        clock = time.process_time  # CPU time: other jobs on the machine do not count
        for rep in range(2):  # the first pass warms up (page cache, first calls)
            spent = dict.fromkeys(STAGES, 0.0)
            for first in range(0, total, batch_size):
                idx = np.arange(first, min(total, first + batch_size))
                t0 = clock()
                field._cache.clear()
                field._fetch(idx)
                spent["read"] += clock() - t0
                for j, i in enumerate(idx.tolist()):
                    times = _sample(field, transform, way, i, rep, batch[j], clock)
                    for stage, a, b in zip(STAGES[1:], times, times[1:], strict=False):
                        spent[stage] += b - a
        out = {k: v / total * 1e6 for k, v in spent.items()}
        out["stages sum"] = sum(out.values())
        out["loader in process"] = _loader_us(path, transform, batch_size, total)
        out["python"] = out["loader in process"] - out["stages sum"]
        return out
    finally:
        jpeg.REGION_DECODE = saved
        torch.set_num_threads(threads)


def _sample(
    field: Any, transform: Compose, way: str, i: int, epoch: int, row: Any, clock: Any
) -> tuple[float, ...]:
    """One sample through the reader's pieces; the clock's readings between its stages."""
    shape = tuple(int(s) for s in field.shapes[i])
    _, height, width = shape
    t0 = clock()
    data = field.sample_bytes(i)
    t1 = clock()
    plan = transform.plan((0, epoch, i), height, width)
    out_h, out_w = plan.size
    box_h, box_w = plan.box[3] - plan.box[1], plan.box[2] - plan.box[0]
    min_h = math.ceil(height * out_h / max(box_h, 1e-9))
    min_w = math.ceil(width * out_w / max(box_w, 1e-9))
    d, sh, sw = (1, height, width)
    if way != "yuv420" and min_h < height and min_w < width:
        d, sh, sw = jpeg.scaled_size(height, width, min_h, min_w)
    scale = 1.0 if d == 1 else min(sh / height, sw / width)
    left, top, right, bottom = transform.crop_box(plan, sh, sw, scale)
    t2 = clock()
    if way == "whole" or not jpeg.exact_scale(height, width, d):
        whole = jpeg.decode(data, gray=False, scale=(d, sh, sw) if d > 1 else None)
        crop = np.ascontiguousarray(whole[top:bottom, left:right])
        t3 = clock()
        h, w = crop.shape[:2]
        nchw = torch.from_numpy(crop).as_strided((1, 3, h, w), (h * w * 3, 1, w * 3, 3))
        mode = TORCH_MODES[transform.resample]
        result = torch.nn.functional.interpolate(
            nchw, size=(out_h, out_w), antialias=True, mode=mode
        )[0].permute(1, 2, 0)
        t4 = clock()
        if plan.flip:
            result = result.flip(1)
        np.copyto(row.transpose(1, 2, 0), result.numpy())
        return t0, t1, t2, t3, t4, clock()
    rgbx = field._rgbx_crop(transform, shape, row, (bottom - top, right - left))
    if way == "yuv420":
        yuv.decode_box_rgbx(data, rgbx, top=top, left=left, size=(height, width))
    else:
        jpeg.decode_region(data, rgbx, size=(height, width), left=left, top=top, denominator=d)
    t3 = clock()
    pixels = transform.resize_crop(rgbx, plan)
    t4 = clock()
    yuv.rgbx_into(pixels, row, plan.flip)
    return t0, t1, t2, t3, t4, clock()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("path")
    p.add_argument("--images", type=int, default=1000)
    p.add_argument("--yuv420", help="also a yuv420 dataset of the same images")
    args = p.parse_args(argv)
    rows = {
        way: jpeg_stages(args.path, region=way == "region", n=args.images)
        for way in ("whole", "region")
    }
    if args.yuv420:
        rows["yuv420"] = yuv_stages(args.yuv420, n=args.images)
    print(f"| stage (us/sample) | {' | '.join(rows)} |")
    print("|---|" + "---|" * len(rows))
    for stage in rows["whole"]:
        print(f"| {stage} | " + " | ".join(f"{rows[w][stage]:.0f}" for w in rows) + " |")


if __name__ == "__main__":
    main()
