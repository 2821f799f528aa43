"""RangeFetcher against real servers on loopback: moto S3, an HTTP server, a latency proxy."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chunkio.errors import ChunkReadError
from chunkio.remote import (
    RangeFetcher,
    RemoteAccessError,
    RemoteError,
    RemoteNotFoundError,
    RemoteTimeoutError,
)
from chunkio.testing.servers import (  # noqa: F401 (pytest fixtures)
    HTTPServer,
    LatencyProxy,
    S3Server,
    http_server_factory_fixture,
    latency_proxy_factory_fixture,
    require,
    s3_server_fixture,
)

require("s3fs", "s3fs is not installed (pip install -e '.[remote]')")

Proxy = Callable[..., LatencyProxy]
BLOB = os.urandom(300_000)
SMALL = b"0123456789abcdef" * 64


@pytest.fixture(scope="module")
def bucket(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``s3://fetch-tests/data`` holding ``blob.bin`` (300 kB) and ``dir/small.bin``."""
    root = tmp_path_factory.mktemp("upload")
    (root / "blob.bin").write_bytes(BLOB)
    (root / "dir").mkdir()
    (root / "dir" / "small.bin").write_bytes(SMALL)
    return s3_server.upload_dir(root, "fetch-tests", "data")


@pytest.fixture
def fetcher_factory(s3_server: S3Server) -> Iterator[Callable[..., RangeFetcher]]:
    made: list[RangeFetcher] = []

    def make(url: str, proxy: LatencyProxy | None = None, **kw: object) -> RangeFetcher:
        opts = s3_server.storage_options(endpoint_url=proxy.url if proxy else None)
        kw.setdefault("backoff_s", 0.01)
        f = RangeFetcher(url, storage_options=opts, **kw)  # type: ignore[arg-type]
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def ranges(n: int, size: int) -> list[tuple[str, int | None, int | None]]:
    return [("blob.bin", i * size, (i + 1) * size) for i in range(n)]


# -- S3 -----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_s3_concurrent_ranges_are_correct(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.05)
    f = fetcher_factory(bucket, proxy, max_concurrency=8)
    out = f.cat_ranges(ranges(24, 10_000))
    assert out == [BLOB[i * 10_000 : (i + 1) * 10_000] for i in range(24)]
    assert proxy.requests == 24 and f.stats.requests == 24 and f.stats.bytes == 240_000
    assert 1 < proxy.max_in_flight <= 8  # concurrent, and bounded by max_concurrency
    assert proxy.connections <= 8  # keep-alive: connections are reused

    mixed = f.cat_ranges(
        [
            ("blob.bin", -100, None),  # suffix
            ("blob.bin", 299_990, None),  # to the end
            ("blob.bin", None, 5),  # from the start
            ("dir/small.bin", None, None),  # whole object
            ("blob.bin", 7, 7),  # empty: no request
            ("blob.bin", 299_999, 400_000),  # past the end: cut
        ]
    )
    assert mixed == [BLOB[-100:], BLOB[299_990:], BLOB[:5], SMALL, b"", BLOB[299_999:]]
    assert proxy.requests == 24 + 5
    assert f.get("dir/small.bin") == SMALL
    assert f.size("blob.bin") == len(BLOB)
    assert f.exists("blob.bin") and not f.exists("nope.bin")


@pytest.mark.timeout(60)
def test_s3_concurrency_one_is_sequential(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 0.01)
    f = fetcher_factory(bucket, proxy, max_concurrency=1)
    assert f.cat_ranges(ranges(6, 1000)) == [BLOB[i * 1000 : (i + 1) * 1000] for i in range(6)]
    assert proxy.max_in_flight == 1 and proxy.requests == 6


@pytest.mark.timeout(60)
def test_s3_missing_key_and_bucket(
    bucket: str, fetcher_factory: Callable[..., RangeFetcher]
) -> None:
    f = fetcher_factory(bucket)
    with pytest.raises(
        RemoteNotFoundError, match=re.escape("s3://fetch-tests/data/missing.bin")
    ) as e:
        f.cat_ranges([("blob.bin", 0, 10), ("missing.bin", 0, 10)])
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ChunkReadError)
    assert "bytes 0:10" in str(e.value)
    assert f.stats.retries == 0  # not found is not retried
    g = fetcher_factory("s3://no-such-bucket-here/x")
    with pytest.raises(RemoteNotFoundError, match=re.escape("s3://no-such-bucket-here/x/k")):
        g.get("k")
    with pytest.raises(RemoteNotFoundError, match=re.escape("missing.bin")):
        f.size("missing.bin")


@pytest.mark.timeout(60)
def test_s3_wrong_credentials(tmp_path: Path) -> None:
    with S3Server() as s3:  # its own server: the auth switch is server-wide
        s3.put("private", "k.bin", SMALL)
        key, secret = s3.create_user_key()
        s3.set_auth(True)
        good = RangeFetcher(
            "s3://private", storage_options=s3.storage_options(key=key, secret=secret)
        )
        bad = RangeFetcher(
            "s3://private",
            storage_options=s3.storage_options(key="AKIAWRONGWRONGWRONG0", secret="nope"),
            backoff_s=0.01,
        )
        wrong_secret = RangeFetcher(
            "s3://private", storage_options=s3.storage_options(key=key, secret="nope")
        )
        try:
            assert good.cat_ranges([("k.bin", 0, 4)]) == [SMALL[:4]]
            with pytest.raises(RemoteAccessError, match=re.escape("s3://private/k.bin")) as e:
                bad.cat_ranges([("k.bin", 0, 4)])
            assert isinstance(e.value, PermissionError)
            assert bad.stats.retries == 0
            with pytest.raises(RemoteAccessError, match=re.escape("s3://private/k.bin")):
                wrong_secret.get("k.bin")
        finally:
            for f in (good, bad, wrong_secret):
                f.close()


@pytest.mark.timeout(60)
def test_s3_503_is_retried(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, fail_first=3, fail_mode="503")
    f = fetcher_factory(bucket, proxy, max_concurrency=4, retries=4)
    assert f.cat_ranges(ranges(8, 1000)) == [BLOB[i * 1000 : (i + 1) * 1000] for i in range(8)]
    assert proxy.failed == 3
    assert f.stats.retries == 3 and f.stats.requests == 11 and proxy.requests == 11


@pytest.mark.timeout(60)
def test_s3_connection_resets_are_retried(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, fail_first=4, fail_mode="reset")
    f = fetcher_factory(bucket, proxy, max_concurrency=1, retries=4)
    assert f.cat_ranges([("blob.bin", 5, 10)]) == [BLOB[5:10]]
    # aiohttp itself sends an idempotent request again once when its connection drops, so
    # each of our failed attempts is two resets at the proxy: attempts 1 and 2 fail, 3 works
    assert proxy.failed == 4 and proxy.requests == 5
    assert f.stats.retries == 2 and f.stats.requests == 3


@pytest.mark.timeout(60)
def test_s3_retries_run_out(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, fail_first=100, fail_mode="503")
    f = fetcher_factory(bucket, proxy, retries=2)
    with pytest.raises(
        RemoteError, match=re.escape("after 3 attempts: s3://fetch-tests/data/blob.bin")
    ) as e:
        f.cat_ranges([("blob.bin", 0, 10)])
    assert not isinstance(e.value, RemoteNotFoundError | RemoteAccessError)
    assert f.stats.retries == 2 and proxy.requests == 3


@pytest.mark.timeout(60)
def test_s3_timeout(
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url, 10.0)
    f = fetcher_factory(bucket, proxy, timeout_s=0.3, retries=1)
    with pytest.raises(RemoteTimeoutError, match=re.escape("s3://fetch-tests/data/blob.bin")) as e:
        f.cat_ranges([("blob.bin", 0, 10)])
    # gave up before the proxy answered anything (it holds each request 10 s), not by a clock
    assert proxy.bytes_sent == 0
    assert isinstance(e.value, TimeoutError)
    assert f.stats.retries == 1 and f.stats.requests == 2


@pytest.mark.timeout(60)
def test_pickled_fetcher_works_and_starts_fresh(
    bucket: str, fetcher_factory: Callable[..., RangeFetcher]
) -> None:
    f = fetcher_factory(bucket)
    f.get("dir/small.bin")
    g = pickle.loads(pickle.dumps(f))
    try:
        assert g._fs is None  # made lazily in the process that uses it
        assert g.get("dir/small.bin") == SMALL
        assert g.fs is not f.fs
    finally:
        g.close()


# -- HTTP ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_http_ranges_and_404(
    tmp_path: Path,
    http_server_factory: Callable[[Path], HTTPServer],
    latency_proxy_factory: Proxy,
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "blob.bin").write_bytes(BLOB)
    server = http_server_factory(tmp_path)
    proxy = latency_proxy_factory(server.url, 0.01)
    with RangeFetcher(f"{proxy.url}/d", max_concurrency=4, backoff_s=0.01) as f:
        out = f.cat_ranges([*ranges(10, 3000), ("blob.bin", -7, None), ("blob.bin", 299_000, None)])
        assert out == [BLOB[i * 3000 : (i + 1) * 3000] for i in range(10)] + [
            BLOB[-7:],
            BLOB[299_000:],
        ]
        assert proxy.requests == 12
        assert [r for _, _, r in proxy.log[:1]] == ["bytes=0-2999"]
        assert f.size("blob.bin") == len(BLOB)
        assert f.get("blob.bin") == BLOB
        with pytest.raises(RemoteNotFoundError, match=re.escape(f"{proxy.url}/d/missing.bin")):
            f.cat_ranges([("missing.bin", 0, 10)])
        assert f.stats.retries == 0
        assert not f.exists("missing.bin")


@pytest.mark.timeout(60)
def test_local_paths_use_threads(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(BLOB)
    for url in (str(tmp_path), f"file://{tmp_path}"):
        with RangeFetcher(url, max_concurrency=4) as f:
            assert f.cat_ranges([*ranges(5, 100), ("blob.bin", -3, None)]) == [
                *(BLOB[i * 100 : (i + 1) * 100] for i in range(5)),
                BLOB[-3:],
            ]
            assert f.stats.requests == 6 and f.size("blob.bin") == len(BLOB)
            with pytest.raises(RemoteNotFoundError, match=re.escape(f"{tmp_path}/nope.bin")):
                f.get("nope.bin")


# -- cache --------------------------------------------------------------------------------------


def cache_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file()]


@pytest.mark.timeout(60)
def test_cache_hits_skip_the_network(
    tmp_path: Path,
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url)
    cache = tmp_path / "cache"
    f = fetcher_factory(bucket, proxy, cache_dir=cache, cache_bytes=1 << 20)
    want = [BLOB[i * 1000 : (i + 1) * 1000] for i in range(10)]
    assert f.cat_ranges(ranges(10, 1000)) == want
    assert proxy.requests == 10 and len(cache_files(cache)) == 10
    assert f.cat_ranges(ranges(10, 1000)) == want
    assert proxy.requests == 10 and f.stats.cache_hits == 10

    # another fetcher (another worker) sharing the directory hits too
    g = fetcher_factory(bucket, proxy, cache_dir=cache, cache_bytes=1 << 20)
    assert g.cat_ranges(ranges(10, 1000)[::-1]) == want[::-1]
    assert proxy.requests == 10 and g.stats.cache_hits == 10

    # failed reads are not cached
    with pytest.raises(RemoteNotFoundError):
        f.cat_ranges([("missing.bin", 0, 10)])
    assert len(cache_files(cache)) == 10


@pytest.mark.timeout(60)
def test_cache_respects_its_byte_limit(
    tmp_path: Path,
    s3_server: S3Server,
    bucket: str,
    fetcher_factory: Callable[..., RangeFetcher],
    latency_proxy_factory: Proxy,
) -> None:
    proxy = latency_proxy_factory(s3_server.endpoint_url)
    cache = tmp_path / "cache"
    f = fetcher_factory(bucket, proxy, cache_dir=cache, cache_bytes=10_000)
    for i in range(30):  # 30 kB through a 10 kB cache
        f.cat_ranges([("blob.bin", i * 1000, (i + 1) * 1000)])
        assert sum(p.stat().st_size for p in cache_files(cache)) <= 10_000
    assert f.stats.cache_evictions > 0
    before = proxy.requests
    assert f.cat_ranges([("blob.bin", 29_000, 30_000)]) == [BLOB[29_000:30_000]]
    assert proxy.requests == before  # the most recent range is still there
    assert f.cat_ranges([("blob.bin", 0, 1000)]) == [BLOB[:1000]]
    assert proxy.requests == before + 1  # the oldest is gone


def _hammer_cache(fetcher: RangeFetcher, rounds: int) -> None:
    for r in range(rounds):
        reqs = ranges(40, 1000)
        reqs = reqs[r % 7 :] + reqs[: r % 7]
        out = fetcher.cat_ranges(reqs)
        for (_, a, b), got in zip(reqs, out, strict=True):
            if got != BLOB[a:b]:
                os._exit(3)
    os._exit(0)


@pytest.mark.timeout(90)
def test_two_processes_share_a_cache_dir(
    tmp_path: Path, bucket: str, fetcher_factory: Callable[..., RangeFetcher]
) -> None:
    cache = tmp_path / "cache"
    # 40 kB of ranges through a 25 kB cache: both processes write, hit and evict at once
    f = fetcher_factory(bucket, cache_dir=cache, cache_bytes=25_000, max_concurrency=4)
    f.get("dir/small.bin")  # the parent's async filesystem exists before the fork
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_hammer_cache, args=(f, 6)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    files = cache_files(cache)
    assert files and not [p for p in files if p.name.startswith(".tmp-")]
    pieces = {BLOB[i * 1000 : (i + 1) * 1000] for i in range(40)} | {SMALL}
    assert all(p.read_bytes() in pieces for p in files)  # only whole entries
    assert sum(p.stat().st_size for p in files) <= 25_000 * 2  # approximate across writers
    assert f.get("dir/small.bin") == SMALL  # the parent still works after the fork


# -- the proxy itself ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_latency_proxy_delays_and_counts(
    tmp_path: Path,
    http_server_factory: Callable[[Path], HTTPServer],
    latency_proxy_factory: Proxy,
) -> None:
    (tmp_path / "a.bin").write_bytes(SMALL)
    server = http_server_factory(tmp_path)
    proxy = latency_proxy_factory(server.url, 0.1)
    with RangeFetcher(proxy.url, max_concurrency=1) as f:
        t = time.monotonic()
        assert f.cat_ranges([("a.bin", i, i + 10) for i in range(5)]) == [
            SMALL[i : i + 10] for i in range(5)
        ]
        # a lower bound (the delay is the proxy's promise; a busy machine only adds to it)
        assert time.monotonic() - t >= 0.5  # 5 sequential requests, 0.1 s each at least
    assert proxy.requests == 5
    assert [r for _, _, r in proxy.log] == [f"bytes={i}-{i + 9}" for i in range(5)]
    assert proxy.bytes_sent > 50 and proxy.max_in_flight == 1
