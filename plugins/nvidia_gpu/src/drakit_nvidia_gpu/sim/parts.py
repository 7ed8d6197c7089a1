"""NVIDIA parts for simulated machines: a GPU's PCI function and its fake NVML description.

Identities from the sources in ``docs/references.md`` (H100 SXM5 ``10de:2330``, H200 SXM
``10de:2335``); NVML facts (driver 580.126.20, CUDA 13.0, the Hopper MIG profiles) as listed in
``docs/simulated-hardware.md``. Profiles that combine these with other vendors' parts live in
``drakit-sim-profiles``.
"""

from __future__ import annotations

from collections.abc import Sequence

from drakit.sim import PciDeviceSpec
from drakit_nvidia_gpu.sim.fakenvml import NvmlDescription, NvmlGpu, gpu_uuid, hopper_mig_profiles

__all__ = ["CLASS_3D", "D_H100_SXM", "D_H200_SXM", "V_NVIDIA", "hopper_nvml", "nvidia_gpu"]

V_NVIDIA = 0x10DE
D_H100_SXM, D_H200_SXM = 0x2330, 0x2335
CLASS_3D = 0x030200
_MIB = 1024 * 1024


def nvidia_gpu(address: str, device: int, index: int) -> PciDeviceSpec:
    """An NVIDIA data-centre GPU function bound to ``nvidia`` (``label`` ``GPU<index>``)."""
    return PciDeviceSpec(
        address=address,
        vendor=V_NVIDIA,
        device=device,
        class_code=CLASS_3D,
        revision=0xA1,
        driver="nvidia",
        label=f"GPU{index}",
    )


def hopper_nvml(profile: str, gpus: Sequence[tuple[str, str, int, int]]) -> NvmlDescription:
    """NVML view of Hopper GPUs given as ``(bdf, name, memory_mib, marketed_gb)``, by index.

    UUIDs derive from ``<profile>/<bdf>``, so every build of a profile has the same ones.
    """
    return NvmlDescription(
        driver_version="580.126.20",
        cuda_driver_version=13000,
        devices=tuple(
            NvmlGpu(
                index=i,
                minor_number=i,
                uuid=gpu_uuid(f"{profile}/{bdf}"),
                name=name,
                brand="Nvidia",
                architecture="Hopper",
                cuda_compute_capability=(9, 0),
                pci_bus_id=bdf,
                memory_total_bytes=memory_mib * _MIB,
                serial=f"16549230{i:05d}",
                mig_capable=True,
                mig_enabled=False,
                module_id=i + 1,
                mig_profiles=hopper_mig_profiles(memory_mib, gb),
            )
            for i, (bdf, name, memory_mib, gb) in enumerate(gpus)
        ),
    )
