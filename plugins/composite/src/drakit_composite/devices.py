"""The composite's devices: a ``pair-<n>`` per GPU-NIC pair, consuming what its members consume.

:func:`pair_candidates` finds the whole GPUs and NICs that may be paired (by owner, ``type``
and the PCI function sysfs places them at); :func:`pair_devices` turns the pairs
(:func:`drakit_composite.pairing.pair_members`) into devices with the attributes a claim
selects and aligns on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from drakit.models import Device, DeviceAttribute, DeviceKey
from drakit.sysfs import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, PciFunction
from drakit_composite.pairing import Member, Pair

__all__ = [
    "MAX_CONSUMPTIONS",
    "PAIR_CLASS",
    "SOCKET",
    "Candidate",
    "Owners",
    "device_type",
    "pair_candidates",
    "pair_devices",
]

PAIR_CLASS = "gpu-nic-pair"
"""The DeviceClass of every pair (and its ``type``); ``gpu-nic-pair-numa<k>``: NUMA node k."""

SOCKET = "socket"
"""Attribute (in the driver's domain): the CPU socket of the pair's NUMA node."""

MAX_CONSUMPTIONS = 2
"""``consumesCounters`` entries a device may have (1.35+): the GPU's and the NIC's."""


@dataclass(frozen=True)
class Owners:
    """The plugins behind one pair's GPU and NIC."""

    gpu: str
    nic: str


@dataclass(frozen=True)
class Candidate:
    """A whole GPU or NIC that may be paired: where sysfs places it, its device, its owner."""

    member: Member
    device: Device
    owner: str


def pair_candidates(
    devices: Mapping[DeviceKey, Device],
    owners: Mapping[DeviceKey, str],
    plugins: Sequence[str],
    types: Sequence[str],
    pci: Mapping[str, PciFunction],
) -> dict[str, Candidate]:
    """Whole devices of ``plugins`` (by ``type``) that sysfs places and that consume counters."""
    out: dict[str, Candidate] = {}
    for key, dev in devices.items():
        kind = dev.attributes.get("type")
        bus = dev.attributes.get(PCI_BUS_ID)
        fn = pci.get(str(bus.value)) if bus is not None else None
        if (
            owners.get(key) in plugins
            and kind is not None
            and kind.value in types
            and fn is not None
            and dev.consumes_counters
        ):
            out[key.device] = Candidate(Member(name=key.device, pci=fn), dev, str(owners[key]))
    return out


def device_type(dev: Device) -> object:
    """A device's ``type`` attribute (``None`` without one)."""
    kind = dev.attributes.get("type")
    return kind.value if kind is not None else None


def pair_devices(
    pairs: Sequence[Pair],
    gpus: Mapping[str, Candidate],
    nics: Mapping[str, Candidate],
    sockets: Mapping[int, int],
) -> tuple[list[Device], dict[str, tuple[Pair, Owners]]]:
    """A ``pair-<n>`` device per pair, and what each name stands for.

    ``sockets`` maps a NUMA node to its CPU socket
    (:func:`~drakit_composite.pairing.numa_sockets`).
    """
    out: list[Device] = []
    names: dict[str, tuple[Pair, Owners]] = {}
    for i, p in enumerate(pairs):
        name = f"pair-{i}"
        names[name] = (p, Owners(gpu=gpus[p.gpu.name].owner, nic=nics[p.nic.name].owner))
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
        gpu, nic = gpus[p.gpu.name].device, nics[p.nic.name].device
        out.append(
            Device(
                name=name,
                attributes={k: DeviceAttribute.model_validate(v) for k, v in attrs.items()},
                # exactly what the lone members consume: the scheduler sees the overlap
                consumes_counters=(*gpu.consumes_counters, *nic.consumes_counters),
                # a member's own taints (an XID) keep the pair holding it away too
                taints=tuple(dict.fromkeys((*gpu.taints, *nic.taints))),
            )
        )
    return out, names
