"""The Kubernetes API adapter: the only drakit module that imports ``kubernetes``.

Every call goes through the generated client's transport (authentication, TLS, proxies as
the kubeconfig or the pod's service account says) but sends and returns raw JSON: objects are
plain ``dict`` values, camelCase as the API server sends them. Nothing is deserialised into the
client's models, so fields that the client library does not know yet survive a read-modify-write
round trip.

Errors are mapped onto drakit's taxonomy:

* no connection, a timeout, TLS trouble, HTTP 5xx and 429 -> :class:`~drakit.errors.RetryableError`;
* HTTP 404 -> :class:`NotFoundError`, 409 -> :class:`ConflictError`, other 4xx ->
  :class:`~drakit.errors.PermanentError`, each with the server's own message.

urllib3 makes no retries of its own: backing off is the caller's job (see
:mod:`drakit.publish.publisher`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from drakit.errors import ConflictError, NotFoundError, PermanentError, RetryableError

__all__ = [
    "RESOURCE_SLICES",
    "ConflictError",
    "KubeClient",
    "NotFoundError",
]

logger = logging.getLogger(__name__)

RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
"""Collection path of ``resource.k8s.io/v1`` ResourceSlices."""

_CONNECT_TIMEOUT = 5.0
_SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"


def _decode(data: bytes) -> Any:
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


def _error_for(status: int, data: bytes, what: str) -> PermanentError | RetryableError:
    """Map an HTTP error reply to drakit's taxonomy."""
    message = _status_message(status, data)
    if status == 429 or status >= 500:  # noqa: PLR2004 - HTTP status codes
        return RetryableError(f"{what}: API server answered {status}: {message}")
    if status == 404:  # noqa: PLR2004
        return NotFoundError(f"{what}: not found: {message}")
    if status == 409:  # noqa: PLR2004
        return ConflictError(f"{what}: conflict: {message}")
    return PermanentError(f"{what}: API server rejected the request ({status}): {message}")


class _Stream(Protocol):
    """The parts of a streamed urllib3 response that a watch uses."""

    def stream(self, amt: int | None = ..., decode_content: bool | None = ...) -> Iterator[bytes]:
        """Yield the body in chunks as they arrive."""

    def shutdown(self) -> None:
        """Unblock a pending read from another thread."""

    def release_conn(self) -> None:
        """Return the connection to the pool."""

    def close(self) -> None:
        """Close the response."""


def _selector(**fields: str | None) -> str:
    return ",".join(f"{k}={v}" for k, v in fields.items() if v is not None)


class KubeClient:
    """A small, raw-JSON client for what a DRA node driver needs from the API server.

    Thread-safe: the underlying urllib3 pool is shared; concurrent calls are fine.

    Use :meth:`from_kubeconfig`; it also turns off urllib3's own retries (which would retry
    three times, logging a warning each time, before the caller's backoff sees the failure).

    Args:
        api_client: A configured ``kubernetes.client.ApiClient``, used as it is.
        request_timeout: Seconds allowed for one (non-watch) request.
    """

    def __init__(self, api_client: object, *, request_timeout: float = 30.0) -> None:
        api: Any = api_client
        self._api: Any = api
        self._timeout = request_timeout
        # The client's ``host`` property scans the environment for proxy settings on every read.
        self._base_url = str(api.configuration.host)
        self._read_timeout = urllib3.Timeout(connect=_CONNECT_TIMEOUT, read=request_timeout)
        self._headers: tuple[float, dict[str, str]] | None = None
        self._pool: Any = None
        self._base_path = (urllib3.util.parse_url(self._base_url).path or "").rstrip("/")

    @classmethod
    def from_kubeconfig(
        cls, path: Path | None = None, *, request_timeout: float = 30.0
    ) -> KubeClient:
        """Build a client from a kubeconfig file or, in a pod, the service account.

        Args:
            path: The kubeconfig. ``None``: the pod's service account when running in a pod
                (``KUBERNETES_SERVICE_HOST`` is set), else ``$KUBECONFIG`` or ``~/.kube/config``.
            request_timeout: Seconds allowed for one (non-watch) request.

        Returns:
            The client.

        Raises:
            PermanentError: The configuration cannot be loaded (names the file and the reason).
        """
        cfg: Any = k8s_client.Configuration()
        try:
            if path is None and os.environ.get(_SERVICE_HOST_ENV):
                k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
                source = "the pod's service account"
            else:
                file = path
                if file is None:
                    env = os.environ.get("KUBECONFIG", "")
                    file = (
                        Path(env.split(os.pathsep)[0]) if env else Path.home() / ".kube" / "config"
                    )
                k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=str(file), client_configuration=cfg, persist_config=False
                )
                source = str(file)
        except (k8s_config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = str(path) if path is not None else "in-cluster / default kubeconfig"
            raise PermanentError(
                f"cannot load Kubernetes client configuration ({where}): {exc}"
            ) from exc
        # No urllib3 retries (and so no urllib3 retry warnings): a failed request surfaces at
        # once as RetryableError and the caller backs off. Pooled connections that the server
        # closed are detected before reuse.
        cfg.retries = urllib3.Retry(total=0, redirect=0, raise_on_status=False)
        logger.debug("Kubernetes API %s (config from %s)", cfg.host, source)
        return cls(k8s_client.ApiClient(configuration=cfg), request_timeout=request_timeout)

    @property
    def host(self) -> str:
        """The API server URL."""
        return self._base_url

    def close(self) -> None:
        """Release pooled connections."""
        self._api.close()

    # ------------------------------------------------------------------ transport

    def _open(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: Mapping[str, str | int | bool] | None,
        body: Mapping[str, object] | None,
        timeout: float | tuple[float, float] | None,
    ) -> tuple[int, _Stream]:
        """Send one request; return the status and the unread (streaming) response."""
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        _method, url, headers, _body, _post = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self._api.call_api(
                method,
                url,
                header_params=headers,
                body=dict(body) if body is not None else None,
                _request_timeout=timeout or (_CONNECT_TIMEOUT, self._timeout),
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise RetryableError(
                f"{what}: cannot reach the API server at {self.host}: {_short(exc)}"
            ) from exc
        except k8s_client.ApiException as exc:  # the client wraps TLS errors in status 0
            raise RetryableError(
                f"{what}: cannot talk to the API server at {self.host}: {exc.reason}"
            ) from exc
        return int(resp.status), resp.response

    def _send(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: Mapping[str, str | int | bool] | None = None,
        body: Mapping[str, object] | None = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        """Send one request and decode the JSON reply (mapping errors)."""
        status, raw = self._open(method, path, what=what, query=query, body=body, timeout=timeout)
        try:
            data = b"".join(raw.stream(amt=65536, decode_content=True))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise RetryableError(
                f"{what}: connection to the API server broke: {_short(exc)}"
            ) from exc
        finally:
            raw.release_conn()
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            raise _error_for(status, data, what)
        if not data:
            return {}
        try:
            doc = _decode(data)
        except ValueError as exc:
            raise RetryableError(f"{what}: the API server sent invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise RetryableError(f"{what}: the API server sent {type(doc).__name__}, not an object")
        return doc

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """Send any API request and return the decoded JSON reply.

        Args:
            method: HTTP method.
            path: Absolute API path (``/apis/resource.k8s.io/v1/resourceslices``).
            query: Query parameters.
            body: JSON body.

        Returns:
            The decoded reply (``{}`` when empty).

        Raises:
            RetryableError: The server is unreachable or answered 5xx/429.
            PermanentError: The server refused the request (4xx); see :class:`NotFoundError`
                and :class:`ConflictError`.
        """
        return self._send(method, path, what=f"{method} {path}", query=query, body=body)

    # ---------------------------------------------------------------------- nodes

    def get_node(
        self, name: str, *, timeout: float | tuple[float, float] | None = None
    ) -> dict[str, Any] | None:
        """The Node called ``name``, or ``None`` if there is none.

        ``timeout``: seconds to connect and to wait for the answer, as ``(connect, read)`` or
        one number for both; by default the client's.
        """
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        try:
            return self._send("GET", path, what=f"GET {path}", timeout=timeout)
        except NotFoundError:
            return None

    # -------------------------------------------------- reads for `drakit explain`

    def list_all(self, path: str) -> list[dict[str, Any]]:
        """Every object of the collection at ``path`` (all namespaces), following ``continue``.

        Used by ``drakit explain claim`` for ResourceSlices, DeviceClasses, ResourceClaims and
        Nodes; the items come without ``apiVersion``/``kind``, as the API lists them.
        """
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query: dict[str, str | int | bool] = {"limit": 500}
            if token:
                query["continue"] = token
            doc = self.request("GET", path, query=query)
            items += doc.get("items") or []
            token = (doc.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    # ------------------------------------------------------------- resource slices

    def list_resource_slices(
        self, node_name: str, driver: str | None = None
    ) -> list[dict[str, Any]]:
        """The ResourceSlices with ``spec.nodeName == node_name`` (and ``spec.driver``)."""
        doc = self.request(
            "GET",
            RESOURCE_SLICES,
            query={
                "fieldSelector": _selector(**{"spec.nodeName": node_name, "spec.driver": driver})
            },
        )
        items: list[dict[str, Any]] = doc.get("items") or []
        for item in items:  # list items come without apiVersion/kind
            item.setdefault("apiVersion", "resource.k8s.io/v1")
            item.setdefault("kind", "ResourceSlice")
        return items

    def create_resource_slice(
        self, obj: Mapping[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create a ResourceSlice; returns the object as stored (or as it would be: ``dry_run``)."""
        query: dict[str, str | int | bool] = {"dryRun": "All"} if dry_run else {}
        name = obj.get("metadata", {}).get("name") or "(generated name)"
        return self._send(
            "POST", RESOURCE_SLICES, what=f"create ResourceSlice {name}", query=query, body=obj
        )

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice; ``metadata.resourceVersion`` makes it conditional.

        Raises:
            ConflictError: The slice changed since ``resourceVersion`` was read.
        """
        name = obj["metadata"]["name"]
        return self._send(
            "PUT",
            f"{RESOURCE_SLICES}/{quote(name, safe='')}",
            what=f"update ResourceSlice {name}",
            body=obj,
        )

    def delete_resource_slice(
        self, name: str, uid: str | None = None, *, resource_version: str | None = None
    ) -> None:
        """Delete a ResourceSlice; a missing one is fine.

        Args:
            name: Its name.
            uid: Precondition: only delete the object with this UID (not a namesake).
            resource_version: Precondition: only delete this version of it.

        Raises:
            ConflictError: A precondition failed.
        """
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            body["preconditions"] = pre
        try:
            self._send(
                "DELETE",
                f"{RESOURCE_SLICES}/{quote(name, safe='')}",
                what=f"delete ResourceSlice {name}",
                body=body,
            )
        except NotFoundError:
            logger.debug("ResourceSlice %s was already gone", name)

    def watch_resource_slices(
        self,
        node_name: str,
        stop_event: threading.Event,
        timeout_seconds: int = 300,
        *,
        driver: str | None = None,
        resource_version: str | None = None,
        on_connect: Callable[[], None] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watch this node's ResourceSlices; yields ``(type, object)`` until the watch ends.

        Without ``resource_version`` the server first sends an ``ADDED`` event per existing
        slice. The iterator ends when the server closes the watch (after about
        ``timeout_seconds``) or soon after ``stop_event`` is set. ``BOOKMARK`` events are passed
        on (their object only carries ``metadata.resourceVersion``). ``on_connect`` is called
        once the server has accepted the watch, before any event, so that a caller can tell a
        reachable server from a quiet one.

        Raises:
            RetryableError: The connection failed or broke, the server answered 5xx, or the
                watch expired (410 Gone: list again and restart).
            PermanentError: The server refused the watch (e.g. 403: RBAC lacks ``watch``).
        """
        query: dict[str, str | int | bool] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": int(timeout_seconds),
            "fieldSelector": _selector(**{"spec.nodeName": node_name, "spec.driver": driver}),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        what = f"watch ResourceSlices of node {node_name}"
        status, raw = self._open(
            "GET",
            RESOURCE_SLICES,
            what=what,
            query=query,
            body=None,
            timeout=(_CONNECT_TIMEOUT, timeout_seconds + 30.0),
        )
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            try:
                data = b"".join(raw.stream(amt=65536, decode_content=True))
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            raise _error_for(status, data, what)
        if on_connect is not None:
            on_connect()
        done = threading.Event()

        def close_on_stop() -> None:
            while not done.is_set():
                if stop_event.wait(0.25):
                    with contextlib.suppress(Exception):
                        raw.shutdown()
                    return

        closer = threading.Thread(target=close_on_stop, name="drakit-watch-closer", daemon=True)
        closer.start()
        try:
            for line in _lines(raw, what, stop_event):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise RetryableError(f"{what}: undecodable event: {exc}") from exc
                etype = str(event.get("type", ""))
                obj = event.get("object") or {}
                if etype == "ERROR":
                    code = int(obj.get("code") or 500)
                    if code == 410:  # noqa: PLR2004 - Gone: the resourceVersion is too old
                        raise RetryableError(f"{what}: watch expired: {obj.get('message', '')}")
                    raise _error_for(code, json.dumps(obj).encode(), what)
                yield etype, obj
        finally:
            done.set()
            with contextlib.suppress(Exception):
                raw.release_conn()
            with contextlib.suppress(Exception):
                raw.close()

    # -------------------------------------------------------------------- claims

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """A ResourceClaim.

        Raises:
            NotFoundError: There is no such claim.
        """
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaims/{quote(name, safe='')}"
        )
        return self._lean_get(path, what=f"GET {path}")

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
                f"{what}: cannot reach the API server at {self.host}: {_short(exc)}"
            ) from exc
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            raise _error_for(status, data, what)
        try:
            doc = _decode(data)
        except ValueError as exc:
            raise RetryableError(f"{what}: the API server sent invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise RetryableError(f"{what}: the API server sent {type(doc).__name__}, not an object")
        return doc

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
                    conn.timeout = _CONNECT_TIMEOUT
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
                if attempt == 1 and reused and _stale(exc):
                    continue
                raise
            pool._put_conn(conn)
            return int(resp.status), data
        raise AssertionError("unreachable")  # pragma: no cover

    def apply_claim_device_status(
        self,
        namespace: str,
        name: str,
        uid: str,
        devices: list[dict[str, Any]],
        *,
        field_manager: str,
    ) -> dict[str, Any]:
        """Server-side apply of ``status.devices`` entries to a ResourceClaim (one PATCH).

        ``status.devices`` is a list map keyed by driver, pool, device and shareID, so the API
        server merges these entries with those of other field managers (other drivers) and
        removes the entries ``field_manager`` applied before but no longer lists. ``uid``
        guards against a claim that was deleted and recreated under the same name: the API
        server refuses the patch instead of applying it to the new claim. ``force`` takes
        over fields another manager set, so the apply itself never conflicts.

        Raises:
            NotFoundError: There is no such claim.
            ConflictError: The claim's UID is not ``uid`` (or another 409 from the server).
            PermanentError: The server refused the entries (4xx, e.g. a device not allocated).
            RetryableError: The server is unreachable or answered 5xx/429.
        """
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaims/{quote(name, safe='')}/status"
            f"?fieldManager={quote(field_manager, safe='')}&force=true"
        )
        patch = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": namespace, "name": name, "uid": uid},
            "status": {"devices": devices},
        }
        return self._lean(
            "PATCH",
            path,
            what=f"apply status.devices of ResourceClaim {namespace}/{name}",
            body=json.dumps(patch, separators=(",", ":")).encode(),
            content_type="application/apply-patch+yaml",  # JSON is YAML
        )

    # -------------------------------------------------------------------- events

    def create_event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Warning",
        *,
        component: str = "drakit",
    ) -> dict[str, Any]:
        """Record a ``v1`` Event about an object.

        Args:
            involved: The object: ``kind``, ``name``, ``apiVersion`` and, where known,
                ``namespace`` and ``uid``. Events about cluster-scoped objects (a Node, a
                ResourceSlice) go to the ``default`` namespace.
            reason: A short CamelCase reason (``DroppedFields``).
            message: What happened, for humans (cut to 1024 characters).
            type: ``Warning`` or ``Normal``.
            component: The reporting component.

        Returns:
            The created Event.
        """
        namespace = involved.get("namespace") or "default"
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ref = {
            k: v
            for k, v in involved.items()
            if k in {"kind", "name", "namespace", "uid", "apiVersion"} and v
        }
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{involved.get('name', 'drakit')[:200]}.",
                "namespace": namespace,
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": os.environ.get("NODE_NAME", "") or component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self.request(
            "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body=body
        )


def _stale(exc: BaseException) -> bool:
    """Whether a failure on a reused keep-alive connection means the server had closed it."""
    return isinstance(
        exc,
        ConnectionResetError  # http.client.RemoteDisconnected is one
        | BrokenPipeError
        | ConnectionAbortedError,
    )


def _short(exc: BaseException) -> str:
    """The innermost useful reason of a urllib3 error (``Connection refused``)."""
    reason = getattr(exc, "reason", None)
    inner = reason if isinstance(reason, BaseException) else exc
    text = str(inner)
    if "Connection refused" in text:
        return "connection refused"
    return f"{type(inner).__name__}: {text}"[:300]


def _lines(raw: _Stream, what: str, stop_event: threading.Event) -> Iterator[str]:
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
        raise RetryableError(f"{what}: the watch connection broke: {_short(exc)}") from exc
    if buf.strip():
        yield bytes(buf).decode("utf-8", "replace")
