"""Which remote failures are worth another attempt, and the bounded retry loop around one.

Transient failures (5xx / SlowDown, connection reset or refused, timeouts, cut bodies) are
retried ``retries`` times with exponential backoff (``backoff_s * 2**attempt``, jittered); the
rest are raised at once as typed errors naming the url and range:
:class:`~chunkio.errors.RemoteNotFoundError` (404, NoSuchKey, NoSuchBucket),
:class:`~chunkio.errors.RemoteAccessError` (403, bad or expired credentials),
:class:`~chunkio.errors.RemoteTimeoutError` (no answer within ``timeout_s``, after the retries),
:class:`~chunkio.errors.RemoteError` for everything else. Failures are classified by status
code, S3 error code and exception class name, so no optional package is imported for it.
"""

from __future__ import annotations

import asyncio
import errno
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from chunkio.errors import (
    RemoteAccessError,
    RemoteError,
    RemoteNotFoundError,
    RemoteTimeoutError,
)

__all__ = ["RetryPolicy", "classify", "describe_range", "wrap"]

T = TypeVar("T")

NOT_FOUND, ACCESS, TIMEOUT, TRANSIENT, FATAL = "notfound", "access", "timeout", "retry", "fatal"
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "NotFound", "404", "NoSuchVersion"}
_ACCESS_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "AccountProblem",
    "403",
    "401",
}
_TRANSIENT_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "Throttling",
    "ThrottlingException",
    "503",
    "500",
}
_TRANSIENT_NAMES = {  # by class name: no import of the optional packages needed
    "ClientConnectionError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "ClientOSError",
    "HTTPClientError",
    "EndpointConnectionError",
    "ConnectionClosedError",
    "IncompleteRead",
    "ResponseParserError",
    "ProxyConnectionError",
}
_TIMEOUT_NAMES = {"ReadTimeoutError", "ConnectTimeoutError", "FSTimeoutError", "ServerTimeoutError"}


def _status_and_code(exc: BaseException) -> tuple[int | None, str | None]:
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, Mapping):
        err = response.get("Error", {}) or {}
        meta = response.get("ResponseMetadata", {}) or {}
        status = meta.get("HTTPStatusCode")
        return (int(status) if status is not None else None), err.get("Code")
    status = getattr(exc, "status", None)  # aiohttp ClientResponseError
    if isinstance(status, int):
        return status, None
    return None, None


def classify(exc: BaseException) -> str:
    """What kind of failure ``exc`` is, looking through its causes."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        status, code = _status_and_code(e)
        if code in _NOT_FOUND_CODES or status in (404, 410):
            return NOT_FOUND
        if code in _ACCESS_CODES or status in (401, 403):
            return ACCESS
        if code in _TRANSIENT_CODES or (status is not None and (status >= 500 or status == 429)):
            return TRANSIENT
    for e in chain:
        names = {cls.__name__ for cls in type(e).__mro__}
        if isinstance(e, asyncio.TimeoutError | TimeoutError) or names & _TIMEOUT_NAMES:
            return TIMEOUT
        if isinstance(e, FileNotFoundError):
            return NOT_FOUND
        if isinstance(e, PermissionError):
            return ACCESS
        if isinstance(e, ConnectionError) or names & _TRANSIENT_NAMES:
            return TRANSIENT
        if isinstance(e, OSError) and e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT):
            return TRANSIENT
    return FATAL


def describe_range(url: str, start: int | None, stop: int | None) -> str:
    """A url and range as error messages name them.

    >>> describe_range("s3://b/k", None, None), describe_range("s3://b/k", -8, None)
    ('s3://b/k', 's3://b/k [last 8 bytes]')
    """
    if start is None and stop is None:
        return url
    if start is not None and start < 0 and stop is None:
        return f"{url} [last {-start} bytes]"
    return f"{url} [bytes {start or 0}:{'' if stop is None else stop}]"


def wrap(exc: BaseException, what: str, attempts: int) -> RemoteError:
    """The typed error for a failure that is not retried (again)."""
    kind = classify(exc)
    detail = f"{type(exc).__name__}: {exc}"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if kind == NOT_FOUND:
        return RemoteNotFoundError(errno.ENOENT, f"not found: {what} ({detail})")
    if kind == ACCESS:
        return RemoteAccessError(errno.EACCES, f"access denied: {what} ({detail})")
    if kind == TIMEOUT:
        return RemoteTimeoutError(errno.ETIMEDOUT, f"timed out{tries}: {what} ({detail})")
    return RemoteError(errno.EIO, f"remote read failed{tries}: {what} ({detail})")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one request is attempted.

    ``count(requests=..., retries=...)`` is told of every attempt, so the caller's statistics
    see retries that a library's own retry loop would hide.
    """

    retries: int = 4
    backoff_s: float = 0.05
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    def delay(self, attempt: int) -> float:
        return float(self.backoff_s * (2**attempt) * (0.5 + random.random()))

    def _again(self, exc: Exception, what: str, attempt: int) -> None:
        if classify(exc) not in (TRANSIENT, TIMEOUT) or attempt >= self.retries:
            raise wrap(exc, what, attempt + 1) from exc

    def run_sync(self, op: Callable[[], T], what: str, count: Callable[..., None]) -> T:
        attempt = 0
        while True:
            count(requests=1)
            try:
                return op()
            except Exception as exc:
                self._again(exc, what, attempt)
            count(retries=1)
            time.sleep(self.delay(attempt))
            attempt += 1

    async def run_async(
        self, op: Callable[[], Awaitable[T]], what: str, count: Callable[..., None]
    ) -> T:
        attempt = 0
        while True:
            count(requests=1)
            try:
                return await asyncio.wait_for(op(), self.timeout_s)
            except Exception as exc:
                self._again(exc, what, attempt)
            count(retries=1)
            await asyncio.sleep(self.delay(attempt))
            attempt += 1
