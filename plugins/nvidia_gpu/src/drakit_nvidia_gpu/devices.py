"""GPUs and MIG placements as DRA devices, with the attributes NVIDIA's driver publishes.

Full GPU (``type: gpu``, ``gpu-<minor>``): ``uuid``, ``productName``, ``brand``,
``architecture``, ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` and the
standard ``resource.kubernetes.io/pciBusID``, ``pcieRoot`` and ``numaNode`` (from sysfs);
capacity ``memory``. The removed ``index`` and ``minor`` are not published.

MIG placement (``type: mig``, ``gpu-<minor>-mig-<profile>-<profileId>-<start>``, published
only for GPUs in MIG mode): the parent's attributes without ``uuid`` plus ``parentUUID`` and
``profile``; capacities ``multiprocessors``, ``copyEngines``, ``decoders``, ``encoders``,
``jpegEngines``, ``ofaEngines``, ``memory``. Each such GPU is a counter set
``gpu-<minor>-counter-set`` (KEP-4815): the full GPU consumes all of it, a placement its
engines, memory and one ``memory-slice-<i>`` per memory slice it covers, so the scheduler
never allocates a full GPU with a slice of it, nor two overlapping slices.

With ``whole_counters`` (the driver is shared with a composite backend, ``docs/composite.md``)
every GPU is such a counter set, MIG mode or not, and the full GPU consumes all of it: a
GPU-NIC pair consumes exactly the same, so the GPU is never allocated alone and in a pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from drakit.models import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    DeviceTaint,
)
from drakit.sysfs import PciFunction, read_pci_functions, standard_pci_attributes
from drakit_nvidia_gpu.discovery import GpuInfo, MigPlacement, NodeGpus

__all__ = ["NVIDIA_VENDOR", "Published", "build_inventory", "mig_device_name", "semver"]

NVIDIA_VENDOR = 0x10DE
_ENGINES = (
    ("multiprocessors", "multiprocessors", "multiprocessors"),
    ("copyEngines", "copy-engines", "copy_engines"),
    ("decoders", "decoders", "decoders"),
    ("encoders", "encoders", "encoders"),
    ("jpegEngines", "jpeg-engines", "jpeg_engines"),
    ("ofaEngines", "ofa-engines", "ofa_engines"),
)
_MAX_STRING = 64


def semver(text: str) -> str | None:
    """A version attribute value: ``580.126.20``, ``13.0`` -> ``13.0.0``; leading zeros dropped.

    ``None`` when ``text`` is not dotted numbers (the attribute is then left out).
    """
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(re.fullmatch(r"\d+", p) for p in parts):  # noqa: PLR2004
        return None
    nums = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(nums)


def mig_device_name(gpu: GpuInfo, placement: MigPlacement) -> str:
    """NVIDIA's canonical MIG device name: ``gpu-0-mig-1g10gb-19-0``."""
    return f"gpu-{gpu.minor}-mig-{placement.profile.short}-{placement.profile.id}-{placement.start}"


@dataclass(frozen=True)
class Published:
    """What one device name stands for, for prepare and health."""

    gpu: GpuInfo
    placement: MigPlacement | None = None


def _common(
    node: NodeGpus, gpu: GpuInfo, pci: Mapping[str, PciFunction]
) -> dict[str, DeviceAttribute]:
    attrs: dict[str, DeviceAttribute] = {
        "productName": DeviceAttribute(string=gpu.name[:_MAX_STRING]),
        "brand": DeviceAttribute(string=gpu.brand),
        "architecture": DeviceAttribute(string=gpu.architecture),
        "cudaComputeCapability": DeviceAttribute(version="{}.{}.0".format(*gpu.compute_capability)),
    }
    driver = semver(node.driver_version)
    if driver is not None:
        attrs["driverVersion"] = DeviceAttribute(version=driver)
    cuda = node.cuda_driver_version
    attrs["cudaDriverVersion"] = DeviceAttribute(version=f"{cuda // 1000}.{(cuda % 1000) // 10}.0")
    fn = pci.get(gpu.pci_bus_id)
    if fn is not None:
        attrs.update(
            {k: DeviceAttribute.model_validate(v) for k, v in standard_pci_attributes(fn).items()}
        )
    return attrs


def _whole_counter_set(gpu: GpuInfo) -> CounterSet:
    """The counter set of a GPU published without MIG placements: its memory (or one ``gpu``)."""
    memory = gpu.memory_bytes or max((p.memory_bytes for p in gpu.mig_profiles), default=0)
    counters = {"memory": str(memory)} if memory else {"gpu": "1"}
    return CounterSet(name=f"gpu-{gpu.minor}-counter-set", counters=counters)


def _counter_set(gpu: GpuInfo) -> CounterSet:
    counters: dict[str, str] = {}
    for _, counter, field in _ENGINES:
        value = max(getattr(p, field) for p in gpu.mig_profiles)
        if value:
            counters[counter] = str(value)
    memory = gpu.memory_bytes or max(p.memory_bytes for p in gpu.mig_profiles)
    counters["memory"] = str(memory)
    slices = max(s + p.placement_size for p in gpu.mig_profiles for s in p.placement_starts)
    for i in range(slices):
        counters[f"memory-slice-{i}"] = "1"
    return CounterSet(name=f"gpu-{gpu.minor}-counter-set", counters=counters)


def _mig_counters(placement: MigPlacement, available: Mapping[str, str]) -> dict[str, str]:
    p = placement.profile
    out = {
        counter: str(getattr(p, field))
        for _, counter, field in _ENGINES
        if counter in available and getattr(p, field)
    }
    out["memory"] = str(p.memory_bytes)
    for i in range(placement.start, placement.start + p.placement_size):
        out[f"memory-slice-{i}"] = "1"
    return out


def build_inventory(
    node: NodeGpus,
    root: Path,
    *,
    partitions: bool,
    taints: Mapping[str, Sequence[DeviceTaint]],
    whole_counters: bool = False,
) -> tuple[DeviceInventory, dict[str, Published]]:
    """Devices (and counter sets) for every GPU, and what each device name stands for.

    Args:
        node: what NVML reported.
        root: the sysfs root (NUMA node and PCIe root come from there).
        partitions: publish MIG placements of GPUs in MIG mode.
        taints: GPU UUID -> taints for all of that GPU's devices (health).
        whole_counters: every GPU is a counter set its full device consumes whole.
    """
    pci = {f.bdf: f for f in read_pci_functions(root, vendor=NVIDIA_VENDOR)}
    devices: list[Device] = []
    sets: list[CounterSet] = []
    published: dict[str, Published] = {}
    for gpu in node.gpus:
        common = _common(node, gpu, pci)
        gpu_taints = tuple(taints.get(gpu.uuid, ()))
        capacity = {}
        if gpu.memory_bytes is not None:
            capacity["memory"] = DeviceCapacity(value=str(gpu.memory_bytes))
        split = bool(partitions and gpu.mig_enabled and gpu.mig_profiles)
        consumes: tuple[CounterConsumption, ...] = ()
        cs: CounterSet | None = None
        if split:
            cs = _counter_set(gpu)
            sets.append(cs)
            consumes = (CounterConsumption(counter_set=cs.name, counters=dict(cs.counters)),)
        elif whole_counters:
            whole = _whole_counter_set(gpu)
            sets.append(whole)
            consumes = (CounterConsumption(counter_set=whole.name, counters=dict(whole.counters)),)
        devices.append(
            Device(
                name=gpu.device_name,
                attributes={
                    "type": DeviceAttribute(string="gpu"),
                    "uuid": DeviceAttribute(string=gpu.uuid),
                    **common,
                },
                capacity=capacity,
                consumes_counters=consumes,
                taints=gpu_taints,
            )
        )
        published[gpu.device_name] = Published(gpu)
        if cs is None:
            continue
        for placement in gpu.placements():
            name = mig_device_name(gpu, placement)
            p = placement.profile
            mig_capacity = {
                cap: DeviceCapacity(value=str(getattr(p, field))) for cap, _, field in _ENGINES
            }
            mig_capacity["memory"] = DeviceCapacity(value=str(p.memory_bytes))
            devices.append(
                Device(
                    name=name,
                    attributes={
                        "type": DeviceAttribute(string="mig"),
                        "parentUUID": DeviceAttribute(string=gpu.uuid),
                        "profile": DeviceAttribute(string=p.name),
                        **common,
                    },
                    capacity=mig_capacity,
                    consumes_counters=(
                        CounterConsumption(
                            counter_set=cs.name, counters=_mig_counters(placement, cs.counters)
                        ),
                    ),
                    taints=gpu_taints,
                )
            )
            published[name] = Published(gpu, placement)
    return DeviceInventory(devices=tuple(devices), counter_sets=tuple(sets)), published
