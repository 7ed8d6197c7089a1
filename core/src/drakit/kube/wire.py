"""The API server's wire: decoding replies, mapping HTTP errors, reading a watch stream.

Shared by both transports of :class:`drakit.kube.KubeClient` (:mod:`drakit.kube.transport`, the
generated client's, and :mod:`drakit.kube.lean`, the hot path's). Errors are mapped onto drakit's
taxonomy:

* no connection, a timeout, TLS trouble, HTTP 5xx and 429 -> :class:`~drakit.errors.RetryableError`;
* HTTP 404 -> :class:`~drakit.errors.NotFoundError`, 409 -> :class:`~drakit.errors.ConflictError`,
  other 4xx -> :class:`~drakit.errors.PermanentError`, each with the server's own message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import orjson
import urllib3

from drakit.errors import ConflictError, NotFoundError, PermanentError, RetryableError

__all__ = [
    "CONNECT_TIMEOUT",
    "Stream",
    "decode",
    "document",
    "error_for",
    "lines",
    "selector",
    "short",
    "stale",
]

CONNECT_TIMEOUT = 5.0
"""Seconds allowed to connect to the API server."""


def decode(data: bytes) -> Any:
    """An API server reply's JSON: orjson, else the standard decoder's result or error.

    Where orjson refuses (nesting past 1,024 levels, NaN), the standard decoder decides: for a
    claim nested too deeply it raises ``RecursionError``, which the prepare pipeline reports as
    the claim's own fault, not as an API outage.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _status_message(status: int, data: bytes) -> str:
    """The server's ``Status.message`` (or the start of the body) for an error reply."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return str(doc["message"])
    text = data[:300].decode("utf-8", "replace").strip()
    return text or f"HTTP {status}"


def document(data: bytes, what: str) -> dict[str, Any]:
    """The JSON object of a successful reply; anything else is the server's (retryable) fault."""
    try:
        doc = decode(data)
    except ValueError as exc:
        raise RetryableError(f"{what}: the API server sent invalid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RetryableError(f"{what}: the API server sent {type(doc).__name__}, not an object")
    return doc


def error_for(status: int, data: bytes, what: str) -> PermanentError | RetryableError:
    """Map an HTTP error reply to drakit's taxonomy."""
    message = _status_message(status, data)
    if status == 429 or status >= 500:  # noqa: PLR2004 - HTTP status codes
        return RetryableError(f"{what}: API server answered {status}: {message}")
    if status == 404:  # noqa: PLR2004
        return NotFoundError(f"{what}: not found: {message}")
    if status == 409:  # noqa: PLR2004
        return ConflictError(f"{what}: conflict: {message}")
    return PermanentError(f"{what}: API server rejected the request ({status}): {message}")


class Stream(Protocol):
    """The parts of a streamed urllib3 response that a watch uses."""

    def stream(self, amt: int | None = ..., decode_content: bool | None = ...) -> Iterator[bytes]:
        """Yield the body in chunks as they arrive."""

    def shutdown(self) -> None:
        """Unblock a pending read from another thread."""

    def release_conn(self) -> None:
        """Return the connection to the pool."""

    def close(self) -> None:
        """Close the response."""


def selector(**fields: str | None) -> str:
    """A field selector of the ``fields`` that are set (``spec.nodeName=n,spec.driver=d``)."""
    return ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)


def stale(exc: BaseException) -> bool:
    """Whether a failure on a reused keep-alive connection means the server had closed it."""
    return isinstance(
        exc,
        ConnectionResetError  # http.client.RemoteDisconnected is one
        | BrokenPipeError
        | ConnectionAbortedError,
    )


def short(exc: BaseException) -> str:
    """The innermost useful reason of a urllib3 error (``Connection refused``)."""
    reason = getattr(exc, "reason", None)
    inner = reason if isinstance(reason, BaseException) else exc
    text = str(inner)
    if "Connection refused" in text:
        return "connection refused"
    return f"{type(inner).__name__}: {text}"[:300]


def lines(raw: Stream, what: str, stop_event: threading.Event) -> Iterator[str]:
    """Lines of a streamed (watch) response; errors become RetryableError unless stopping."""
    buf = bytearray()
    try:
        for chunk in raw.stream(amt=None, decode_content=True):
            buf.extend(chunk)
            while (nl := buf.find(b"\n")) != -1:
                line = bytes(buf[:nl]).decode("utf-8", "replace")
                del buf[: nl + 1]
                yield line
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        if stop_event.is_set():
            return
        raise RetryableError(f"{what}: the watch connection broke: {short(exc)}") from exc
    if buf.strip():
        yield bytes(buf).decode("utf-8", "replace")
