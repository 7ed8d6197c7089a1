"""drakit backend composing GPU-NIC pairs by PCIe distance: the hooks only.

It never imports the GPU or NIC backends: it sees their devices through
``drakit_compose_devices`` (with the plugin that owns each) and places them with sysfs. The
pairing is optimal (:mod:`drakit_composite.pairing`: the most pairs, then the least total
distance), and every pair carries the attributes a claim selects and aligns on
(``resource.kubernetes.io/numaNode``, ``resource.kubernetes.io/pcieRoot`` when both members
share it, ``coupling``, the members' names and bus IDs).

No double allocation, by construction: the pair is published under the members' own driver, in
their pool, and consumes exactly the counter sets its GPU and its NIC consume (each member
backend makes every physical device a counter set when its driver is shared). The scheduler
then never allocates a member alone and in a pair at once, nor two pairs sharing a member; the
counters are also what Kueue charges for quota (the GPU's ``memory``, the NIC's ``bandwidth``).
``docs/composite.md`` describes the model for vendors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec, type_selector
from drakit.errors import ConfigInvalid
from drakit.hookspecs import hookimpl
from drakit.models import (
    ClaimInfo,
    Device,
    DeviceInventory,
    DeviceKey,
    NodeInfo,
    PreparedDevice,
)
from drakit.sysfs import read_pci_functions
from drakit_composite.devices import (
    MAX_CONSUMPTIONS,
    PAIR_CLASS,
    SOCKET,
    Candidate,
    Owners,
    device_type,
    pair_candidates,
    pair_devices,
)
from drakit_composite.locked import Share, divide, share_type
from drakit_composite.pairing import Pair, numa_sockets, pair_members
from drakit_composite.prepare import prepare_devices
from drakit_composite.settings import CompositeSettings

__all__ = [
    "EXTENDED_RESOURCE_DOMAIN",
    "MAX_CONSUMPTIONS",
    "PAIR_CLASS",
    "SOCKET",
    "CompositePlugin",
    "CompositeSettings",
    "member_problems",
]

EXTENDED_RESOURCE_DOMAIN = "composite.drakit.io"
"""Default extended resources: ``composite.drakit.io/gpu-nic-pair[-numa<k>]``."""


def member_problems(
    name: str, driver: str, peers: Mapping[str, str], settings: CompositeSettings
) -> list[tuple[str, str]]:
    """Why the member backends cannot share counters with the pairs, one ``(path, fix)`` each.

    At least one of the GPU backends and one of the NIC backends must be enabled (unless the
    list is empty: no pairs), every backend of ``locked`` must be enabled, and every enabled
    member must publish under the composite's driver.
    """
    out: list[tuple[str, str]] = []
    for i, entry in enumerate(settings.locked):
        if entry.plugin not in peers or entry.plugin == name:
            out.append(
                (
                    f"plugins.{name}.locked[{i}].plugin",
                    f"{entry.plugin!r} is not an enabled backend (enabled: "
                    f"{', '.join(p for p in peers if p != name) or 'none'}); enable "
                    f"plugins.{entry.plugin} or name an enabled backend",
                )
            )
    locked = [e.plugin for e in settings.locked if e.plugin in peers and e.plugin != name]
    for field, members in (
        ("gpu_plugins", settings.gpu_plugins),
        ("nic_plugins", settings.nic_plugins),
        ("locked", tuple(dict.fromkeys(locked))),
    ):
        enabled = [m for m in members if m in peers and m != name]
        if not enabled and members and field != "locked":
            out.append(
                (
                    f"plugins.{name}.{field}",
                    f"none of {', '.join(members)} is enabled; enable one of them "
                    f"(plugins.{members[0]}) or list the enabled backend here",
                )
            )
        for m in enabled:
            if peers[m] != driver:
                out.append(
                    (
                        f"plugins.{m}.driver",
                        f"plugin {m!r} publishes under {peers[m]!r} but plugins.{name} "
                        f"{'divides it' if field == 'locked' else 'pairs'} under {driver!r}; a "
                        "composed device shares counters with its members only inside one "
                        f"driver's pool, so set plugins.{m}.driver and plugins.{name}.driver to "
                        "the same name",
                    )
                )
    return out


class CompositePlugin:
    """Publishes ``pair-<n>`` devices, each one GPU and a NIC close to it, in their pool."""

    settings_model: ClassVar[type[PluginSettings]] = CompositeSettings
    default_driver: ClassVar[str] = "pairs.composite.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.settings = context.settings_as(CompositeSettings)
        self.ctx = context
        # a member under another driver would make pairs double-allocatable, and a locked-in
        # member that is not enabled divides nothing: refuse to start. No GPU or NIC member at
        # all is left to `drakit config validate` (the webhook loads the composite for its
        # strategies alone)
        problems = [
            (path, fix)
            for path, fix in member_problems(
                context.name, context.driver_name, context.peers, self.settings
            )
            if path.endswith((".driver", ".plugin"))
        ]
        if problems:
            raise ConfigInvalid(problems, source="configuration")
        self._pairs: dict[str, tuple[Pair, Owners]] = {}
        self._shares: dict[str, Share] = {}
        self._skipped: frozenset[str] = frozenset()

    def candidates(
        self,
        devices: Mapping[DeviceKey, Device],
        owners: Mapping[DeviceKey, str],
        sysfs_root: str,
    ) -> tuple[dict[str, Candidate], dict[str, Candidate]]:
        """The whole GPUs and NICs that may be paired, by device name."""
        pci = {f.bdf: f for f in read_pci_functions(Path(sysfs_root))}
        s = self.settings
        return (
            pair_candidates(devices, owners, s.gpu_plugins, s.gpu_types, pci),
            pair_candidates(devices, owners, s.nic_plugins, s.nic_types, pci),
        )

    def pairs(
        self,
        devices: Mapping[DeviceKey, Device],
        owners: Mapping[DeviceKey, str],
        sysfs_root: str,
    ) -> list[Pair]:
        """The pairs the settings allow among ``devices``, optimal and in bus-ID order."""
        gpus, nics = self.candidates(devices, owners, sysfs_root)
        return self._pair(gpus, nics)

    def _pair(self, gpus: Mapping[str, Candidate], nics: Mapping[str, Candidate]) -> list[Pair]:
        # a pair consumes both members' entries, and a device may have only two
        fits = {n: c for n, c in nics.items() if len(c.device.consumes_counters) < MAX_CONSUMPTIONS}
        room = {n: c for n, c in gpus.items() if len(c.device.consumes_counters) < MAX_CONSUMPTIONS}
        return pair_members(
            [c.member for c in room.values()],
            [c.member for c in fits.values()],
            max_distance=self.settings.max_distance,
            max_coupling=self.settings.max_coupling,
        )

    def _unpaired(
        self, devices: Mapping[DeviceKey, Device], owners: Mapping[DeviceKey, str]
    ) -> None:
        """Say once which whole members are left out because they consume no counter set."""
        s = self.settings
        skipped = frozenset(
            k.device
            for k, d in devices.items()
            if not d.consumes_counters
            and (
                (owners.get(k) in s.gpu_plugins and device_type(d) in s.gpu_types)
                or (owners.get(k) in s.nic_plugins and device_type(d) in s.nic_types)
            )
        )
        if skipped and skipped != self._skipped:
            self.ctx.log.warning(
                "plugins.%s: %s consume no counter set, so a pair holding them could be "
                "allocated together with them; they are not paired (their backend must publish "
                "each device as a counter set under a shared driver, docs/composite.md)",
                self.ctx.name,
                ", ".join(sorted(skipped)),
            )
        self._skipped = skipped

    @hookimpl
    def drakit_compose_devices(
        self, node: NodeInfo, devices: Mapping[DeviceKey, Device], owners: Mapping[DeviceKey, str]
    ) -> DeviceInventory | None:
        """Pair GPUs and NICs optimally and divide the ``locked`` members into shares.

        Each pair consumes what its members consume; each share ``1/shares`` of its member's
        counter set (:mod:`drakit_composite.locked`).

        Raises:
            ConfigInvalid: a ``locked`` entry does not fit this node's devices (shares that do
                not divide, unknown devices, a member that is not consumable), naming the
                setting and the fix.
        """
        shares, by_name, problems = divide(self.ctx.name, self.settings.locked, devices, owners)
        if problems:
            raise ConfigInvalid(problems, source="configuration")
        out = self._pair_devices(node, devices, owners)
        self._shares = by_name  # one swap, as for the pairs
        out.extend(shares)
        return DeviceInventory(devices=tuple(out)) if out else None

    def _pair_devices(
        self, node: NodeInfo, devices: Mapping[DeviceKey, Device], owners: Mapping[DeviceKey, str]
    ) -> list[Device]:
        self._unpaired(devices, owners)
        gpus, nics = self.candidates(devices, owners, node.sysfs_root)
        pairs = self._pair(gpus, nics)
        if not pairs:
            self._pairs = {}
            return []
        out, names = pair_devices(pairs, gpus, nics, numa_sockets(node.sysfs_root))
        self._pairs = names  # one swap: a prepare running meanwhile sees the old or the new map
        return out

    @hookimpl
    def drakit_device_classes(self, driver: str) -> list[DeviceClassSpec]:
        """The pair classes, and one share class per backend of ``locked``.

        ``gpu-nic-pair``, one ``gpu-nic-pair-numa<k>`` per NUMA node (``numa_classes``), and
        ``<member>-share`` (``cpu-share``). Under the shared driver the classes select by
        ``type``. Each has an extended resource of the same name in ``composite.drakit.io``, so
        a pod can ask for ``composite.drakit.io/gpu-nic-pair-numa0: 2`` with no webhook.
        """
        out = self._pair_classes(driver) if self.pairs_wanted else []
        for plugin in dict.fromkeys(e.plugin for e in self.settings.locked):
            name = share_type(plugin)
            out.append(
                DeviceClassSpec(
                    name=name,
                    selectors=(type_selector(driver, (name,)),) if self.ctx.shares_driver else (),
                    extended_resource_name=f"{EXTENDED_RESOURCE_DOMAIN}/{name}",
                    description=f"A fixed share of a {plugin} device, allocated whole",
                )
            )
        return out

    @property
    def pairs_wanted(self) -> bool:
        """GPUs and NICs are to be paired (``gpu_plugins`` and ``nic_plugins`` not empty)."""
        return bool(self.settings.gpu_plugins and self.settings.nic_plugins)

    def _pair_classes(self, driver: str) -> list[DeviceClassSpec]:
        typed = (type_selector(driver, (PAIR_CLASS,)),) if self.ctx.shares_driver else ()
        out = [
            DeviceClassSpec(
                name=PAIR_CLASS,
                selectors=typed,
                extended_resource_name=f"{EXTENDED_RESOURCE_DOMAIN}/{PAIR_CLASS}",
                description="A GPU and the NIC closest to it, allocated together",
            )
        ]
        domain = '"resource.kubernetes.io"'
        for k in range(self.settings.numa_classes):
            name = f"{PAIR_CLASS}-numa{k}"
            out.append(
                DeviceClassSpec(
                    name=name,
                    selectors=(
                        *typed,
                        f"has(device.attributes[{domain}].numaNode) && "
                        f"device.attributes[{domain}].numaNode == {k}",
                    ),
                    extended_resource_name=f"{EXTENDED_RESOURCE_DOMAIN}/{name}",
                    description=f"A GPU-NIC pair on NUMA node {k}",
                )
            )
        return out

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> Sequence[PreparedDevice]:
        """Prepare each pair's GPU and NIC, and each share's member, through their own backends.

        See :func:`drakit_composite.prepare.prepare_devices`.
        """
        return prepare_devices(self.ctx, self._pairs, self._shares, claim)

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Nothing of its own to undo: core unprepares the members it recorded for the claim."""
        return True
