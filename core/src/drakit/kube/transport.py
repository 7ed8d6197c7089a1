"""The generated Kubernetes client's transport, sending and returning raw JSON.

Every call goes through the generated client's request building (authentication, TLS, proxies
as the kubeconfig or the pod's service account says) but sends and returns raw JSON: nothing is
deserialised into the client's models. The hot path (the claim GET and the status apply) uses
:mod:`drakit.kube.lean` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s_client

from drakit.errors import RetryableError
from drakit.kube.wire import CONNECT_TIMEOUT, Stream, document, error_for, short

__all__ = ["ClientTransport"]


class ClientTransport:
    """Requests through a configured ``kubernetes.client.ApiClient``, as raw JSON.

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

    @property
    def host(self) -> str:
        """The API server URL."""
        return self._base_url

    def close(self) -> None:
        """Release pooled connections."""
        self._api.close()

    def _open(
        self,
        method: str,
        path: str,
        *,
        what: str,
        query: Mapping[str, str | int | bool] | None,
        body: Mapping[str, object] | None,
        timeout: float | tuple[float, float] | None,
    ) -> tuple[int, Stream]:
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
                _request_timeout=timeout or (CONNECT_TIMEOUT, self._timeout),
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise RetryableError(
                f"{what}: cannot reach the API server at {self.host}: {short(exc)}"
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
                f"{what}: connection to the API server broke: {short(exc)}"
            ) from exc
        finally:
            raw.release_conn()
        if not 200 <= status < 300:  # noqa: PLR2004 - HTTP status codes
            raise error_for(status, data, what)
        if not data:
            return {}
        return document(data, what)

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
