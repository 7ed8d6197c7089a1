"""drakit backend for AMD AI NICs (Pensando "Pollara 400"): PFs, VFs and shared PFs.

The hooks only; the work is in the modules beside this one: :mod:`.discovery` (sysfs),
:mod:`.devices` (modes, attributes, capacities, rails), :mod:`.config` (``NicConfig``),
:mod:`.prepare` (VF choice, settings, CDI, ledger), :mod:`.podnet` (netdevs into pods, with
NRI; :mod:`.netns` does the rtnetlink requests), :mod:`.health`, :mod:`.netlink` (the pyroute2
seam) and :mod:`.strategies`. ``docs/ainic-backend.md`` is the user-facing description.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.errors import RetryableError
from drakit.hookspecs import hookimpl
from drakit.models import (
    ClaimInfo,
    Device,
    DeviceHealth,
    DeviceInventory,
    DeviceKey,
    NodeInfo,
    PodSandboxView,
    PreparedDevice,
)
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit_amd_ainic.config import parse_nic_config
from drakit_amd_ainic.devices import (
    DiscoveryCache,
    Published,
    build_devices,
    topology_labels,
    with_counter_sets,
)
from drakit_amd_ainic.discovery import NicFunction, read_ainics
from drakit_amd_ainic.health import device_health
from drakit_amd_ainic.ledger import Ledger
from drakit_amd_ainic.netlink import netlink_for
from drakit_amd_ainic.podnet import PodNetwork
from drakit_amd_ainic.prepare import SELECTION_KIND, Preparer
from drakit_amd_ainic.settings import AmdAinicSettings
from drakit_amd_ainic.strategies import LEAST_LOADED, least_loaded

__all__ = ["AmdAinicPlugin", "AmdAinicSettings"]


def boot_id(root: Path) -> str:
    """The kernel's boot ID under ``root`` (``proc/sys/kernel/random/boot_id``); "" if unread."""
    try:
        return (root / "proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class _View:
    """One discovery round, swapped in whole (prepare and health read one snapshot)."""

    published: Mapping[str, Published]


class AmdAinicPlugin:
    """The AINIC backend; see the module docstring."""

    settings_model: ClassVar[type[PluginSettings]] = AmdAinicSettings
    default_driver: ClassVar[str] = "ainic.amd.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.settings = context.settings_as(AmdAinicSettings)
        self.root = Path(context.node.sysfs_root)
        boot = boot_id(self.root)
        self.preparer = Preparer(
            self.root,
            self.settings,
            netlink_for(self.settings.netlink, context.libraries),
            Ledger(context.state, boot),
            context.select,
        )
        self.podnet = PodNetwork(context.state, boot)
        self._view = _View(published={})
        self._cache = DiscoveryCache()
        self._counters_dropped = False
        # functions as last read with their netdev in the host: a netdev moved into a pod is
        # published as it was (build_devices' ``moved``)
        self._host_seen: dict[str, NicFunction] = {}

    @property
    def published(self) -> Mapping[str, Published]:
        """Device name -> what it stands for, from the last discovery round."""
        return self._view.published

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """AINIC PFs and VFs, published per their configured mode."""
        nics = read_ainics(node.sysfs_root, self._cache.sysfs)
        if not nics:
            self._view = _View(published={})
            return None
        moved = self.podnet.moved()
        held = {bdf: fn for bdf, fn in self._host_seen.items() if bdf in moved}
        devices, published = build_devices(
            nics,
            self.settings,
            Path(node.sysfs_root),
            self._cache,
            node.labels,
            held,
            self.ctx.skipped,
        )
        self._host_seen = held | {
            fn.bdf: fn
            for pub in published.values()
            for fn in (pub.function, pub.nic.pf)
            if fn.ifname is not None
        }
        self._view = _View(published=published)
        wanted = self.ctx.shares_driver or self.settings.whole_device_counters
        if (
            wanted
            and not self._counters_dropped
            and "consumesCounters" in self.ctx.dropped_fields()
        ):
            self._counters_dropped = True  # until restart: publishing them again would flap
            self.ctx.log.warning(
                "plugins.%s: the API server drops consumesCounters (DRAPartitionableDevices is "
                "off); publishing NICs without counter sets",
                self.ctx.name,
            )
        if not wanted or self._counters_dropped:
            # validated devices (thousands on a VF node): no second pass over each
            return DeviceInventory.model_construct(devices=tuple(devices))
        # every PF consumes a counter set of its own (bandwidth): what a composite's pairs
        # consume too, and what a counter-reading Kueue charges (docs/multi-node.md)
        devices, sets = with_counter_sets(devices, published)
        return DeviceInventory(devices=tuple(devices), counter_sets=tuple(sets))

    @hookimpl
    def drakit_node_labels(self, devices: Mapping[DeviceKey, Device]) -> dict[str, str] | None:
        """``topology.drakit.io/fabric`` and ``/rails`` from this round's NICs (its own)."""
        return topology_labels(devices.values()) or None

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``NicConfig``; errors name the field (``vf.vlan: ...``)."""
        return parse_nic_config(api_version, kind, parameters)

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice], held_claims: AbstractSet[str]
    ) -> list[PreparedDevice]:
        """Choose VFs, apply their settings, hand over uverbs/rdma_cm and the env."""
        view = self._view
        if not view.published:
            raise RetryableError("no AINIC has been discovered yet")
        return self.preparer.prepare(view.published, claim, held, held_claims)

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """Bring the claim's netdevs back from pods, reset its VFs, remove idle on-demand VFs."""
        if self.settings.move_netdevs != "never":
            self.podnet.stop(None, claim_uid)
        self.preparer.unprepare(claim_uid, prepared)
        return True

    @hookimpl
    def drakit_pod_sandbox_start(
        self, sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
    ) -> Sequence[PreparedDevice] | None:
        """Move the claim's netdevs that ask for it into the pod; their in-pod networkData."""
        return self.podnet.start(sandbox, claim_uid, devices)

    @hookimpl
    def drakit_pod_sandbox_stop(
        self, sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
    ) -> bool:
        """Move the claim's netdevs back to the host under their host names and settings."""
        self.podnet.stop(sandbox, claim_uid)
        return True

    @hookimpl
    def drakit_device_health(self, node: NodeInfo) -> list[DeviceHealth]:
        """Link, carrier and RDMA port state of every published device.

        Also finishes netdev moves a crash cut short and brings netdevs back from pod
        namespaces that died: the node polls health from its start on (``health.interval``),
        and only the node does (``drakit discover`` and the other commands never move a netdev).
        """
        if self.settings.move_netdevs != "never":
            self.podnet.recover()
        return device_health(Path(node.sysfs_root), node.name, self._view.published)

    @hookimpl
    def drakit_select_resources(
        self, strategy: str, request: SelectionRequest
    ) -> SelectionResult | None:
        """``least-loaded`` VF choice for ``kind == "ainic-vf"``."""
        if request.kind != SELECTION_KIND or strategy != LEAST_LOADED:
            return None
        return least_loaded(request)

    @hookimpl
    def drakit_device_classes(self, driver: str) -> list[DeviceClassSpec] | None:
        """The default class; under a shared driver narrowed to PFs, VFs and shared NICs."""
        return shared_driver_class(
            self.ctx.name, driver, ("pf", "vf", "shared"), shares_driver=self.ctx.shares_driver
        )
