"""The runtime's pods and containers as drakit's views, and the devices a container uses (pure).

Which claims a container uses: the CDI device names drakit gave each prepared device
(``k8s.<driver>/claim=<claim uid>-<device>``), as the runtime reports them for the container:
NRI's ``Container.CDI_devices`` and, for runtimes that pass them that way, the
``cdi.k8s.io/<key>`` annotations (a comma-separated list). A claim shared by several pods or
containers gives each of them its devices, since each is injected with the same CDI names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from drakit.models import ContainerView, PodRef, PodSandboxView, PreparedDevice
from drakit.nri import api

__all__ = ["CDI_ANNOTATION_PREFIX", "DeviceIndex", "cdi_names", "container_view", "sandbox_view"]

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


@dataclass(frozen=True)
class Holding:
    """One prepared device of a claim, as the index knows it."""

    driver: str
    plugin: str
    claim_uid: str
    device: PreparedDevice


@dataclass(frozen=True)
class DeviceIndex:
    """What every driver has prepared on the node, by CDI name and by plugin.

    Args:
        by_cdi: fully qualified CDI device name -> the prepared device it stands for.
        held: ``(driver, plugin)`` -> every device the plugin holds (adminAccess ones left out).
        plugins: driver -> its plugins, in configuration order.
        pods: pod UID -> the ``(driver, claim uid)`` of its claims (``status.reservedFor``).
        claim_devices: ``(driver, claim uid)`` -> plugin -> what it prepared for the claim.
    """

    by_cdi: Mapping[str, Holding] = field(default_factory=dict)
    held: Mapping[tuple[str, str], Sequence[PreparedDevice]] = field(default_factory=dict)
    plugins: Mapping[str, Sequence[str]] = field(default_factory=dict)
    pods: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    claim_devices: Mapping[tuple[str, str], Mapping[str, Sequence[PreparedDevice]]] = field(
        default_factory=dict
    )

    def devices(self, driver: str, plugin: str, names: Iterable[str]) -> list[PreparedDevice]:
        """``plugin``'s devices among the CDI ``names`` (one entry per device, in order)."""
        out: list[PreparedDevice] = []
        for name in names:
            h = self.by_cdi.get(name)
            mine = h is not None and (h.driver, h.plugin) == (driver, plugin)
            if mine and h is not None and h.device not in out:
                out.append(h.device)
        return out

    def claims(self, names: Iterable[str]) -> set[str]:
        """The claim UIDs behind the CDI ``names`` (drakit's only)."""
        return {h.claim_uid for n in names if (h := self.by_cdi.get(n)) is not None}
