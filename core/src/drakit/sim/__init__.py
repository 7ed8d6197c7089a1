"""Simulated hardware: a fake sysfs/procfs tree (and a fake NVML description) under a root dir.

Discovery code reads ``<root>/sys`` and ``<root>/proc`` through a configurable sysfs root, the
same code path as on a real node; only the files are simulated. See
``docs/simulated-hardware.md`` for the profiles and the fake NVML contract.
"""

from __future__ import annotations

from drakit.sim.builder import MACHINE_INFO_PATH, SysfsBuilder, format_cpumask
from drakit.sim.nvml import (
    NVML_DESCRIPTION_PATH,
    FakeNvml,
    NvmlDescription,
    NvmlGpu,
    gpu_uuid,
    inject_gpu_lost,
    inject_xid,
    load_nvml_description,
    mig_instances,
    recover_gpu,
    vendor_libraries,
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
    "FakeNvml",
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
    "inject_gpu_lost",
    "inject_xid",
    "list_profiles",
    "load_nvml_description",
    "materialize",
    "mig_instances",
    "profile_info",
    "recover_gpu",
    "register_profile",
    "vendor_libraries",
]
