"""The Kubernetes API adapter: the only drakit package that imports ``kubernetes``.

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

:class:`KubeClient` (:mod:`drakit.kube.client`, the API calls) sends through two transports:
:mod:`drakit.kube.transport` (the generated client's request building) and, for the claim GET
and the status apply of every prepare, :mod:`drakit.kube.lean`; :mod:`drakit.kube.wire` decodes
replies and maps errors for both.
"""

from __future__ import annotations

from drakit.errors import ConflictError, NotFoundError
from drakit.kube.client import RESOURCE_SLICES, KubeClient

__all__ = [
    "RESOURCE_SLICES",
    "ConflictError",
    "KubeClient",
    "NotFoundError",
]
