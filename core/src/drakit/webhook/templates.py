"""The template controller of ``drakit webhook``: what admitted pods need, made in their namespace.

The webhook answers reviews without side effects (:mod:`drakit.webhook.admission`). A pod it
patched (labelled :data:`~drakit.admission.PODS_LABEL`) may name a ResourceClaimTemplate
that does not exist yet; this controller watches those pods through the API server and, for
each, asks the mutators :meth:`~drakit.admission.PodMutator.pod_needs` (recomputed from the
stored pod alone) and then:

* creates each template in the **pod's namespace**, labelled
  :data:`~drakit.admission.CREATED_LABEL` and owned by the pod (``ownerReferences``); a template
  of that name that drakit made already gets the pod added as one more owner; one drakit did not
  make (no label) is left as it is, and the pod gets an Event saying so;
* records the mutator's events about the pod, once per pod.

It deletes nothing: the Kubernetes garbage collector deletes a template when the last pod owning
it is gone. It trusts no webhook caller and no field a user may edit after admission: the
template's name and content come from the mutator's computation, and the mutator returns a
template only when the pod's immutable claim entry names exactly it. So a user who may create
pods in one namespace can have drakit create, in that namespace only, the templates its pods'
own claim entries name.

The resourceclaim controller retries a pod whose template is missing (with backoff), so a pod
created before its template is made gets its claim a moment later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from drakit.admission import (
    CREATED_BY,
    CREATED_LABEL,
    PODS_LABEL,
    AdmissionServices,
    PodEvent,
    PodMutator,
)
from drakit.errors import ConflictError, DrakitError, NotFoundError, PermanentError

__all__ = ["COMPONENT", "TemplateController"]

log = logging.getLogger(__name__)

COMPONENT = "drakit-webhook"
"""The Events' reporting component."""

_RESOURCE = "/apis/resource.k8s.io/v1"
_PODS = "/api/v1/pods"
_SEEN = 4096
"""Pods remembered as handled (templates made, events recorded): bounded, oldest forgotten
first (a forgotten pod's next event costs a GET and finds its template owned already)."""
_TRIES = 5


class Api(Protocol):
    """What the controller needs from the API server (:class:`drakit.kube.KubeClient`)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Mapping[str, object] | None = None,
    ) -> dict[str, Any]:
        """One API call."""
        ...

    def watch(
        self,
        path: str,
        stop_event: threading.Event,
        timeout_seconds: int = 300,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        resource_version: str | None = None,
        what: str = "",
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """A watch of a collection."""
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


def _q(part: str) -> str:
    return quote(part, safe="")


class TemplateController:
    """Makes what pods patched by the webhook need (see the module docstring).

    Args:
        api: the API server.
        mutators: the webhook's pod mutators.
        services: the mutators' services (the admission engine: shaping).
    """

    def __init__(
        self, api: Api, mutators: Sequence[PodMutator], services: AdmissionServices
    ) -> None:
        self.api = api
        self.mutators = tuple(mutators)
        self.services = services
        self._seen: OrderedDict[str, None] = OrderedDict()  # pods whose events are recorded
        self._handled: OrderedDict[str, None] = OrderedDict()  # pods whose templates are made
        self._lock = threading.Lock()

    # -- one pod ---------------------------------------------------------------------------

    def handle(self, pod: Mapping[str, Any]) -> list[str]:
        """Make what ``pod`` needs; the names of the templates it now owns (or shares)."""
        meta = pod.get("metadata") or {}
        namespace, name, uid = (str(meta.get(k) or "") for k in ("namespace", "name", "uid"))
        if not (namespace and name and uid) or meta.get("deletionTimestamp"):
            return []
        with self._lock:
            if uid in self._handled:  # a status update of a pod whose templates are made
                return []
        owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}
        done: list[str] = []
        events: list[PodEvent] = []
        complete = True
        for mutator in self.mutators:
            try:
                needs = mutator.pod_needs(pod, self.services)
            except DrakitError as e:
                log.warning("pod %s/%s: nothing made: %s", namespace, name, e)
                continue
            if needs is None:
                continue
            for template in needs.templates:
                made = self._make(namespace, template, owner)
                if made is None:
                    complete = False  # tried again at the pod's next event or relist
                elif isinstance(made, PodEvent):
                    events.append(made)
                else:
                    done.append(made)
            events.extend(needs.events)
            break  # the first mutator that answers decides, as at admission
        if complete:
            self._remember(self._handled, uid)
        if events and self._remember(self._seen, uid):
            self._record({**owner, "namespace": namespace}, events)
        return done

    def _record(self, involved: Mapping[str, str], events: Sequence[PodEvent]) -> None:
        for event in events:
            try:
                self.api.create_event(
                    involved, event.reason, event.message, event.type, component=COMPONENT
                )
            except DrakitError as e:
                log.warning("pod %s: cannot record %s: %s", involved["name"], event.reason, e)

    def _make(
        self, namespace: str, template: Mapping[str, Any], owner: Mapping[str, str]
    ) -> str | PodEvent | None:
        """A template made or owned: its name.

        The Event to record when a template of that name exists that drakit did not make;
        ``None`` when the API server failed (logged).
        """
        tname = str((template.get("metadata") or {}).get("name") or "")
        try:
            if self._ensure(namespace, template, owner):
                return tname
        except DrakitError as e:
            log.warning(
                "pod %s/%s: cannot make ResourceClaimTemplate %s: %s",
                namespace,
                owner["name"],
                tname,
                e,
            )
            return None
        return PodEvent(
            reason="ClaimTemplateNotMadeByDrakit",
            message=(
                f"ResourceClaimTemplate {tname} in this namespace was not made by drakit (no "
                f"{CREATED_LABEL}={CREATED_BY} label); the pod's claim is made from it as it is. "
                "Delete it to have drakit make the one the pod asks for."
            ),
        )

    def _remember(self, memory: OrderedDict[str, None], uid: str) -> bool:
        """Add ``uid`` to a bounded memory; whether it was new."""
        with self._lock:
            if uid in memory:
                return False
            memory[uid] = None
            while len(memory) > _SEEN:
                memory.popitem(last=False)
            return True

    def _ensure(
        self, namespace: str, template: Mapping[str, Any], owner: Mapping[str, str]
    ) -> bool:
        """Create the template owned by ``owner``, or add ``owner`` to drakit's one of that name.

        Returns ``False`` when a template of that name exists that drakit did not make (left
        as it is).

        Raises:
            DrakitError: the API server refused or failed (after a few conflicts).
        """
        meta = dict(template.get("metadata") or {})
        tname = str(meta.get("name") or "")
        collection = f"{_RESOURCE}/namespaces/{_q(namespace)}/resourceclaimtemplates"
        path = f"{collection}/{_q(tname)}"
        for _ in range(_TRIES):
            try:
                found = self.api.request("GET", path)
            except NotFoundError:
                body = {
                    **template,
                    "metadata": {
                        "name": tname,
                        "namespace": namespace,
                        "labels": {**(meta.get("labels") or {}), CREATED_LABEL: CREATED_BY},
                        "annotations": dict(meta.get("annotations") or {}),
                        "ownerReferences": [dict(owner)],
                    },
                }
                try:
                    self.api.request("POST", collection, body=body)
                except ConflictError:  # made meanwhile (another pod, another replica)
                    continue
                log.info(
                    "made ResourceClaimTemplate %s/%s for pod %s", namespace, tname, owner["name"]
                )
                return True
            fmeta = found.get("metadata") or {}
            if (fmeta.get("labels") or {}).get(CREATED_LABEL) != CREATED_BY:
                log.warning(
                    "ResourceClaimTemplate %s/%s exists and drakit did not make it; left alone",
                    namespace,
                    tname,
                )
                return False
            refs = [r for r in fmeta.get("ownerReferences") or [] if isinstance(r, dict)]
            if any(r.get("uid") == owner["uid"] for r in refs):
                return True
            if fmeta.get("deletionTimestamp"):  # the garbage collector is at it: wait for it
                time.sleep(0.2)
                continue
            found["metadata"] = {**fmeta, "ownerReferences": [*refs, dict(owner)]}
            try:
                self.api.request("PUT", path, body=found)  # with its resourceVersion
            except (ConflictError, NotFoundError):
                continue
            return True
        raise PermanentError(
            f"ResourceClaimTemplate {namespace}/{tname}: still changing after {_TRIES} tries"
        )

    # -- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List and watch labelled pods until ``stop`` is set; errors back off and relist."""
        query: dict[str, str | int | bool] = {"labelSelector": f"{PODS_LABEL}=true"}
        delay = 0.5
        while not stop.is_set():
            try:
                listed = self.api.request("GET", _PODS, query={**query, "limit": 500})
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                for pod in listed.get("items") or []:
                    self.handle(pod)
                token = (listed.get("metadata") or {}).get("continue")
                while token and not stop.is_set():  # the rest of a long list
                    page = self.api.request(
                        "GET", _PODS, query={**query, "limit": 500, "continue": token}
                    )
                    for pod in page.get("items") or []:
                        self.handle(pod)
                    token = (page.get("metadata") or {}).get("continue")
                while not stop.is_set():
                    for kind, pod in self.api.watch(
                        _PODS, stop, 300, query=query, resource_version=version, what="watch pods"
                    ):
                        version = str((pod.get("metadata") or {}).get("resourceVersion") or version)
                        if kind in {"ADDED", "MODIFIED"}:
                            self.handle(pod)
                    delay = 0.5
            except DrakitError as e:
                log.warning("template controller: %s; listing again in %.1fs", e, delay)
                stop.wait(delay)
                delay = min(delay * 2, 30.0)
            except Exception:  # a bug must not end the controller silently
                log.exception("template controller failed; listing again in %.1fs", delay)
                stop.wait(delay)
                delay = min(delay * 2, 30.0)
