"""GPU-NIC pair pods: the composite's pod mutator, loaded by ``drakit webhook``.

Registered under the ``drakit.admission`` entry point group (:mod:`drakit.admission`), so core
never imports it. A pod annotated ::

    composite.drakit.io/gpu-nic-pairs: "4"
    composite.drakit.io/numa-policy: preferred     # none (default) | preferred | required

gets a ``spec.resourceClaims`` entry (``gpu-nic-pairs``) naming a ResourceClaimTemplate of its
namespace, and that claim in every container's ``resources.claims``; the template holds:

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

The webhook creates nothing (``sideEffects: None``). The template's name is derived from its
content alone (``gpu-nic-pairs-<pairs>-<policy>[-kueue]-<hash of the spec>``), so pods of one
namespace asking for the same thing share one, and the name says what it holds. It is made by
``drakit webhook``'s template controller (:meth:`PairPods.pod_needs`, recomputed from the
stored pod, only when the pod's immutable claim entry names exactly that template), in the
pod's namespace, owned by the pods using it: it goes with the last of them. The resourceclaim
controller retries a pod whose template is not there yet.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from drakit.admission import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionServices,
    PodEvent,
    PodMutator,
    PodNeeds,
    WebhookOptions,
)
from drakit.errors import ConfigInvalid, DrakitError
from drakit.strategy_models import ShapedClaim, SimpleRequest

__all__ = [
    "CLAIM_NAME",
    "KUEUE_QUEUE_LABEL",
    "PAIRS_ANNOTATION",
    "POLICY_ANNOTATION",
    "TEMPLATE_ANNOTATION",
    "AdmissionSettings",
    "PairPods",
    "PodPlan",
    "pair_pods",
    "plan_pod",
]


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


class Shaper(Protocol):
    """What planning a pod needs: the installed strategies (:class:`AdmissionServices` has it)."""

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """``drakit_shape_request``."""
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


def _template_name(pairs: int, policy: Policy, kueue: bool, spec: Mapping[str, Any]) -> str:
    """The template's name, from what it holds: same request, same name, in any namespace."""
    digest = hashlib.sha256(
        json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:10]
    return f"{CLAIM_NAME}-{pairs}-{policy}{'-kueue' if kueue else ''}-{digest}"


def _parse_annotations(annotations: Mapping[str, str]) -> tuple[int, Policy]:
    """Pairs and policy from the pod's annotations.

    Raises:
        ConfigInvalid: naming the annotation and the fix.
    """
    raw = str(annotations.get(PAIRS_ANNOTATION, "")).strip()
    # ASCII digits only ("²" and "٣" are digits to str.isdigit), and few of them: never int()
    # on 5,000 digits, never a 500 for what the API server lets a user write
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_PAIRS:  # noqa: PLR2004
        shown = raw if len(raw) <= 20 else raw[:17] + "..."  # noqa: PLR2004
        raise ConfigInvalid(
            [
                (
                    f"metadata.annotations[{PAIRS_ANNOTATION}]",
                    f"{shown!r} is not a number of GPU-NIC pairs from 1 to {MAX_PAIRS} "
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


def plan_template(
    host: Shaper, settings: AdmissionSettings, meta: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The pair template a pod with metadata ``meta`` (annotations, labels) gets; warnings.

    Raises:
        ConfigInvalid: a bad annotation (names it and the fix).
    """
    annotations: Mapping[str, str] = meta.get("annotations") or {}
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
    stamp = {PAIRS_ANNOTATION: str(pairs), POLICY_ANNOTATION: policy}
    spec = {"metadata": {"annotations": dict(stamp)}, "spec": {"devices": devices}}
    name = _template_name(pairs, policy, kueue, spec)
    template = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "drakit"},
            "annotations": {**stamp, TEMPLATE_ANNOTATION: name},
        },
        "spec": spec,
    }
    return template, warnings


def plan_pod(host: Shaper, settings: AdmissionSettings, pod: Mapping[str, Any]) -> PodPlan | None:
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
    template, warnings = plan_template(host, settings, meta)
    name = template["metadata"]["name"]
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


class PairPods:
    """The pod mutator: pair claims for annotated pods; their templates, recomputed on demand.

    Args:
        settings: how pair claims are shaped.
    """

    def __init__(self, settings: AdmissionSettings) -> None:
        self.settings = settings

    def mutate_pod(
        self, request: AdmissionRequest, services: AdmissionServices
    ) -> AdmissionResponse | None:
        """Add the pair claim to an annotated pod (see the module docstring); create nothing."""
        try:
            plan = plan_pod(services, self.settings, request.object or {})
        except ConfigInvalid as e:
            return AdmissionResponse.refuse(f"drakit: {'; '.join(e.lines())}")
        except DrakitError as e:  # a strategy missing or failing: refuse with its message
            return AdmissionResponse.refuse(f"drakit: cannot shape the pair claim: {e}")
        if plan is None:
            return None
        return AdmissionResponse(patch=plan.patch, warnings=plan.warnings)

    def pod_needs(self, pod: Mapping[str, Any], services: AdmissionServices) -> PodNeeds | None:
        """The pair template ``pod``'s claim entry names, recomputed; the NUMA event if required.

        ``None`` unless the pod's (immutable) ``spec.resourceClaims`` entry ``gpu-nic-pairs``
        names exactly the template its annotations and labels make now: annotations edited
        after admission, or a pod labelled by hand, get nothing.

        Raises:
            ConfigInvalid: the pod's annotations are not valid (any more).
        """
        meta = pod.get("metadata") or {}
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        if PAIRS_ANNOTATION not in annotations:
            return None
        entries = [
            c
            for c in (pod.get("spec") or {}).get("resourceClaims") or []
            if isinstance(c, dict) and c.get("name") == CLAIM_NAME
        ]
        if len(entries) != 1:
            return None
        template, _ = plan_template(services, self.settings, meta)
        if entries[0].get("resourceClaimTemplateName") != template["metadata"]["name"]:
            return None
        pairs, policy = _parse_annotations(annotations)
        events: tuple[PodEvent, ...] = ()
        if policy == "required" and pairs > 1:
            events = (
                PodEvent(
                    reason="NUMAAlignmentRequired",
                    message=(
                        f"{POLICY_ANNOTATION}=required: all {pairs} GPU-NIC pairs must come from "
                        f"one NUMA node ({self.settings.numa_attribute}); the pod stays Pending "
                        f"until a node has {pairs} free pairs on a single NUMA node. Use "
                        f"{POLICY_ANNOTATION}=preferred to fall back to pairs split over NUMA "
                        "nodes."
                    ),
                ),
            )
        return PodNeeds(templates=(template,), events=events)


def pair_pods(options: WebhookOptions, drivers: Mapping[str, str]) -> PodMutator:
    """The ``drakit.admission`` entry point: pairs of ``--pair-class`` under the composite's driver.

    Args:
        options: the webhook's flags (``--kueue``; ``pair_class`` from ``--pair-class``).
        drivers: configured backend -> driver name (the composite's, if it is configured).
    """
    default = AdmissionSettings()
    return PairPods(
        AdmissionSettings(
            kueue=options.kueue,
            pair_class=options.flags.get("pair_class", default.pair_class),
            pairs_driver=drivers.get("composite", default.pairs_driver),
        )
    )
