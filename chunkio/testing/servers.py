"""Real servers on loopback for the remote-fetch tests and benchmarks.

* :class:`S3Server`: a ``moto`` S3 server in a child process (its own interpreter, so its GIL,
  its global state and its auth switch are not the test process's).
* :class:`LatencyProxy`: an HTTP/1.1-aware proxy that delays every request (a far-away region),
  counts requests and bytes, and can fail the first requests (connection reset or 503).
* :class:`HTTPServer`: ``http.server`` serving a directory read-only, with ``Range`` support
  (the stdlib handler ignores ``Range``).

Fixtures (import them into a test module with
``from chunkio.testing.servers import s3_server_fixture  # noqa: F401``): ``s3_server``
(session), ``http_server_factory``, ``latency_proxy_factory``.

Needs pytest; moto[server] and boto3 (the ``dev`` extra) only when an :class:`S3Server` starts
(a test without them is skipped), obstore only for its rows of the benchmark.

Benchmark (numbers quoted in ``chunkio/remote.py``)::

    .venv/bin/python -m chunkio.testing.servers
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

KEY = "testing"
SECRET = "testing"
REGION = "us-east-1"

_MOTO_CHILD = r"""
import logging, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # the parent closes stdin (or dies): stop
server.stop()
"""


class S3Server:
    """A moto S3 server on 127.0.0.1 in a child process; ``with S3Server() as s3: ...``.

    Skips the calling test (``pytest.skip``) when moto is not installed or does not start.
    """

    def __init__(self, *, start_timeout_s: float = 30.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._log: Any = None
        self.endpoint_url = ""

    def __enter__(self) -> S3Server:
        pytest.importorskip("moto", reason="moto[server] is not installed (pip install -e .[dev])")
        pytest.importorskip("boto3", reason="boto3 is not installed (comes with moto)")
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _MOTO_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        port = self._read_port()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        return self

    def _read_port(self) -> int:
        assert self._proc is not None and self._proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(
            target=lambda: result.append(self._proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(self.start_timeout_s)
        line = result[0].strip() if result else ""
        if not line.isdigit():
            self._log.seek(0)
            tail = self._log.read()[-2000:]
            self.__exit__()
            pytest.skip(f"moto server did not start within {self.start_timeout_s}s: {tail}")
        return int(line)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- clients ---------------------------------------------------------------------------------

    def storage_options(
        self,
        *,
        endpoint_url: str | None = None,
        key: str = KEY,
        secret: str = SECRET,
        **extra: Any,
    ) -> dict[str, Any]:
        """s3fs options for this server (``endpoint_url``: e.g. a :class:`LatencyProxy` url)."""
        return {
            "key": key,
            "secret": secret,
            "client_kwargs": {
                "endpoint_url": endpoint_url or self.endpoint_url,
                "region_name": REGION,
            },
            **extra,
        }

    def client(self, *, key: str = KEY, secret: str = SECRET) -> Any:
        """A boto3 S3 client talking to the server directly."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name=REGION,
        )

    def create_bucket(self, bucket: str) -> None:
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)

    def upload_dir(self, local_dir: str | os.PathLike[str], bucket: str, prefix: str = "") -> str:
        """Upload every file under ``local_dir`` to ``s3://bucket/prefix/...``; returns that url."""
        self.create_bucket(bucket)
        client = self.client()
        root = Path(local_dir)
        prefix = prefix.strip("/")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}" if prefix else rel,
                              Body=path.read_bytes())  # fmt: skip
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.create_bucket(bucket)
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def set_auth(self, enabled: bool) -> None:
        """Make moto check credentials (IAM) from now on, or stop checking them."""
        count = b"0" if enabled else b"inf"
        req = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/reset-auth",
            data=count,
            method="POST",
            headers={"Content-Type": "text/plain"},  # a form body would not reach moto
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            json.loads(r.read())

    def create_user_key(self, user: str = "reader") -> tuple[str, str]:
        """An IAM user allowed every S3 action; returns its (access key, secret)."""
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


# -- latency proxy ---------------------------------------------------------------------------------


class LatencyProxy:
    """HTTP/1.1 proxy on 127.0.0.1 that sleeps ``delay_s`` before forwarding each request.

    Each client connection gets its own upstream connection (keep-alive on both sides; many
    concurrent connections). Counts ``requests``, ``bytes_sent`` (to clients) and keeps
    ``log`` = [(method, path, range header)]. ``fail_first=N`` fails the first N requests:
    ``fail_mode="reset"`` drops the connection with a TCP RST, ``"503"`` answers 503 SlowDown.
    ``with LatencyProxy(target, 0.02) as proxy: proxy.url``.
    """

    def __init__(
        self,
        target_url: str,
        delay_s: float = 0.0,
        *,
        fail_first: int = 0,
        fail_mode: str = "reset",
    ) -> None:
        m = re.match(r"^http://([^/:]+):(\d+)/?$", target_url)
        if not m:
            raise ValueError(f"LatencyProxy needs http://host:port, got {target_url!r}")
        if fail_mode not in ("reset", "503"):
            raise ValueError(f"fail_mode must be 'reset' or '503', got {fail_mode!r}")
        self.target = (m.group(1), int(m.group(2)))
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.fail_mode = fail_mode
        self.requests = 0
        self.failed = 0
        self.bytes_sent = 0
        self.connections = 0
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being answered at once
        self.log: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        # upstream connection of each client connection (only touched on the proxy's loop)
        self._up: dict[asyncio.StreamWriter, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self.url = ""

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = self.failed = self.bytes_sent = self.connections = 0
            self.max_in_flight = self.in_flight
            self.log.clear()

    def __enter__(self) -> LatencyProxy:
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            ready.set()
            loop.run_forever()
            # shut down: close the listener and every connection still open
            self._server.close()
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="LatencyProxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("LatencyProxy did not start")
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None
            self._thread = None

    # -- per connection --------------------------------------------------------------------------

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        with self._lock:
            self.connections += 1
        try:
            while True:
                try:
                    head = await creader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, path, headers = _parse_head(head)
                if headers.get("expect", "").lower() == "100-continue":
                    cwriter.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = re.sub(rb"(?im)^expect:[^\r\n]*\r\n", b"", head)
                body = await _read_body(creader, headers)
                with self._lock:
                    self.requests += 1
                    self.log.append((method, path, headers.get("range")))
                    fail = self.failed < self.fail_first
                    if fail:
                        self.failed += 1
                    self.in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    close = await self._forward(cwriter, head, body, method, fail)
                finally:
                    with self._lock:
                        self.in_flight -= 1
                if close or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # the proxy is stopping (a raise here is logged noise)
            return
        finally:
            if self._up.get(cwriter) is not None:
                self._up.pop(cwriter)[1].close()
            cwriter.close()

    async def _forward(
        self, cwriter: asyncio.StreamWriter, head: bytes, body: bytes, method: str, fail: bool
    ) -> bool:
        """Answer one request (after the delay); returns whether the client connection closes."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if fail and self.fail_mode == "reset":
            sock = cwriter.get_extra_info("socket")
            if sock is not None:  # RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            cwriter.transport.abort()
            return True
        if fail:
            msg = (
                b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                b"<Message>Please reduce your request rate.</Message></Error>"
            )
            cwriter.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)
            )
            await cwriter.drain()
            return False
        up = self._up.get(cwriter)
        if up is None or up[0].at_eof():
            if up is not None:
                up[1].close()
            up = self._up[cwriter] = await asyncio.open_connection(*self.target)
        up[1].write(head + body)
        await up[1].drain()
        close, up_closed = await self._relay_response(method, up[0], cwriter)
        if up_closed:  # the upstream (werkzeug) closes after each response: reconnect next time
            self._up.pop(cwriter)[1].close()
        return close

    async def _relay_response(
        self, method: str, ureader: asyncio.StreamReader, cwriter: asyncio.StreamWriter
    ) -> tuple[bool, bool]:
        """Copy one response upstream -> client.

        Returns (the client connection must close, the upstream one closes). An upstream
        ``Connection: close`` (werkzeug, hence moto, sends it on every response) is hidden from
        the client when the body has a length, so clients keep their connections alive as with a
        real object store; the proxy reconnects upstream instead (cheap on loopback).
        """
        while True:
            head = await ureader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status >= 200 or status == 101:
                break
            cwriter.write(head)  # 1xx interim response
        _, _, headers = _parse_head(head, response=True)
        up_closed = headers.get("connection", "").lower() == "close"
        delimited = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")
        no_body = method == "HEAD" or status in (204, 304)
        if up_closed and (delimited or no_body):
            head = re.sub(rb"(?im)^connection:[^\r\n]*\r\n", b"", head)
        close = up_closed and not (delimited or no_body)
        sent = len(head)
        cwriter.write(head)
        if no_body:
            pass
        elif delimited:
            async for piece in _iter_body(ureader, headers):
                sent += len(piece)
                cwriter.write(piece)
                await cwriter.drain()
        else:  # body runs to EOF
            while piece := await ureader.read(1 << 16):
                sent += len(piece)
                cwriter.write(piece)
                await cwriter.drain()
            close = True
        await cwriter.drain()
        with self._lock:
            self.bytes_sent += sent
        return close, up_closed


def _parse_head(head: bytes, *, response: bool = False) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if response:
        return "", "", headers
    return first[0], first[1] if len(first) > 1 else "", headers


async def _iter_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> Any:
    if "chunked" in headers.get("transfer-encoding", ""):
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0], 16)
            data = await reader.readexactly(size + 2) if size else b""
            if size == 0:  # trailers until the empty line
                trailer = line
                while True:
                    t = await reader.readuntil(b"\r\n")
                    trailer += t
                    if t == b"\r\n":
                        break
                yield trailer
                return
            yield line + data
    else:
        left = int(headers.get("content-length", "0"))
        while left > 0:
            piece = await reader.read(min(left, 1 << 16))
            if not piece:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(piece)
            yield piece


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    return b"".join([piece async for piece in _iter_body(reader, headers)])


# -- HTTP server with Range ------------------------------------------------------------------------

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real object stores

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        spec = self.headers.get("Range")
        m = _RANGE.match(spec.strip()) if spec else None
        if m is None or m.groups() == ("", ""):
            super().do_GET()  # no (or a multi-range) request: the whole file, 200
            return
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404, "File not found")
            return
        size = os.path.getsize(path)
        a, b = m.groups()
        if a == "":  # suffix: the last b bytes
            start, stop = max(0, size - int(b)), size
        else:
            start, stop = int(a), size if b == "" else min(size, int(b) + 1)
        if start >= size or stop <= start:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(stop - start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(data)


class HTTPServer:
    """Read-only HTTP server for ``directory`` on 127.0.0.1 with ``Range: bytes=a-b`` (206)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> HTTPServer:
        directory = self.directory

        class Handler(_RangeHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="session", name="s3_server")
def s3_server_fixture() -> Iterator[S3Server]:
    """One moto S3 server for the whole session (buckets: make your own names)."""
    with S3Server() as server:
        yield server


@pytest.fixture(name="http_server_factory")
def http_server_factory_fixture() -> Iterator[Callable[[str | os.PathLike[str]], HTTPServer]]:
    """``http_server_factory(directory)`` -> a started :class:`HTTPServer`, stopped after."""
    with contextlib.ExitStack() as stack:
        yield lambda directory: stack.enter_context(HTTPServer(directory))


@pytest.fixture(name="latency_proxy_factory")
def latency_proxy_factory_fixture() -> Iterator[Callable[..., LatencyProxy]]:
    """``latency_proxy_factory(target_url, delay_s, **kw)`` -> a started :class:`LatencyProxy`."""
    with contextlib.ExitStack() as stack:
        yield lambda *a, **kw: stack.enter_context(LatencyProxy(*a, **kw))


# -- benchmark -------------------------------------------------------------------------------------


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


if __name__ == "__main__":
    print(f"{'client':8} {'delay ms':>8} {'conc':>5} {'req/s':>7} {'MiB/s':>6}")
    for r in benchmark():
        print(f"{r['client']:8} {r['delay_ms']:8.0f} {r['concurrency']:5d} "
              f"{r['req_per_s']:7.0f} {r['MiB_per_s']:6.1f}")  # fmt: skip
