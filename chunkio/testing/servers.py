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

Needs pytest; moto[server] and boto3 (the ``dev`` extra) only when an :class:`S3Server` starts.
Without them, or when the server does not start, the test is skipped on a developer's machine
(the skip says why) but *fails* where the ``CI`` environment variable is set: a remote suite
that cannot run must not turn into a green run of nothing (:func:`unavailable`). The
range-request benchmark that runs on them is ``benchmarks/bench_ranges.py``.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

from .latency_proxy import LatencyProxy

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


__all__ = [
    "KEY",
    "REGION",
    "SECRET",
    "HTTPServer",
    "LatencyProxy",
    "S3Server",
    "http_server_factory_fixture",
    "in_ci",
    "latency_proxy_factory_fixture",
    "require",
    "s3_server_fixture",
    "unavailable",
]


def in_ci() -> bool:
    """Whether this run is CI's (the ``CI`` environment variable set, and not to 0/false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test because ``reason`` (what is missing, and how to get it), or fail
    it under CI, where every optional package is installed and every server must start."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: this must run, not skip)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str, reason: str) -> ModuleType:
    """``pytest.importorskip(module)`` that fails under CI instead (:func:`unavailable`)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        unavailable(f"{reason}: {err}")


class S3Server:
    """A moto S3 server on 127.0.0.1 in a child process; ``with S3Server() as s3: ...``.

    Skips the calling test (``pytest.skip``) when moto is not installed or does not start;
    fails it instead under CI (:func:`unavailable`).
    """

    def __init__(self, *, start_timeout_s: float = 30.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._log: Any = None
        self.endpoint_url = ""

    def __enter__(self) -> S3Server:
        require("moto.server", "moto[server] is not installed (pip install -e .[dev])")
        require("boto3", "boto3 is not installed (comes with moto)")
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
            unavailable(f"moto server did not start within {self.start_timeout_s}s: {tail}")
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
