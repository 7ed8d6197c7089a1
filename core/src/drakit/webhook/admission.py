"""What ``drakit webhook`` admits: drakit opaque configs, and pods through the backends' mutators.

Validating. ResourceClaims, ResourceClaimTemplates and DeviceClasses whose opaque configs
name a configured drakit driver are checked through ``drakit_parse_config``, the code the node
runs at prepare, and refused with each error's field path and fix. A ResourceClaim admitted
(created, not a dry run) is then handed to every mutator (:meth:`PodMutator.claim_admitted`).

Mutating (pods). What a pod gets is a backend's knowledge: the mutators registered under the
``drakit.admission`` entry point group (:mod:`drakit.admission`, loaded by
:func:`drakit.host.mutators.load_mutators`; the composite's GPU-NIC pair pods are one) are
asked in turn, and the first that answers decides. This engine is their
:class:`~drakit.admission.AdmissionServices`: shaping through the plugin host, templates and
events through the API server.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from pydantic import BaseModel

from drakit.admission import AdmissionRequest, AdmissionResponse, PodMutator
from drakit.errors import ConfigInvalid, ConflictError, DrakitError, NotFoundError
from drakit.strategy_models import ShapedClaim, SimpleRequest
from drakit.webhook.review import TOO_DEEP

if TYPE_CHECKING:  # the Kubernetes client is imported by the caller (a node never loads it)
    from drakit.kube import KubeClient

__all__ = ["Admission"]

log = logging.getLogger(__name__)


class Shaper(Protocol):
    """The plugin host's shaping and config parsing, as the engine uses them."""

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """``drakit_shape_request``."""
        ...

    def parse_config(self, driver: str, parameters: Mapping[str, Any]) -> BaseModel:
        """``drakit_parse_config``, routed to ``driver``'s plugins."""
        ...

    def driver_names(self) -> dict[str, str]:
        """Plugin name -> driver name."""
        ...


CREATED_LABEL = "webhook.drakit.io/created-by"
CREATED_BY = "drakit-webhook"
"""Every ResourceClaimTemplate the webhook creates carries ``CREATED_LABEL: CREATED_BY``; it
deletes no template without it, whatever a claim's annotation names."""

MAX_CONFIG_DEPTH = 32
"""How deeply a drakit opaque configuration may nest (the node refuses deeper ones too)."""


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and lists deeper than ``limit`` (iteratively)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if item is TOO_DEEP:
            return True
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def _configs(kind: str, obj: Mapping[str, Any]) -> tuple[str, Sequence[Any]]:
    spec = obj.get("spec") or {}
    if kind == "ResourceClaim":
        return "spec.devices.config", (spec.get("devices") or {}).get("config") or []
    if kind == "ResourceClaimTemplate":
        inner = spec.get("spec") or {}
        return "spec.spec.devices.config", (inner.get("devices") or {}).get("config") or []
    if kind == "DeviceClass":
        return "spec.config", spec.get("config") or []
    return "", []


class Admission:
    """The engine behind ``drakit webhook`` (:class:`drakit.webhook.AdmissionEngine`).

    Args:
        host: the plugin host (shaping strategies; the backends' config parsers).
        kube: the API server (templates, events).
        mutators: the backends' pod mutators, asked in this order.
    """

    def __init__(self, host: Shaper, kube: KubeClient, mutators: Sequence[PodMutator] = ()) -> None:
        self.host = host
        self.kube = kube
        self.mutators = tuple(mutators)
        self._drivers = set(host.driver_names().values())

    # -- pods ----------------------------------------------------------------------------------

    def mutate_pod(self, request: AdmissionRequest) -> AdmissionResponse:
        """The first mutator's answer for a pod created; else the pod as it is."""
        if request.kind.kind != "Pod" or request.operation != "CREATE" or not request.object:
            return AdmissionResponse()
        for mutator in self.mutators:
            answer = mutator.mutate_pod(request, self)
            if answer is not None:
                return answer
        return AdmissionResponse()

    # -- claims, templates, classes ------------------------------------------------------------

    def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Check drakit opaque configs; tell the mutators of each claim admitted."""
        obj = request.object
        if request.operation not in {"CREATE", "UPDATE"} or not obj:
            return AdmissionResponse()
        kind = request.kind.kind
        prefix, configs = _configs(kind, obj)
        errors: list[str] = []
        for i, entry in enumerate(configs):
            opaque = entry.get("opaque") if isinstance(entry, dict) else None
            if not isinstance(opaque, dict) or opaque.get("driver") not in self._drivers:
                continue
            where = f"{prefix}[{i}].opaque.parameters"
            params = opaque.get("parameters")
            if not isinstance(params, dict):
                errors.append(f"{where}: must be an object with apiVersion and kind")
                continue
            if _deeper_than(params, MAX_CONFIG_DEPTH):
                errors.append(
                    f"{where}: nested deeper than {MAX_CONFIG_DEPTH} levels; no drakit "
                    "configuration is that deep"
                )
                continue
            try:
                self.host.parse_config(str(opaque["driver"]), params)
            except ConfigInvalid as e:
                errors.extend(f"{where}.{p}: {m}" if p else f"{where}: {m}" for p, m in e.errors)
        if errors:
            name = request.name or (obj.get("metadata") or {}).get("generateName", "")
            return AdmissionResponse.refuse(
                f"drakit refused {kind} {request.namespace}/{name}: " + "; ".join(errors)
            )
        if kind == "ResourceClaim" and request.operation == "CREATE" and not request.dry_run:
            for mutator in self.mutators:
                mutator.claim_admitted(request.namespace, obj, self)
        return AdmissionResponse()

    # -- the mutators' services (drakit.admission.AdmissionServices) ---------------------------

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """Shape ``request`` with the plugin host's strategy ``strategy``."""
        return self.host.shape(strategy, request)

    def create_claim_template(self, namespace: str, template: Mapping[str, Any]) -> None:
        """Create a ResourceClaimTemplate; an existing one of that name is no error.

        The template is labelled :data:`CREATED_LABEL` (the only templates
        :meth:`delete_claim_template_later` deletes).
        """
        meta = dict(template.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), CREATED_LABEL: CREATED_BY}
        body = {**template, "metadata": meta}
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
        with contextlib.suppress(ConflictError):  # created by an earlier call for this pod
            self.kube.request("POST", f"{path}/resourceclaimtemplates", body=body)

    def delete_claim_template_later(self, namespace: str, name: str, delay: float) -> None:
        """Delete a ResourceClaimTemplate ``delay`` seconds from now (a daemon timer)."""
        timer = threading.Timer(delay, self._delete_template, (namespace, name))
        timer.daemon = True
        timer.start()

    def record_event(
        self, involved: Mapping[str, str], reason: str, message: str, type: str = "Warning"
    ) -> None:
        """Record an Event from ``drakit-webhook``."""
        self.kube.create_event(involved, reason, message, type, component="drakit-webhook")

    def _delete_template(self, namespace: str, name: str) -> None:
        """Delete the template only if the webhook made it (its label), by UID."""
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaimtemplates/{quote(name, safe='')}"
        )
        try:
            found = self.kube.request("GET", path)
            meta = found.get("metadata") or {}
            if (meta.get("labels") or {}).get(CREATED_LABEL) != CREATED_BY:
                log.warning(
                    "not deleting ResourceClaimTemplate %s/%s: a claim's annotation names it, "
                    "but drakit's webhook did not create it (no %s=%s label)",
                    namespace,
                    name,
                    CREATED_LABEL,
                    CREATED_BY,
                )
                return
            precondition = {"preconditions": {"uid": str(meta.get("uid", ""))}}
            self.kube.request("DELETE", path, body=precondition)  # that object, not a namesake
        except NotFoundError:
            pass
        except DrakitError as e:
            log.warning("could not delete ResourceClaimTemplate %s/%s: %s", namespace, name, e)
