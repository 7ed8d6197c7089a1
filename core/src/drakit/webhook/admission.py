"""What ``drakit webhook`` admits: drakit opaque configs, and pods through the backends' mutators.

Validating. ResourceClaims, ResourceClaimTemplates and DeviceClasses whose opaque configs
name a configured drakit driver are checked through ``drakit_parse_config``, the code the node
runs at prepare, and refused with each error's field path and fix.

Mutating (pods). What a pod gets is a backend's knowledge: the mutators registered under the
``drakit.admission`` entry point group (:mod:`drakit.admission`, loaded by
:func:`drakit.host.mutators.load_mutators`; the composite's GPU-NIC pair pods are one) are
asked in turn, and the first that answers decides. This engine is their
:class:`~drakit.admission.AdmissionServices`: shaping through the plugin host, nothing else.

No side effects: the engine holds no API client. Whatever a review says, answering it
creates, changes, deletes and records nothing (``sideEffects: None``); a pod it patches is
labelled :data:`~drakit.admission.PODS_LABEL`, and what the pod needs is made later, from the
stored pod, by :class:`drakit.webhook.templates.TemplateController`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from drakit.admission import PODS_LABEL, AdmissionRequest, AdmissionResponse, PodMutator
from drakit.errors import ConfigInvalid
from drakit.strategy_models import ShapedClaim, SimpleRequest
from drakit.webhook.review import TOO_DEEP

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
        mutators: the backends' pod mutators, asked in this order.
    """

    def __init__(self, host: Shaper, mutators: Sequence[PodMutator] = ()) -> None:
        self.host = host
        self.mutators = tuple(mutators)
        self._drivers = set(host.driver_names().values())

    # -- pods ----------------------------------------------------------------------------------

    def mutate_pod(self, request: AdmissionRequest) -> AdmissionResponse:
        """The first mutator's answer for a pod created; else the pod as it is.

        A patched pod is also labelled :data:`~drakit.admission.PODS_LABEL` (for the template
        controller).
        """
        if request.kind.kind != "Pod" or request.operation != "CREATE" or not request.object:
            return AdmissionResponse()
        for mutator in self.mutators:
            answer = mutator.mutate_pod(request, self)
            if answer is None:
                continue
            if not answer.allowed or not answer.patch:
                return answer
            labels = (request.object.get("metadata") or {}).get("labels")
            label = "/metadata/labels/" + PODS_LABEL.replace("~", "~0").replace("/", "~1")
            extra: list[dict[str, Any]] = []
            if not isinstance(labels, dict) or not labels:
                extra.append({"op": "add", "path": "/metadata/labels", "value": {}})
            extra.append({"op": "add", "path": label, "value": "true"})
            return answer.model_copy(update={"patch": (*answer.patch, *extra)})
        return AdmissionResponse()

    # -- claims, templates, classes ------------------------------------------------------------

    def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Check drakit opaque configs (nothing else: no API call, no note kept)."""
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
        return AdmissionResponse()

    # -- the mutators' services (drakit.admission.AdmissionServices) ---------------------------

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """Shape ``request`` with the plugin host's strategy ``strategy``."""
        return self.host.shape(strategy, request)
