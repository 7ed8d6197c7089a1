"""The API calls a DRA node driver makes: Nodes, ResourceSlices, ResourceClaims, Events.

Objects are plain ``dict`` values, camelCase as the API server sends them, so fields that the
client library does not know yet survive a read-modify-write round trip.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from drakit.errors import ConflictError, NotFoundError, PermanentError, RetryableError
from drakit.kube.lean import LeanTransport
from drakit.kube.wire import CONNECT_TIMEOUT, error_for, lines, selector

__all__ = ["RESOURCE_SLICES", "KubeClient"]

logger = logging.getLogger(__name__)

RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
"""Collection path of ``resource.k8s.io/v1`` ResourceSlices."""

_SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
_RAW_CONFIG_REFUSED = "status.allocation: Invalid value: null: field cannot be modified once set"
"""kube-apiserver 1.37.2's answer to any patch of the status of a claim whose opaque config
parameters were not stored as compact JSON with sorted keys (``test_claim_device_status.py``)."""


class KubeClient(LeanTransport):
    """A small, raw-JSON client for what a DRA node driver needs from the API server.

    Thread-safe: the underlying urllib3 pool is shared; concurrent calls are fine.

    Use :meth:`from_kubeconfig`; it also turns off urllib3's own retries (which would retry
    three times, logging a warning each time, before the caller's backoff sees the failure).

    Args:
        api_client: A configured ``kubernetes.client.ApiClient``, used as it is.
        request_timeout: Seconds allowed for one (non-watch) request.
    """

    @classmethod
    def from_kubeconfig(
        cls,
        path: Path | None = None,
        *,
        request_timeout: float = 30.0,
        pool_size: int | None = None,
    ) -> KubeClient:
        """Build a client from a kubeconfig file or, in a pod, the service account.

        Args:
            path: The kubeconfig. ``None``: the pod's service account when running in a pod
                (``KUBERNETES_SERVICE_HOST`` is set), else ``$KUBECONFIG`` or ``~/.kube/config``.
            request_timeout: Seconds allowed for one (non-watch) request.
            pool_size: Connections kept open for reuse (the generated client's default, five
                per CPU, when ``None``). A watch holds one for its whole life: a process with
                many watches (``drakit fleet``) needs one per watch, or the pool discards and
                reopens connections, warning each time.

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
        if pool_size is not None:
            cfg.connection_pool_maxsize = pool_size
        logger.debug("Kubernetes API %s (config from %s)", cfg.host, source)
        return cls(k8s_client.ApiClient(configuration=cfg), request_timeout=request_timeout)

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

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> dict[str, Any]:
        """Merge-patch only these labels of Node ``name`` (``None`` removes one).

        A JSON merge patch names just the keys it changes, so labels others own are never
        touched; the chart's admission policy lets the node driver change only its own Node's
        ``topology.drakit.io/`` labels this way.
        """
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        body = json.dumps({"metadata": {"labels": dict(labels)}}, separators=(",", ":"))
        return self._lean(
            "PATCH",
            path,
            what=f"patch the labels of Node {name}",
            body=body.encode(),
            content_type="application/merge-patch+json",
        )

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
                "fieldSelector": selector(**{"spec.nodeName": node_name, "spec.driver": driver})
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
            "fieldSelector": selector(**{"spec.nodeName": node_name, "spec.driver": driver}),
        }
        return self.watch(
            RESOURCE_SLICES,
            stop_event,
            timeout_seconds,
            query=query,
            resource_version=resource_version,
            on_connect=on_connect,
            what=f"watch ResourceSlices of node {node_name}",
        )

    def watch(
        self,
        path: str,
        stop_event: threading.Event,
        timeout_seconds: int = 300,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        resource_version: str | None = None,
        on_connect: Callable[[], None] | None = None,
        what: str = "",
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watch the collection at ``path``; yields ``(type, object)`` until the watch ends.

        As :meth:`watch_resource_slices` (which uses it), for any collection; ``query`` adds
        selectors (``labelSelector``, ``fieldSelector``).

        Raises:
            RetryableError: The connection failed or broke, the server answered 5xx, or the
                watch expired (410 Gone: list again and restart).
            PermanentError: The server refused the watch (e.g. 403: RBAC lacks ``watch``).
        """
        params: dict[str, str | int | bool] = {
            **(query or {}),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": int(timeout_seconds),
        }
        if resource_version:
            params["resourceVersion"] = resource_version
        what = what or f"watch {path}"
        status, raw = self._open(
            "GET",
            path,
            what=what,
            query=params,
            body=None,
            timeout=(CONNECT_TIMEOUT, timeout_seconds + 30.0),
        )
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            try:
                data = b"".join(raw.stream(amt=65536, decode_content=True))
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            raise error_for(status, data, what)
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
            for line in lines(raw, what, stop_event):
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
                    raise error_for(code, json.dumps(obj).encode(), what)
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
        what = f"apply status.devices of ResourceClaim {namespace}/{name}"
        try:
            return self._lean(
                "PATCH",
                path,
                what=what,
                body=json.dumps(patch, separators=(",", ":")).encode(),
                content_type="application/apply-patch+yaml",  # JSON is YAML
            )
        except (NotFoundError, ConflictError):
            raise
        except PermanentError as e:
            if _RAW_CONFIG_REFUSED not in str(e):
                raise
            raise PermanentError(
                f"{e}. kube-apiserver keeps a claim's opaque config parameters as the raw JSON "
                "it was given and compares them byte for byte; a patch re-encodes them compactly "
                "with sorted keys, so when the claim (or its template) was created in another "
                "form (spaced, as the Python kubernetes client sends it, or with unsorted keys), "
                "no status write succeeds. Create claims and templates as kubectl does (compact "
                "JSON, keys sorted)"
            ) from e

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
