"""AMD Instinct parts for simulated machines: the MI300X function and its module's bridges.

Identities from the sources in ``docs/references.md`` ("Devices", "CPU topology": the
bridges on an MI300X module, ``1002:14a0`` upstream and ``1002:14a1`` downstream). A spec with
these GPUs lists :class:`~drakit_amd_gpu.sim.AmdGpuSysfs` in its parts for the amdgpu/KFD files.
"""

from __future__ import annotations

from drakit.sim import PciDeviceSpec

__all__ = ["AMD_GPU_DS", "AMD_GPU_US", "CLASS_ACCEL", "D_MI300X", "V_AMD_GPU", "mi300x"]

V_AMD_GPU = 0x1002
D_MI300X = 0x74A1
CLASS_ACCEL = 0x120000
AMD_GPU_US, AMD_GPU_DS = (V_AMD_GPU, 0x14A0), (V_AMD_GPU, 0x14A1)
"""(vendor, device) of the switch upstream and downstream ports on an AMD GPU module."""


def mi300x(address: str, index: int) -> PciDeviceSpec:
    """An MI300X bound to ``amdgpu`` in SPX/NPS1 (``label`` ``GPU<index>``)."""
    return PciDeviceSpec(
        address=address,
        vendor=V_AMD_GPU,
        device=D_MI300X,
        class_code=CLASS_ACCEL,
        driver="amdgpu",
        extra_files={"current_compute_partition": "SPX", "current_memory_partition": "NPS1"},
        label=f"GPU{index}",
    )
