"""Simulated hardware: a fake sysfs/procfs tree (and a fake NVML description) under a root dir.

Discovery code reads ``<root>/sys`` and ``<root>/proc`` through a configurable sysfs root, the
same code path as on a real node; only the files are simulated. See
``docs/simulated-hardware.md`` for the profiles and the fake NVML contract.
"""

from __future__ import annotations

from drakit.sim.builder import MACHINE_INFO_PATH, SysfsBuilder, format_cpumask
from drakit.sim.nvml import (
    NVML_DESCRIPTION_PATH,
    NvmlDescription,
    NvmlGpu,
    gpu_uuid,
    load_nvml_description,
)
from drakit.sim.profiles import (
    DEFAULT_PROFILE,
    ProfileInfo,
    build_profile,
    fast_tmp,
    get_profile,
    list_profiles,
    materialize,
    profile_info,
    register_profile,
)
from drakit.sim.spec import (
    CacheSpec,
    CpuSpec,
    MachineSpec,
    NetDevSpec,
    PciDeviceSpec,
    PciRootSpec,
    RdmaSpec,
    SimSpecError,
    SriovSpec,
    UnknownProfileError,
)

__all__ = [
    "DEFAULT_PROFILE",
    "MACHINE_INFO_PATH",
    "NVML_DESCRIPTION_PATH",
    "CacheSpec",
    "CpuSpec",
    "MachineSpec",
    "NetDevSpec",
    "NvmlDescription",
    "NvmlGpu",
    "PciDeviceSpec",
    "PciRootSpec",
    "ProfileInfo",
    "RdmaSpec",
    "SimSpecError",
    "SriovSpec",
    "SysfsBuilder",
    "UnknownProfileError",
    "build_profile",
    "fast_tmp",
    "format_cpumask",
    "get_profile",
    "gpu_uuid",
    "list_profiles",
    "load_nvml_description",
    "materialize",
    "profile_info",
    "register_profile",
]
