"""An HTTP/1.1-aware proxy on loopback that delays every request (a far-away region), counts
requests and bytes, and can fail the first requests (connection reset or 503): what the remote
tests and ``benchmarks/bench_ranges.py`` put between a client and a loopback server."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
from typing import Any

__all__ = ["LatencyProxy"]


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
