"""AMD GPUs and their compute partitions as DRA devices.

Full GPU (``type: amdgpu``, ``gpu-<domain>-<bus>-<dev>-<fn>``, keyed by PCI address because card
and render numbers change across boots): ``productName``, ``family`` (``CDNA3``),
``gfxTarget``, ``driverVersion``, ``deviceID``, ``computePartition``, ``memoryPartition``,
``partitionProfile`` and the standard ``pciBusID``, ``pcieRoot`` and ``numaNode``; capacities
``memory`` and ``computeUnits``. A GPU whose KFD topology shows several compute partitions
(DPX, QPX, CPX) is also a counter set: the full GPU consumes all of its XCCs and memory, each
partition (``type: amdgpu-partition``, ``<gpu>-<mode>-<k>``) its own, so the scheduler never
hands out the whole GPU together with one of its partitions. With ``whole_counters`` (the
driver is shared with a composite backend, ``docs/composite.md``) every GPU is a counter set,
partitioned or not, which the full GPU (and a GPU-NIC pair holding it) consumes whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from drakit.models import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    DeviceTaint,
)
from drakit.sysfs import standard_pci_attributes
from drakit_amd_gpu.discovery import AmdGpu, KfdNode, family_of

__all__ = ["Published", "build_inventory", "device_name", "trim_version"]


def device_name(gpu: AmdGpu) -> str:
    """``gpu-0000-05-00-0``."""
    return "gpu-" + gpu.fn.bdf.replace(":", "-").replace(".", "-")


def trim_version(text: str | None) -> str | None:
    """The DKMS module's ``6.12.12.60400`` as a semver ``6.12.12`` (``None`` if not numeric)."""
    if not text:
        return None
    parts = text.split(".")[:3]
    if not all(p.isdigit() for p in parts):
        return None
    return ".".join(str(int(p)) for p in parts + ["0"] * (3 - len(parts)))


@dataclass(frozen=True)
class Published:
    """What a device name stands for: the GPU and the KFD nodes (partitions) it covers."""

    gpu: AmdGpu
    nodes: tuple[KfdNode, ...]


def _common(gpu: AmdGpu) -> dict[str, DeviceAttribute]:
    attrs: dict[str, DeviceAttribute] = {
        "deviceID": DeviceAttribute(string=f"0x{gpu.fn.device:04x}"),
    }
    if gpu.product_name:
        attrs["productName"] = DeviceAttribute(string=gpu.product_name[:64])
    fam = family_of(gpu.nodes[0].gfx_target_version) if gpu.nodes else None
    if fam is not None:
        attrs["gfxTarget"] = DeviceAttribute(string=fam[0])
        attrs["family"] = DeviceAttribute(string=fam[1])
    version = trim_version(gpu.driver_version)
    if version:
        attrs["driverVersion"] = DeviceAttribute(version=version)
    if gpu.compute_partition:
        attrs["computePartition"] = DeviceAttribute(string=gpu.compute_partition.lower())
    if gpu.memory_partition:
        attrs["memoryPartition"] = DeviceAttribute(string=gpu.memory_partition.lower())
    if gpu.compute_partition and gpu.memory_partition:
        profile = f"{gpu.compute_partition}_{gpu.memory_partition}".lower()
        attrs["partitionProfile"] = DeviceAttribute(string=profile)
    attrs.update(
        {k: DeviceAttribute.model_validate(v) for k, v in standard_pci_attributes(gpu.fn).items()}
    )
    return attrs


def build_inventory(
    gpus: Sequence[AmdGpu],
    *,
    partitions: bool,
    taints: Mapping[str, Sequence[DeviceTaint]],
    whole_counters: bool = False,
) -> tuple[DeviceInventory, dict[str, Published]]:
    """Devices (and counter sets) for every GPU, and what each device name stands for.

    Args:
        gpus: what sysfs showed.
        partitions: publish the partitions of partitioned GPUs.
        taints: device name of a full GPU -> taints for it and its partitions.
        whole_counters: every GPU is a counter set its full device consumes whole.
    """
    devices: list[Device] = []
    sets: list[CounterSet] = []
    published: dict[str, Published] = {}
    for gpu in gpus:
        name = device_name(gpu)
        common = _common(gpu)
        gpu_taints = tuple(taints.get(name, ()))
        xcc = sum(n.xcc for n in gpu.nodes)
        cu = sum(n.compute_units for n in gpu.nodes)
        capacity: dict[str, DeviceCapacity] = {}
        if gpu.vram_bytes:
            capacity["memory"] = DeviceCapacity(value=str(gpu.vram_bytes))
        if cu:
            capacity["computeUnits"] = DeviceCapacity(value=str(cu))
        split = partitions and gpu.partitioned
        consumes: tuple[CounterConsumption, ...] = ()
        cs: CounterSet | None = None
        if split or whole_counters:
            counters = {"xcc": str(xcc)}
            if gpu.vram_bytes:
                counters["memory"] = str(gpu.vram_bytes)
            cs = CounterSet(name=f"{name}-counters", counters=counters)
            sets.append(cs)
            consumes = (CounterConsumption(counter_set=cs.name, counters=dict(counters)),)
            if not split:
                cs = None  # a counter set for the pairs only: no partitions
        devices.append(
            Device(
                name=name,
                attributes={"type": DeviceAttribute(string="amdgpu"), **common},
                capacity=capacity,
                consumes_counters=consumes,
                taints=gpu_taints,
            )
        )
        published[name] = Published(gpu, gpu.nodes)
        if cs is None:
            continue
        mode = (gpu.compute_partition or "part").lower()
        for k, node in enumerate(gpu.nodes):
            pname = f"{name}-{mode}-{k}"
            used = {"xcc": str(node.xcc)}
            pcap = {"computeUnits": DeviceCapacity(value=str(node.compute_units))}
            if node.memory_bytes is not None:
                pcap["memory"] = DeviceCapacity(value=str(node.memory_bytes))
                if "memory" in cs.counters:
                    used["memory"] = str(node.memory_bytes)
            devices.append(
                Device(
                    name=pname,
                    attributes={
                        "type": DeviceAttribute(string="amdgpu-partition"),
                        "partition": DeviceAttribute(int=k),
                        **common,
                    },
                    capacity=pcap,
                    consumes_counters=(CounterConsumption(counter_set=cs.name, counters=used),),
                    taints=gpu_taints,
                )
            )
            published[pname] = Published(gpu, (node,))
    return DeviceInventory(devices=tuple(devices), counter_sets=tuple(sets)), published
