"""The runtime's pods and containers as drakit's views, and the devices a container uses (pure).

Which claims a container uses: the CDI device names drakit gave each prepared device
(``k8s.<driver>/claim=<claim uid>-<device>``), as the runtime reports them for the container:
NRI's ``Container.CDI_devices`` and, for runtimes that pass them that way, the
``cdi.k8s.io/<key>`` annotations (a comma-separated list). A claim shared by several pods or
containers gives each of them its devices, since each is injected with the same CDI names.
"""

from __future__ import annotations

from typing import Final

from drakit.enforce.index import DeviceIndex, Holding
from drakit.models import ContainerView, PodRef, PodSandboxView
from drakit.nri import api

__all__ = [
    "CDI_ANNOTATION_PREFIX",
    "DeviceIndex",
    "Holding",
    "cdi_names",
    "container_view",
    "sandbox_view",
]

CDI_ANNOTATION_PREFIX: Final = "cdi.k8s.io/"


def pod_ref(pod: api.PodSandbox) -> PodRef:
    """The pod of a sandbox."""
    return PodRef(uid=pod.uid, namespace=pod.namespace, name=pod.name)


def sandbox_view(pod: api.PodSandbox) -> PodSandboxView:
    """A sandbox as the enforcement hooks see it (``netns``: ``None`` for host networking)."""
    netns = next((ns.path for ns in pod.linux.namespaces if ns.type == "network" and ns.path), None)
    return PodSandboxView(id=pod.id, pod=pod_ref(pod), netns=netns, ips=tuple(pod.ips))


def cdi_names(container: api.Container) -> tuple[str, ...]:
    """The fully qualified CDI device names the runtime injected, in order, without repeats."""
    names: list[str] = [d.name for d in container.CDI_devices]
    for key, value in sorted(container.annotations.items()):
        if key.startswith(CDI_ANNOTATION_PREFIX):
            names.extend(n.strip() for n in value.split(","))
    return tuple(dict.fromkeys(n for n in names if n))


def container_view(pod: api.PodSandbox | None, container: api.Container) -> ContainerView:
    """A container as the enforcement hooks see it (its pod unknown: empty names)."""
    ref = pod_ref(pod) if pod is not None else PodRef(uid="", namespace="", name="")
    return ContainerView(
        id=container.id,
        name=container.name,
        pod=ref,
        sandbox_id=container.pod_sandbox_id,
        cdi_devices=cdi_names(container),
    )
