"""The admission seam: what a backend's pod mutator implements and what ``drakit webhook`` gives it.

``drakit webhook`` validates drakit opaque configs itself (through ``drakit_parse_config``);
what a pod needs added to it (a claim, a template) is a backend's knowledge. A backend that
mutates pods registers a factory under the :data:`MUTATOR_GROUP` entry point group::

    [project.entry-points."drakit.admission"]
    composite = "drakit_composite.admission:pair_pods"

The factory is called once at start-up with the webhook's :class:`WebhookOptions` and the
configured backends' driver names, and returns a :class:`PodMutator`. For each pod created,
the webhook asks the mutators in entry point name order; the first that answers (does not
return ``None``) decides. After it admitted a ResourceClaim, the webhook tells every mutator
(:meth:`PodMutator.claim_admitted`), so a mutator can clean up what it created for the pod.
A mutator reaches the API server and the strategies only through :class:`AdmissionServices`.

The request and response models are those of ``admission.k8s.io/v1`` (only the fields drakit
reads are modelled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from drakit.strategy_models import ShapedClaim, SimpleRequest

__all__ = [
    "MUTATOR_GROUP",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionServices",
    "GroupVersionKind",
    "MutatorFactory",
    "PodMutator",
    "WebhookOptions",
]

MUTATOR_GROUP = "drakit.admission"
"""Pod mutators: ``name = "pkg.module:factory"``, see :data:`MutatorFactory`."""


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
    """What the webhook does for a mutator: shaping, and the API calls it may make."""

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """Shape ``request`` with the installed strategy ``strategy``.

        Raises:
            DrakitError: the strategy is not installed or fails.
        """
        ...

    def create_claim_template(self, namespace: str, template: Mapping[str, Any]) -> None:
        """Create a ResourceClaimTemplate; one of that name existing already is no error.

        Raises:
            DrakitError: the API server refused it or cannot be reached.
        """
        ...

    def delete_claim_template_later(self, namespace: str, name: str, delay: float) -> None:
        """Delete a ResourceClaimTemplate ``delay`` seconds from now, in the background.

        A template already gone is no error; any other failure is logged.
        """
        ...

    def record_event(
        self, involved: Mapping[str, str], reason: str, message: str, type: str = "Warning"
    ) -> None:
        """Record an Event about ``involved`` (kind, apiVersion, namespace, name, uid).

        Raises:
            DrakitError: the API server refused it or cannot be reached.
        """
        ...


class PodMutator(Protocol):
    """A backend's pod mutation (loaded from :data:`MUTATOR_GROUP`)."""

    def mutate_pod(
        self, request: AdmissionRequest, services: AdmissionServices
    ) -> AdmissionResponse | None:
        """Answer the creation of a pod (``request.object``), or ``None`` when it is not yours."""
        ...

    def claim_admitted(
        self, namespace: str, claim: Mapping[str, Any], services: AdmissionServices
    ) -> None:
        """A ResourceClaim was admitted (created, not a dry run): note it, clean up for it."""
        ...


MutatorFactory = Callable[[WebhookOptions, Mapping[str, str]], PodMutator]
"""What a :data:`MUTATOR_GROUP` entry point names: ``factory(options, drivers)``, where
``drivers`` maps each configured backend to its driver name."""
