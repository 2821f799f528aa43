"""Codec and chunk-size measurements on natural images (justify chunkio's defaults).

For each codec: compression ratio, encode MB/s, and decode MB/s through chunkio's reader (one
process, whole chunks). For each chunk byte size: shuffled-batch samples/s through
``ChunkDataset.read_batch`` with the default sampler, and read amplification.

    python -m benchmarks.bench_codecs [--images 4096]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import chunkio
from benchmarks.data import make_jpeg_folder

CODECS = [
    ("none", 0),
    ("lz4", 0),
    ("blosc-lz4", 5),
    ("zstd", 1),
    ("zstd", 3),
    ("blosc-zstd", 3),
    ("gzip", 6),
]
CHUNK_BYTES = [128 * 2**10, 256 * 2**10, 512 * 2**10, 2**20, 2 * 2**20, 4 * 2**20]


def natural_images(n: int, root: Path) -> np.ndarray:
    folder = make_jpeg_folder(root / "jpeg", n_images=n)
    files = sorted(folder.rglob("*.jpg"))[:n]
    return np.stack([np.asarray(Image.open(f).convert("RGB")).transpose(2, 0, 1) for f in files])


def _epoch_rate(path: str, batch_size: int = 256) -> tuple[float, float]:
    ds = chunkio.ChunkDataset(path, fields=["image"])
    sampler = chunkio.ChunkBatchSampler(ds.chunk_sizes(), batch_size, seed=0)
    batches = list(sampler)
    ds.read_batch(batches[0])  # open handles
    t = time.perf_counter()
    for b in batches:
        ds.read_batch(b)
    dt = time.perf_counter() - t
    amp = chunkio.read_amplification(batches, ds.chunk_sizes())
    return len(ds) / dt, amp


def run(n_images: int = 4096, root: str | None = None) -> dict[str, Any]:
    base = Path(root or tempfile.mkdtemp(prefix="chunkio-codecs-"))
    images = natural_images(n_images, base)
    raw_mb = images.nbytes / 1e6
    codecs = []
    for fmt in ("zarr", "hdf5"):
        for codec, level in CODECS:
            path = str(base / f"{codec}-{level}.{'zarr' if fmt == 'zarr' else 'h5'}")
            t = time.perf_counter()
            chunkio.write_arrays(
                path,
                {"image": images},
                compression=chunkio.Compression(codec, level),
                overwrite=True,
            )
            enc = raw_mb / (time.perf_counter() - t)
            stored = (
                sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
                if fmt == "zarr"
                else Path(path).stat().st_size
            )
            ds = chunkio.ChunkDataset(path, fields=["image"])
            ds.read_batch([0])
            t = time.perf_counter()
            ds.read_batch(np.arange(len(ds)))
            dec = raw_mb / (time.perf_counter() - t)
            codecs.append(
                {
                    "format": fmt,
                    "codec": f"{codec}-{level}",
                    "ratio": images.nbytes / stored,
                    "encode_MBps": enc,
                    "decode_MBps": dec,
                }
            )
    sizes = []
    for nbytes in CHUNK_BYTES:
        path = str(base / f"chunk-{nbytes}.zarr")
        chunkio.write_arrays(path, {"image": images}, chunk_bytes=nbytes, overwrite=True)
        rate, amp = _epoch_rate(path)
        spc = chunkio.ChunkDataset(path).samples_per_chunk
        sizes.append(
            {
                "chunk_bytes": nbytes,
                "samples_per_chunk": spc,
                "samples_per_s": rate,
                "read_amplification": amp,
            }
        )
    return {
        "images": n_images,
        "sample_shape": list(images.shape[1:]),
        "codecs": codecs,
        "chunk_sizes": sizes,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=4096)
    p.add_argument("--root", default=None)
    args = p.parse_args()
    result = run(args.images, args.root)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
