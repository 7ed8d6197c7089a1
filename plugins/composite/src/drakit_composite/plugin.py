"""drakit backend composing GPU-NIC pairs by PCIe distance: the hooks only.

It never imports the GPU or NIC backends: it sees their devices through
``drakit_compose_devices`` and places them with sysfs. The pairing is optimal
(:mod:`drakit_composite.pairing`: the most pairs, then the least total distance), and every
pair carries the attributes a claim selects and aligns on (``resource.kubernetes.io/numaNode``,
``resource.kubernetes.io/pcieRoot`` when both members share it, ``coupling``, the members'
names and bus IDs) and, with ``quota_counters``, a counter set of its own holding the GPU's
memory and the NIC's bandwidth, which the pair consumes whole (Kueue's counter quota path
charges these).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    CdiEdits,
    ClaimInfo,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceInventory,
    DeviceKey,
    NodeInfo,
    PreparedDevice,
)
from drakit.sysfs import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, PciFunction, read_pci_functions
from drakit_composite.pairing import Member, Pair, numa_sockets, pair_members
from drakit_composite.settings import CompositeSettings

__all__ = [
    "EXTENDED_RESOURCE_DOMAIN",
    "GPU_MEMORY",
    "NIC_BANDWIDTH",
    "PAIR_CLASS",
    "SOCKET",
    "CompositePlugin",
    "CompositeSettings",
]

PAIR_CLASS = "gpu-nic-pair"
"""The DeviceClass of every pair; ``gpu-nic-pair-numa<k>`` holds the pairs of NUMA node k."""

SOCKET = "socket"
"""Attribute (in the driver's domain): the CPU socket of the pair's NUMA node."""

EXTENDED_RESOURCE_DOMAIN = "composite.drakit.io"
"""Default extended resources: ``composite.drakit.io/gpu-nic-pair[-numa<k>]``."""

GPU_MEMORY = "gpu-memory"
NIC_BANDWIDTH = "nic-bandwidth"
"""Counter names in each pair's counter set."""


def _members(
    devices: Mapping[DeviceKey, Device], driver: str, pci: Mapping[str, PciFunction]
) -> dict[str, tuple[Member, Device]]:
    out: dict[str, tuple[Member, Device]] = {}
    for key, dev in devices.items():
        bus = dev.attributes.get(PCI_BUS_ID)
        fn = pci.get(str(bus.value)) if bus is not None else None
        if key.driver == driver and fn is not None:
            out[key.device] = (Member(name=key.device, pci=fn), dev)
    return out


def _counters(gpu: Device, nic: Device) -> dict[str, str]:
    out: dict[str, str] = {}
    mem = gpu.capacity.get("memory")
    if mem is not None:
        out[GPU_MEMORY] = str(mem.value)
    # the AINIC backend publishes Gbit/s; a NIC backend may publish Mbit/s
    for attr, suffix in (("linkSpeedGbps", "G"), ("linkSpeedMbps", "M")):
        speed = nic.attributes.get(attr)
        if speed is not None and isinstance(speed.value, int) and not isinstance(speed.value, bool):
            out[NIC_BANDWIDTH] = f"{speed.value}{suffix}"  # bits per second, SI suffix
            break
    return out


class CompositePlugin:
    """Publishes ``pair-<n>`` devices, each one GPU and a NIC close to it."""

    settings_model: ClassVar[type[PluginSettings]] = CompositeSettings
    default_driver: ClassVar[str] = "pairs.composite.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.settings = context.settings_as(CompositeSettings)
        self._pairs: dict[str, Pair] = {}

    def pairs(self, devices: Mapping[DeviceKey, Device], sysfs_root: str) -> list[Pair]:
        """The pairs the settings allow among ``devices``, optimal and in bus-ID order."""
        pci = {f.bdf: f for f in read_pci_functions(Path(sysfs_root))}
        gpus = _members(devices, self.settings.gpu_driver, pci)
        nics = _members(devices, self.settings.nic_driver, pci)
        return pair_members(
            [m for m, _ in gpus.values()],
            [m for m, _ in nics.values()],
            max_distance=self.settings.max_distance,
            max_coupling=self.settings.max_coupling,
        )

    @hookimpl
    def drakit_compose_devices(
        self, node: NodeInfo, devices: Mapping[DeviceKey, Device]
    ) -> DeviceInventory | None:
        """Pair GPUs and NICs optimally; each pair with its attributes and counters."""
        pairs = self.pairs(devices, node.sysfs_root)
        if not pairs:
            self._pairs = {}
            return None
        by_name = {k.device: d for k, d in devices.items()}
        sockets = numa_sockets(node.sysfs_root)
        out: list[Device] = []
        sets: list[CounterSet] = []
        names: dict[str, Pair] = {}
        for i, p in enumerate(pairs):
            name = f"pair-{i}"
            names[name] = p
            attrs: dict[str, int | str] = {
                "type": PAIR_CLASS,
                "gpu": p.gpu.name,
                "nic": p.nic.name,
                "gpuBusID": p.gpu.pci.bdf,
                "nicBusID": p.nic.pci.bdf,
                "pcieDistance": p.hops,
                "coupling": p.coupling,
            }
            groot, nroot = p.gpu.pci.pcie_root, p.nic.pci.pcie_root
            if groot and groot == nroot:
                attrs[PCIE_ROOT] = groot
            numa = p.gpu.pci.numa_node
            if numa is not None:
                attrs[NUMA_NODE] = numa
                if numa in sockets:
                    attrs[SOCKET] = sockets[numa]
            consumes: tuple[CounterConsumption, ...] = ()
            counters = _counters(by_name[p.gpu.name], by_name[p.nic.name])
            if self.settings.quota_counters and counters:
                sets.append(CounterSet(name=name, counters=counters))
                consumes = (CounterConsumption(counter_set=name, counters=counters),)
            out.append(
                Device(
                    name=name,
                    attributes={k: DeviceAttribute.model_validate(v) for k, v in attrs.items()},
                    consumes_counters=consumes,
                )
            )
        self._pairs = names  # one swap: a prepare running meanwhile sees the old or the new map
        return DeviceInventory(devices=tuple(out), counter_sets=tuple(sets))

    @hookimpl
    def drakit_device_classes(self) -> list[DeviceClassSpec]:
        """``gpu-nic-pair`` and one ``gpu-nic-pair-numa<k>`` per NUMA node (``numa_classes``).

        Each class has an extended resource of the same name in ``composite.drakit.io``, so a
        pod can ask for ``composite.drakit.io/gpu-nic-pair-numa0: 2`` with no webhook.
        """
        out = [
            DeviceClassSpec(
                name=PAIR_CLASS,
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
        """Tell the container which GPU and NIC each allocated pair holds."""
        out = []
        pairs = self._pairs
        for dev in claim.devices:
            pair = pairs.get(dev.device)
            if pair is None:
                raise PermanentError(
                    f"request {dev.request!r}: device {dev.device!r} is not a GPU-NIC pair on "
                    "this node"
                )
            tag = dev.device.upper().replace("-", "_")
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(
                        env=(
                            f"DRAKIT_{tag}_GPU={pair.gpu.pci.bdf}",
                            f"DRAKIT_{tag}_NIC={pair.nic.pci.bdf}",
                        )
                    ),
                    state={"gpu": pair.gpu.name, "nic": pair.nic.name},
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Nothing to undo: prepare has no side effects outside the CDI spec."""
        return True
