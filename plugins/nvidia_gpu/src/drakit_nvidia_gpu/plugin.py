"""drakit backend for NVIDIA GPUs: one device per GPU, with NVIDIA's attribute names."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.hookspecs import hookimpl
from drakit.models import (
    CdiEdits,
    ClaimInfo,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
)
from drakit.sim.nvml import NvmlGpu
from drakit.sysfs import read_pci_functions, standard_pci_attributes
from drakit_nvidia_gpu.discovery import read_nvml

__all__ = ["NvidiaGpuPlugin", "NvidiaGpuSettings"]


class NvidiaGpuSettings(PluginSettings):
    """``plugins.nvidia_gpu``."""

    nvml: Literal["auto", "sim", "nvml"] = "auto"


class NvidiaGpuPlugin:
    """Publishes each NVIDIA GPU as a device ``gpu-<index>``."""

    settings_model: ClassVar[type[PluginSettings]] = NvidiaGpuSettings
    default_driver: ClassVar[str] = "gpu.nvidia.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.settings = context.settings_as(NvidiaGpuSettings)
        self._gpus: dict[str, NvmlGpu] = {}

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """GPUs from NVML, placed with sysfs (NUMA node, PCIe root)."""
        root = Path(node.sysfs_root)
        desc = read_nvml(root, self.settings.nvml)
        if desc is None:
            return None
        pci = {f.bdf: f for f in read_pci_functions(root, vendor=0x10DE)}
        major, minor = divmod(desc.cuda_driver_version, 1000)
        devices = []
        self._gpus = {f"gpu-{g.index}": g for g in desc.devices}
        for gpu in desc.devices:
            attrs: dict[str, DeviceAttribute | int | str | bool] = {
                "type": "gpu",
                "uuid": gpu.uuid,
                "index": gpu.index,
                "minor": gpu.minor_number,
                "productName": gpu.name,
                "brand": gpu.brand,
                "architecture": gpu.architecture,
                "cudaComputeCapability": DeviceAttribute(
                    version="{}.{}.0".format(*gpu.cuda_compute_capability)
                ),
                "driverVersion": DeviceAttribute(version=desc.driver_version),
                "cudaDriverVersion": DeviceAttribute(version=f"{major}.{minor // 10}.0"),
                "migCapable": gpu.mig_capable,
            }
            fn = pci.get(gpu.pci_bus_id)
            if fn is not None:
                attrs.update(standard_pci_attributes(fn))
            devices.append(
                Device(
                    name=f"gpu-{gpu.index}",
                    attributes={k: DeviceAttribute.model_validate(v) for k, v in attrs.items()},
                    capacity={"memory": DeviceCapacity(value=str(gpu.memory_total_bytes))},
                )
            )
        return DeviceInventory(devices=tuple(devices))

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        """Expose each allocated GPU's device node and UUID to the container."""
        out = []
        for dev in claim.devices:
            gpu = self._gpus.get(dev.device)
            if gpu is None:
                raise PermanentError(
                    f"request {dev.request!r}: device {dev.device!r} is not a GPU on this node "
                    f"(known: {', '.join(sorted(self._gpus)) or 'none'})"
                )
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(
                        env=(f"DRAKIT_NVIDIA_GPU_{gpu.index}={gpu.uuid}",),
                        device_nodes=({"path": f"/dev/nvidia{gpu.minor_number}"},),
                    ),
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: list[PreparedDevice]) -> bool:
        """Nothing to undo: prepare has no side effects outside the CDI spec."""
        return True
