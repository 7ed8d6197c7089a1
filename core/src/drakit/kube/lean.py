"""The hot path's transport: the claim GET and the status apply, without per-call request building.

Same connection pool, TLS and credentials as :mod:`drakit.kube.transport` (the headers, auth and
URL are all the generated client would send; the token is refreshed at most once a second), but
the request is driven on a pooled keep-alive connection with the standard library's
``http.client``: urllib3's per-request layer costs more CPU than the claim GET's own work.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Mapping
from typing import Any

import urllib3

from drakit.errors import RetryableError
from drakit.kube.transport import ClientTransport
from drakit.kube.wire import CONNECT_TIMEOUT, document, error_for, short, stale

__all__ = ["LeanTransport"]


class LeanTransport(ClientTransport):
    """:class:`~drakit.kube.transport.ClientTransport` plus the lean requests of the hot path.

    Args:
        api_client: A configured ``kubernetes.client.ApiClient``, used as it is.
        request_timeout: Seconds allowed for one (non-watch) request.
    """

    def __init__(self, api_client: object, *, request_timeout: float = 30.0) -> None:
        super().__init__(api_client, request_timeout=request_timeout)
        self._read_timeout = urllib3.Timeout(connect=CONNECT_TIMEOUT, read=request_timeout)
        self._headers: tuple[float, dict[str, str]] | None = None
        self._pool: Any = None
        self._base_path = (urllib3.util.parse_url(self._base_url).path or "").rstrip("/")

    def _lean_headers(self) -> dict[str, str]:
        """The headers the client would send, credentials refreshed at most once a second.

        Refreshing runs the kubeconfig's token hook, which re-sets the configuration's host
        (and so re-reads the proxy environment): too dear for every claim GET.
        """
        now = time.monotonic()
        cached = self._headers
        if cached is not None and now < cached[0]:
            return cached[1]
        api = self._api
        headers: dict[str, str] = {"Accept": "application/json", **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        for auth in api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        self._headers = (now + 1.0, headers)
        return headers

    def _lean_get(self, path: str, *, what: str) -> dict[str, Any]:
        """A GET on the hot path (every prepare), without the client's per-call request building.

        Same connection pool, TLS and credentials as :meth:`request`: the headers, auth and URL
        are all the client would send (the token is refreshed at most once a second).
        """
        return self._lean("GET", path, what=what)

    def _lean(
        self,
        method: str,
        path: str,
        *,
        what: str,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request through the client's own pool, TLS and credentials (see _lean_get).

        The connection comes from the urllib3 pool the client itself uses for this server (so
        TLS, client certificates and the pool's size are the client's) and is driven with the
        standard library's ``http.client`` methods it inherits: urllib3's per-request layer
        (retry and timeout objects, its response wrapper) costs more CPU than the claim GET's
        own work. With a proxy in the kubeconfig, urllib3's ``urlopen`` does the whole request.
        """
        headers = self._lean_headers()
        if body is not None:
            headers = {**headers, "Content-Type": content_type}
        if self._pool is None:  # the pool the client itself uses for this server
            self._pool = self._api.rest_client.pool_manager.connection_from_url(self._base_url)
        try:
            if getattr(self._pool, "proxy", None) is not None:
                status, data = self._urlopen(method, path, body, headers)
            else:
                status, data = self._exchange(method, path, body, headers)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise RetryableError(
                f"{what}: cannot reach the API server at {self.host}: {short(exc)}"
            ) from exc
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            raise error_for(status, data, what)
        return document(data, what)

    def _urlopen(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        resp = self._pool.urlopen(
            method,
            self._base_path + path,
            body=body,
            headers=headers,
            timeout=self._read_timeout,
            retries=False,
            redirect=False,
            preload_content=True,
        )
        return int(resp.status), bytes(resp.data)

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, bytes]:
        """Send one request on a pooled keep-alive connection and read the whole answer.

        A connection the server closed while it sat in the pool fails on first use: the request
        is sent once more on a new connection (every lean request is idempotent: a GET, or a
        server-side apply). Any failure closes the connection, so the pool never gets back one
        in the middle of an exchange.
        """
        pool = self._pool
        for attempt in (1, 2):
            conn = pool._get_conn()  # urllib3 resets one the server dropped
            reused = conn.sock is not None
            try:
                if not reused:
                    conn.timeout = CONNECT_TIMEOUT
                http.client.HTTPConnection.request(
                    conn, method, self._base_path + path, body=body, headers=dict(headers)
                )
                if conn.sock.gettimeout() != self._timeout:
                    conn.sock.settimeout(self._timeout)
                resp = http.client.HTTPConnection.getresponse(conn)
                data = resp.read()
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                pool._put_conn(conn)  # a closed one reconnects on next use
                if attempt == 1 and reused and stale(exc):
                    continue
                raise
            pool._put_conn(conn)
            return int(resp.status), data
        raise AssertionError("unreachable")  # pragma: no cover
