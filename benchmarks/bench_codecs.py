"""Codec and chunk-size measurements on natural images (justify chunkio's defaults).

For each codec: compression ratio, encode MB/s, decode MB/s through chunkio's reader (one
process, whole chunks), and shuffled samples/s through ``make_loader`` with 2 workers. For each
chunk byte size: the same loader figure, the cached read amplification of the default sampler
and its chunk diversity (mixing).

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
from chunkio.loader import DEFAULT_POOL_BYTES, pool_samples
from chunkio.sampling import describe_sampler

#: (codec, level); None = chunkio's default level for that codec
CODECS: list[tuple[str, int | None]] = [
    ("none", None),
    ("lz4", None),
    ("blosc-lz4", None),
    ("zstd", 1),
    ("zstd", 3),
    ("blosc-zstd", None),
    ("gzip", None),
]
WORKERS = 2
CHUNK_BYTES = [128 * 2**10, 256 * 2**10, 512 * 2**10, 2**20, 2 * 2**20, 4 * 2**20]


def natural_images(n: int, root: Path) -> np.ndarray:
    folder = make_jpeg_folder(root / "jpeg", n_images=n)
    files = sorted(folder.rglob("*.jpg"))[:n]
    return np.stack([np.asarray(Image.open(f).convert("RGB")).transpose(2, 0, 1) for f in files])


def _loader_rate(path: str, batch_size: int = 256, epochs: int = 2) -> float:
    """Shuffled samples/s through ``make_loader`` with WORKERS workers (after a warm-up)."""
    with chunkio.make_loader(path, batch_size, num_workers=WORKERS) as loader:
        for _ in loader:  # warm-up: workers start, page cache filled
            pass
        n, t = 0, time.perf_counter()
        for _ in range(epochs):
            for batch in loader:
                n += len(batch["image"])
        return n / (time.perf_counter() - t)


def run(n_images: int = 4096, root: str | None = None) -> dict[str, Any]:
    base = Path(root or tempfile.mkdtemp(prefix="chunkio-codecs-"))
    images = natural_images(n_images, base)
    raw_mb = images.nbytes / 1e6
    codecs = []
    labels = np.zeros(len(images), dtype=np.int64)
    for fmt in ("zarr", "hdf5"):
        for codec, level in CODECS:
            compression = chunkio.Compression(codec, level)  # type: ignore[arg-type]
            name = f"{codec}-{compression.level}"
            path = str(base / f"{name}.{'zarr' if fmt == 'zarr' else 'h5'}")
            t = time.perf_counter()
            chunkio.write_arrays(
                path,
                {"image": images, "label": labels},
                output=chunkio.Output(compression=compression),
                execution=chunkio.Execution(overwrite=True),
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
                    "codec": name,
                    "ratio": images.nbytes / stored,
                    "encode_MBps": enc,
                    "decode_MBps": dec,
                    f"loader_{WORKERS}w_samples_per_s": _loader_rate(path),
                }
            )
    sizes = []
    for nbytes in CHUNK_BYTES:
        path = str(base / f"chunk-{nbytes}.zarr")
        chunkio.write_arrays(
            path,
            {"image": images, "label": labels},
            output=chunkio.Output(chunk_bytes=nbytes),
            execution=chunkio.Execution(overwrite=True),
        )
        chunk_sizes = chunkio.ChunkDataset(path).chunk_sizes()
        model = describe_sampler(
            chunk_sizes,
            256,
            readers=WORKERS,
            pool=pool_samples(chunkio.ChunkDataset(path), DEFAULT_POOL_BYTES, 256),
        )
        sizes.append(
            {
                "chunk_bytes": nbytes,
                "samples_per_chunk": int(chunk_sizes[0]),
                f"loader_{WORKERS}w_samples_per_s": _loader_rate(path),
                "read_amplification": model["read_amplification"],
                "chunk_diversity": model["chunk_diversity"],
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
