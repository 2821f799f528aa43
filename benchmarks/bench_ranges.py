"""Concurrent range requests against a loopback S3 server, direct and with added latency.

``RangeFetcher.cat_ranges`` of 256 ranges of 64 KiB of one object against moto in a child
process, every request through a :class:`~chunkio.testing.latency_proxy.LatencyProxy` adding
0 or 20 ms, at several concurrencies; obstore's client beside it when installed. The figures
behind ``RangeFetcher``'s default concurrency and the choice of s3fs (README, "Choosing the
defaults").

    python -m benchmarks.bench_ranges
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from chunkio.testing.servers import KEY, REGION, SECRET, LatencyProxy, S3Server

__all__ = ["benchmark"]


def benchmark(n: int = 256, size: int = 64 << 10, repeats: int = 3) -> list[dict[str, Any]]:
    """cat_ranges of ``n`` ranges of ``size`` bytes against moto, direct and through a proxy."""
    from chunkio.remote import RangeFetcher

    rows: list[dict[str, Any]] = []
    blob = os.urandom(n * size)
    with S3Server() as s3:
        s3.put("bench", "blob.bin", blob)
        for delay in (0.0, 0.02):
            with LatencyProxy(s3.endpoint_url, delay) as proxy:
                for conc in (1, 4, 16, 32, 64):
                    if delay == 0 and conc in (4, 32):
                        continue
                    f = RangeFetcher(
                        "s3://bench",
                        storage_options=s3.storage_options(endpoint_url=proxy.url),
                        max_concurrency=conc,
                    )
                    reqs = [("blob.bin", i * size, (i + 1) * size) for i in range(n)]
                    f.cat_ranges(reqs[:4])  # connect, warm up
                    best = float("inf")
                    for _ in range(repeats):
                        t = time.perf_counter()
                        out = f.cat_ranges(reqs)
                        best = min(best, time.perf_counter() - t)
                    assert b"".join(out) == blob
                    f.close()
                    rows.append(
                        {
                            "client": "s3fs",
                            "delay_ms": delay * 1000,
                            "concurrency": conc,
                            "req_per_s": n / best,
                            "MiB_per_s": n * size / best / 2**20,
                        }
                    )
                    print(rows[-1], flush=True)
                rows += _bench_obstore(s3, proxy, delay, blob, n, size, repeats)
    return rows


def _bench_obstore(
    s3: S3Server, proxy: LatencyProxy, delay: float, blob: bytes, n: int, size: int, repeats: int
) -> list[dict[str, Any]]:
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        return []
    store = S3Store(
        "bench",
        endpoint=proxy.url,
        access_key_id=KEY,
        secret_access_key=SECRET,
        region=REGION,
        client_options={"allow_http": True},
    )
    rows = []
    starts = [i * size for i in range(n)]
    ends = [(i + 1) * size for i in range(n)]
    obstore.get_ranges(store, "blob.bin", starts=starts[:4], ends=ends[:4])
    for conc in (1, 16):
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            if conc == 1:
                out = [
                    bytes(obstore.get_range(store, "blob.bin", start=a, end=b))
                    for a, b in zip(starts, ends, strict=True)
                ]
            else:  # get_ranges coalesces neighbours; use separate ranges concurrently instead
                out = asyncio.run(_obstore_concurrent(store, starts, ends, conc))
            best = min(best, time.perf_counter() - t)
        assert b"".join(out) == blob
        rows.append(
            {
                "client": "obstore",
                "delay_ms": delay * 1000,
                "concurrency": conc,
                "req_per_s": n / best,
                "MiB_per_s": n * size / best / 2**20,
            }
        )
        print(rows[-1], flush=True)
    return rows


async def _obstore_concurrent(store: Any, starts: list[int], ends: list[int], conc: int) -> Any:
    import obstore

    sem = asyncio.Semaphore(conc)

    async def one(a: int, b: int) -> bytes:
        async with sem:
            return bytes(await obstore.get_range_async(store, "blob.bin", start=a, end=b))

    return await asyncio.gather(*(one(a, b) for a, b in zip(starts, ends, strict=True)))


def main() -> None:
    print(f"{'client':8} {'delay ms':>8} {'conc':>5} {'req/s':>7} {'MiB/s':>6}")
    for r in benchmark():
        print(f"{r['client']:8} {r['delay_ms']:8.0f} {r['concurrency']:5d} "
              f"{r['req_per_s']:7.0f} {r['MiB_per_s']:6.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
