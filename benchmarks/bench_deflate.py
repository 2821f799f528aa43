"""Which deflate decoder chunkio uses for gzip chunks (h5py's default filter), by measurement.

gzip (deflate) is what a user's HDF5 file most likely has: ``compression="gzip"`` is h5py's
default compressor, level 4. Chunks of natural images (crops of the photographs scikit-learn
ships, 32 samples of 3x64x64 uint8 per chunk) are compressed once with zlib level 4 and then
decoded by every decoder that installs from the package index, each into a buffer of the
chunk's known size, in one process: the standard library's zlib, zlib-ng, ISA-L (``isal``) and
libdeflate (``deflate``). Each decoder's output is checked against the source bytes; the table
gives MB/s of decoded bytes and the ratio to zlib, best of ``--rounds``.

    python -m benchmarks.bench_deflate [--chunks 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.data import sample_photos

Decoder = Callable[[bytes, int], bytes]


def _decoders() -> dict[str, Decoder | str]:
    """Each candidate's decode function, or why it is not available."""
    found: dict[str, Decoder | str] = {"zlib": lambda data, size: zlib.decompress(data, 15, size)}
    candidates: dict[str, tuple[str, Callable[[Any], Decoder]]] = {
        "zlib-ng": ("zlib_ng.zlib_ng", lambda m: lambda d, n: m.decompress(d, 15, n)),
        "isal": ("isal.isal_zlib", lambda m: lambda d, n: m.decompress(d, 15, n)),
        "libdeflate": ("deflate", lambda m: lambda d, n: m.zlib_decompress(d, n)),
    }
    for name, (module, make) in candidates.items():
        try:
            found[name] = make(importlib.import_module(module))
        except ImportError as err:
            found[name] = f"not installed ({err})"
    return found


def _chunks(n: int, seed: int = 0) -> list[bytes]:
    """``n`` chunks of 32 random 3x64x64 crops of natural photographs, as raw bytes."""
    rng = np.random.default_rng(seed)
    photos = sample_photos()
    out = []
    for _ in range(n):
        crops = []
        for _ in range(32):
            p = photos[int(rng.integers(len(photos)))]
            y, x = (int(rng.integers(0, s - 64)) for s in p.shape[:2])
            crops.append(p[y : y + 64, x : x + 64].transpose(2, 0, 1))
        out.append(np.stack(crops).tobytes())
    return out


def run(*, chunks: int = 64, rounds: int = 5) -> dict[str, Any]:
    raw = _chunks(chunks)
    packed = [zlib.compress(c, 4) for c in raw]
    total = sum(len(c) for c in raw)
    rows: dict[str, Any] = {}
    for name, decode in _decoders().items():
        if isinstance(decode, str):
            rows[name] = {"skipped": decode}
            continue
        if any(decode(p, len(c)) != c for p, c in zip(packed, raw, strict=True)):
            rows[name] = {"skipped": "wrong output"}
            continue
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for p, c in zip(packed, raw, strict=True):
                decode(p, len(c))
            best = min(best, time.perf_counter() - t0)
        rows[name] = {"mb_s": total / best / 1e6}
    base = rows["zlib"]["mb_s"]
    for row in rows.values():
        if "mb_s" in row:
            row["x_zlib"] = row["mb_s"] / base
    return {
        "chunks": chunks,
        "chunk_bytes": len(raw[0]),
        "ratio": total / sum(len(p) for p in packed),
        "decoders": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = run(chunks=args.chunks, rounds=args.rounds)
    print(
        f"{result['chunks']} chunks of {result['chunk_bytes']} bytes, zlib level 4 "
        f"(ratio {result['ratio']:.2f})"
    )
    print("| decoder | MB/s decoded | x zlib |\n|---|---|---|")
    for name, row in result["decoders"].items():
        if "mb_s" in row:
            print(f"| {name} | {row['mb_s']:,.0f} | {row['x_zlib']:.2f} |")
        else:
            print(f"| {name} | {row['skipped']} | |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
