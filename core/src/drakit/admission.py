"""The admission seam: what a backend's pod mutator implements and what ``drakit webhook`` gives it.

``drakit webhook`` validates drakit opaque configs itself (through ``drakit_parse_config``);
what a pod needs added to it (a claim, a template) is a backend's knowledge. A backend that
mutates pods registers a factory under the :data:`MUTATOR_GROUP` entry point group::

    [project.entry-points."drakit.admission"]
    composite = "drakit_composite.admission:pair_pods"

The factory is called once at start-up with the webhook's :class:`WebhookOptions` and the
configured backends' driver names, and returns a :class:`PodMutator`. For each pod created,
the webhook asks the mutators in entry point name order; the first that answers (does not
return ``None``) decides.

The webhook has no side effects (``sideEffects: None``): answering a review creates, deletes
and records nothing, whoever sends it. What a pod needs in its namespace (a
ResourceClaimTemplate that its patched ``spec.resourceClaims`` names) is made afterwards by the
template controller of ``drakit webhook``, from the pod as the API server stored it: the
controller asks each mutator :meth:`PodMutator.pod_needs` for a pod the webhook labelled
(:data:`PODS_LABEL`), creates the templates in the pod's own namespace, labelled
:data:`CREATED_LABEL` and owned by the pods that use them (the Kubernetes garbage collector
deletes a template with its last pod), and records the events with the mutator's text. A
mutator reaches the strategies only through :class:`AdmissionServices`.

The request and response models are those of ``admission.k8s.io/v1`` (only the fields drakit
reads are modelled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from drakit.strategy_models import ShapedClaim, SimpleRequest

__all__ = [
    "CREATED_BY",
    "CREATED_LABEL",
    "MUTATOR_GROUP",
    "PODS_LABEL",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionServices",
    "GroupVersionKind",
    "MutatorFactory",
    "PodEvent",
    "PodMutator",
    "PodNeeds",
    "WebhookOptions",
]

MUTATOR_GROUP = "drakit.admission"
"""Pod mutators: ``name = "pkg.module:factory"``, see :data:`MutatorFactory`."""

PODS_LABEL = "webhook.drakit.io/mutated"
"""Put on every pod the webhook patched (value ``"true"``): the template controller watches
these pods only. A pod labelled by hand gets nothing its own annotations and immutable spec do
not already ask for (:meth:`PodMutator.pod_needs` recomputes from them)."""

CREATED_LABEL = "webhook.drakit.io/created-by"
CREATED_BY = "drakit-webhook"
"""Every ResourceClaimTemplate the template controller creates carries
``CREATED_LABEL: CREATED_BY``; it changes no template without it (it adds an owner to its own
templates only) and deletes none."""


class GroupVersionKind(BaseModel):
    """``request.kind``: what the object is."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(BaseModel):
    """``AdmissionReview.request``."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    uid: str
    kind: GroupVersionKind
    operation: str = "CREATE"
    namespace: str = ""
    name: str = ""
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionResponse(BaseModel):
    """What the engine answers: allowed or refused (with a message), an optional JSON patch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed: bool = True
    message: str = ""
    code: int = 403
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def refuse(cls, message: str, code: int = 400) -> AdmissionResponse:
        """Refused: the API server returns ``message`` to the client (``kubectl apply``)."""
        return cls(allowed=False, message=message, code=code)


class WebhookOptions(BaseModel):
    """The ``drakit webhook`` flags a mutator may read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kueue: bool = Field(default=False, description="--kueue: emit exactly requests only")
    flags: dict[str, str] = Field(
        default_factory=dict,
        description="Backend-specific flags by name (``pair_class``: --pair-class)",
    )


class AdmissionServices(Protocol):
    """What the webhook does for a mutator: shaping. It makes no API call for a mutator."""

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """Shape ``request`` with the installed strategy ``strategy``.

        Raises:
            DrakitError: the strategy is not installed or fails.
        """
        ...


class PodEvent(BaseModel):
    """An Event the template controller records about a pod (``involvedObject`` is the pod)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(pattern=r"^[A-Z][A-Za-z0-9]{0,127}$", description="CamelCase reason")
    message: str = Field(max_length=1024, description="The mutator's own text, for humans")
    type: Literal["Normal", "Warning"] = "Warning"


class PodNeeds(BaseModel):
    """What a created pod needs in its namespace, recomputed by the mutator from the pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    templates: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="ResourceClaimTemplates (apiVersion, kind, metadata.name, spec) the pod's "
        "spec.resourceClaims name; created in the pod's namespace, owned by the pod",
    )
    events: tuple[PodEvent, ...] = Field(default=(), description="Recorded once per pod")


class PodMutator(Protocol):
    """A backend's pod mutation (loaded from :data:`MUTATOR_GROUP`)."""

    def mutate_pod(
        self, request: AdmissionRequest, services: AdmissionServices
    ) -> AdmissionResponse | None:
        """Answer the creation of a pod (``request.object``), or ``None`` when it is not yours.

        Computes only: no object may be created for the answer (the webhook is
        ``sideEffects: None``); a template the patch names comes from :meth:`pod_needs`.
        """
        ...

    def pod_needs(self, pod: Mapping[str, Any], services: AdmissionServices) -> PodNeeds | None:
        """What ``pod`` (as stored, after admission) needs, or ``None`` when it is not yours.

        Called by the template controller for each pod labelled :data:`PODS_LABEL`, from
        nothing but the pod; a template returned must be the one the pod's (immutable)
        ``spec.resourceClaims`` names, recomputed, never a name or content taken from a
        mutable field as it is.

        Raises:
            ConfigInvalid / DrakitError: the pod's annotations no longer make sense (logged,
                nothing is created).
        """
        ...


MutatorFactory = Callable[[WebhookOptions, Mapping[str, str]], PodMutator]
"""What a :data:`MUTATOR_GROUP` entry point names: ``factory(options, drivers)``, where
``drivers`` maps each configured backend to its driver name."""
