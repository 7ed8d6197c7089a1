"""What ``drakit webhook`` admits: GPU-NIC pair pods and drakit opaque configs.

Mutating (pods). A pod annotated ::

    composite.drakit.io/gpu-nic-pairs: "4"
    composite.drakit.io/numa-policy: preferred     # none (default) | preferred | required

gets a ResourceClaimTemplate in its namespace, a ``spec.resourceClaims`` entry
(``gpu-nic-pairs``) naming it, and that claim in every container's ``resources.claims``:

* ``none``: one request for N pairs of class ``gpu-nic-pair``, no constraint;
* ``preferred``: shaped by the ``numa-preferred`` strategy (``drakit_shape_request``): a
  ``firstAvailable`` ladder of all N on one NUMA node, then all N on one socket, then
  anywhere, so the pod never waits only because no NUMA node has N free pairs, and the
  scheduler's prioritized-list score prefers nodes where the first choice fits;
* ``required``: shaped by ``packed`` with ``required``: one hard ``matchAttribute`` on
  ``resource.kubernetes.io/numaNode``; the pod stays Pending until a node has N free pairs
  on one NUMA node, and gets an Event saying so.

Kueue mode (``--kueue``, or a pod labelled ``kueue.x-k8s.io/queue-name``) emits ``exactly``
requests only, since Kueue rejects ``firstAvailable``: ``preferred`` then degrades to ``none``
with an admission warning. A pod that already carries its claim (re-admission, reinvocation)
is left as it is. A bad annotation refuses the pod with the annotation named.

Templates are single-use: when the claim made from one is admitted (the ResourceClaim
controller creates it, owned by the pod, so it goes with the pod), the template is deleted.

Validating. ResourceClaims, ResourceClaimTemplates and DeviceClasses whose opaque configs
name a configured drakit driver are checked through ``drakit_parse_config``, the code the node
runs at prepare, and refused with each error's field path and fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from drakit.errors import ConfigInvalid, ConflictError, DrakitError, NotFoundError
from drakit.strategy_models import ShapedClaim, SimpleRequest
from drakit.webhook import AdmissionRequest, AdmissionResponse

__all__ = [
    "CLAIM_NAME",
    "KUEUE_QUEUE_LABEL",
    "PAIRS_ANNOTATION",
    "POLICY_ANNOTATION",
    "TEMPLATE_ANNOTATION",
    "Admission",
    "AdmissionSettings",
    "PodPlan",
    "plan_pod",
]

log = logging.getLogger(__name__)

PAIRS_ANNOTATION = "composite.drakit.io/gpu-nic-pairs"
POLICY_ANNOTATION = "composite.drakit.io/numa-policy"
TEMPLATE_ANNOTATION = "composite.drakit.io/claim-template"
"""Set on the pod (and the claims made for it) to the ResourceClaimTemplate's name."""
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLAIM_NAME = "gpu-nic-pairs"
"""The pod's ``spec.resourceClaims`` entry the webhook adds."""

RESOURCE_API = "resource.k8s.io/v1"
Policy = Literal["none", "preferred", "required"]
POLICIES: tuple[Policy, ...] = ("none", "preferred", "required")
MAX_PAIRS = 128

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


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


class Kube(Protocol):
    """The API calls the engine makes (:class:`drakit.kube.KubeClient` has them)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """Any API request."""
        ...

    def create_event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Warning",
        *,
        component: str = "drakit",
    ) -> dict[str, Any]:
        """Record an Event."""
        ...


class AdmissionSettings(BaseModel):
    """How ``drakit webhook`` shapes pair claims (command-line flags)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair_class: str = Field(default="gpu-nic-pair", description="DeviceClass of the pairs")
    pairs_driver: str = Field(default="pairs.composite.drakit.io", description="Their driver")
    numa_attribute: str = "resource.kubernetes.io/numaNode"
    preferred_strategy: str = "numa-preferred"
    required_strategy: str = "packed"
    kueue: bool = Field(default=False, description="Emit exactly requests only (all pods)")
    template_gc_delay: float = Field(
        default=5.0, ge=0, description="Seconds after its claim is admitted to delete a template"
    )

    @property
    def socket_attribute(self) -> str:
        """The pairs' socket attribute (the ``preferred`` ladder's middle rung)."""
        return f"{self.pairs_driver}/socket"


class PodPlan(BaseModel):
    """What admitting one pod takes: the template to create and the pod's JSON patch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    template: dict[str, Any]
    patch: tuple[dict[str, Any], ...]
    warnings: tuple[str, ...] = ()


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _template_name(pod: Mapping[str, Any], uid: str) -> str:
    meta = pod.get("metadata") or {}
    base = str(meta.get("name") or meta.get("generateName") or "pod").lower()
    base = _NOT_DNS.sub("-", base).strip("-")[:40].strip("-") or "pod"
    digest = hashlib.sha256(uid.encode()).hexdigest()[:10]
    return f"{base}-{CLAIM_NAME}-{digest}"


def _parse_annotations(annotations: Mapping[str, str]) -> tuple[int, Policy]:
    """Pairs and policy from the pod's annotations.

    Raises:
        ConfigInvalid: naming the annotation and the fix.
    """
    raw = str(annotations.get(PAIRS_ANNOTATION, "")).strip()
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAIRS:
        raise ConfigInvalid(
            [
                (
                    f"metadata.annotations[{PAIRS_ANNOTATION}]",
                    f"{raw!r} is not a number of GPU-NIC pairs from 1 to {MAX_PAIRS} "
                    '(example: "4")',
                )
            ]
        )
    policy = str(annotations.get(POLICY_ANNOTATION, "none")).strip()
    if policy not in POLICIES:
        raise ConfigInvalid(
            [
                (
                    f"metadata.annotations[{POLICY_ANNOTATION}]",
                    f"{policy!r} is not a NUMA policy; use one of {', '.join(POLICIES)}",
                )
            ]
        )
    return int(raw), policy


def _shape(
    host: Shaper, settings: AdmissionSettings, pairs: int, policy: Policy, kueue: bool
) -> tuple[ShapedClaim, tuple[str, ...]]:
    request = SimpleRequest(
        name="pairs",
        device_class=settings.pair_class,
        count=pairs,
        align_attribute=settings.numa_attribute,
    )
    plain = ShapedClaim(
        requests=(
            {"name": "pairs", "exactly": {"deviceClassName": settings.pair_class, "count": pairs}},
        )
    )
    if policy == "none" or pairs == 1:
        return plain, ()
    if policy == "preferred":
        if kueue:
            return plain, (
                f"{POLICY_ANNOTATION}=preferred needs firstAvailable, which Kueue rejects: the "
                f"{pairs} pairs are placed anywhere on the node (use required for a hard "
                "NUMA constraint)",
            )
        fallback = request.model_copy(update={"fallback_attributes": (settings.socket_attribute,)})
        return host.shape(settings.preferred_strategy, fallback), ()
    return host.shape(settings.required_strategy, request.model_copy(update={"required": True})), ()


def plan_pod(
    host: Shaper, settings: AdmissionSettings, pod: Mapping[str, Any], uid: str
) -> PodPlan | None:
    """What admitting ``pod`` takes, or ``None`` when it is not a pair pod or already done.

    Raises:
        ConfigInvalid: a bad annotation, or a claim name already taken (names the field).
    """
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    if PAIRS_ANNOTATION not in annotations:
        return None
    spec = pod.get("spec") or {}
    claims = spec.get("resourceClaims") or []
    if any(c.get("name") == CLAIM_NAME for c in claims):
        if TEMPLATE_ANNOTATION in annotations:
            return None  # re-admission: the pod carries its claim already
        raise ConfigInvalid(
            [
                (
                    "spec.resourceClaims",
                    f"a claim named {CLAIM_NAME!r} exists; {PAIRS_ANNOTATION} adds one of that "
                    "name: rename yours or drop the annotation",
                )
            ]
        )
    pairs, policy = _parse_annotations(annotations)
    labels: Mapping[str, str] = meta.get("labels") or {}
    kueue = settings.kueue or KUEUE_QUEUE_LABEL in labels
    shaped, warnings = _shape(host, settings, pairs, policy, kueue)
    devices = shaped.to_api()
    if kueue and any("exactly" not in r for r in devices["requests"]):
        raise ConfigInvalid(
            [
                (
                    f"metadata.annotations[{POLICY_ANNOTATION}]",
                    f"strategy for {policy!r} shaped firstAvailable, which Kueue rejects; "
                    "use another policy or a strategy that emits exactly requests",
                )
            ]
        )
    name = _template_name(pod, uid)
    stamp = {PAIRS_ANNOTATION: str(pairs), POLICY_ANNOTATION: policy, TEMPLATE_ANNOTATION: name}
    template = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "drakit"},
            "annotations": dict(stamp),
        },
        "spec": {"metadata": {"annotations": dict(stamp)}, "spec": {"devices": devices}},
    }
    patch: list[dict[str, Any]] = []
    if not meta.get("annotations"):
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    patch.append(
        {
            "op": "add",
            "path": f"/metadata/annotations/{_pointer(TEMPLATE_ANNOTATION)}",
            "value": name,
        }
    )
    entry = {"name": CLAIM_NAME, "resourceClaimTemplateName": name}
    if claims:
        patch.append({"op": "add", "path": "/spec/resourceClaims/-", "value": entry})
    else:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": [entry]})
    for i, container in enumerate(spec.get("containers") or []):
        resources = container.get("resources")
        base = f"/spec/containers/{i}/resources"
        if not resources:
            patch.append({"op": "add", "path": base, "value": {"claims": [{"name": CLAIM_NAME}]}})
        elif not resources.get("claims"):
            patch.append({"op": "add", "path": f"{base}/claims", "value": [{"name": CLAIM_NAME}]})
        else:
            patch.append({"op": "add", "path": f"{base}/claims/-", "value": {"name": CLAIM_NAME}})
    return PodPlan(template=template, patch=tuple(patch), warnings=warnings)


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
        settings: how pair claims are shaped.
    """

    def __init__(self, host: Shaper, kube: Kube, settings: AdmissionSettings) -> None:
        self.host = host
        self.kube = kube
        self.settings = settings
        self._drivers = set(host.driver_names().values())

    # -- pods ----------------------------------------------------------------------------------

    def mutate_pod(self, request: AdmissionRequest) -> AdmissionResponse:
        """Add the pair claim to an annotated pod (see the module docstring)."""
        if request.kind.kind != "Pod" or request.operation != "CREATE" or not request.object:
            return AdmissionResponse()
        try:
            plan = plan_pod(self.host, self.settings, request.object, request.uid)
        except ConfigInvalid as e:
            return AdmissionResponse.refuse(f"drakit: {'; '.join(e.lines())}")
        except DrakitError as e:  # a strategy missing or failing: refuse with its message
            return AdmissionResponse.refuse(f"drakit: cannot shape the pair claim: {e}")
        if plan is None:
            return AdmissionResponse()
        if not request.dry_run:
            try:
                self._create_template(request.namespace, plan.template)
            except DrakitError as e:
                return AdmissionResponse.refuse(
                    f"drakit: cannot create the pod's ResourceClaimTemplate: {e}", code=500
                )
        return AdmissionResponse(patch=plan.patch, warnings=plan.warnings)

    def _create_template(self, namespace: str, template: Mapping[str, Any]) -> None:
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
        with contextlib.suppress(ConflictError):  # created by an earlier call for this pod
            self.kube.request("POST", f"{path}/resourceclaimtemplates", body=template)

    # -- claims, templates, classes ------------------------------------------------------------

    def validate(self, request: AdmissionRequest) -> AdmissionResponse:
        """Check drakit opaque configs; note claims made from pair templates."""
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
            self._claim_from_template(request.namespace, obj)
        return AdmissionResponse()

    def _claim_from_template(self, namespace: str, claim: Mapping[str, Any]) -> None:
        meta = claim.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        template = annotations.get(TEMPLATE_ANNOTATION)
        if not template:
            return
        pods = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
        if pods and annotations.get(POLICY_ANNOTATION) == "required":
            pod = pods[0]
            n = annotations.get(PAIRS_ANNOTATION, "?")
            try:
                self.kube.create_event(
                    {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "namespace": namespace,
                        "name": str(pod.get("name", "")),
                        "uid": str(pod.get("uid", "")),
                    },
                    "NUMAAlignmentRequired",
                    f"{POLICY_ANNOTATION}=required: all {n} GPU-NIC pairs must come from one "
                    f"NUMA node ({self.settings.numa_attribute}); the pod stays Pending until "
                    f"a node has {n} free pairs on a single NUMA node. Use "
                    f"{POLICY_ANNOTATION}=preferred to fall back to pairs split over NUMA nodes.",
                    "Warning",
                    component="drakit-webhook",
                )
            except DrakitError:
                log.warning("could not record the NUMA event for pod %s", pod, exc_info=True)
        timer = threading.Timer(
            self.settings.template_gc_delay, self._delete_template, (namespace, template)
        )
        timer.daemon = True
        timer.start()

    def _delete_template(self, namespace: str, name: str) -> None:
        path = (
            f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
            f"/resourceclaimtemplates/{quote(name, safe='')}"
        )
        try:
            self.kube.request("DELETE", path)
        except NotFoundError:
            pass
        except DrakitError as e:
            log.warning("could not delete ResourceClaimTemplate %s/%s: %s", namespace, name, e)
