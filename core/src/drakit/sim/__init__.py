"""Simulated hardware: a fake sysfs/procfs tree (plus vendor parts) under a root dir.

Discovery code reads ``<root>/sys`` and ``<root>/proc`` through a configurable sysfs root, the
same code path as on a real node; only the files are simulated. This package is generic: the
machine model (:class:`MachineSpec`), the builder, CPU/bridge parts and the CPU-only profiles.
Vendor hardware lives with its backend (``drakit_nvidia_gpu.sim`` with the fake NVML,
``drakit_amd_gpu.sim``, ``drakit_amd_ainic.sim``) and reaches a spec as :class:`SimPart` s and
device specs; profiles with vendor hardware are registered through the ``drakit.profiles``
entry point group. See ``docs/simulated-hardware.md``.
"""

from __future__ import annotations

from drakit.sim.builder import MACHINE_INFO_PATH, SysfsBuilder, format_cpumask
from drakit.sim.devnodes import (
    CONTROL_STAND_IN,
    DEVICE_STAND_IN,
    make_device_node,
    remove_device_node,
)
from drakit.sim.profiles import (
    BUILTIN_DISTRIBUTION,
    DEFAULT_PROFILE,
    ProfileInfo,
    build_profile,
    fast_tmp,
    get_profile,
    list_profiles,
    materialize,
    profile_info,
    profile_source,
    register_profile,
)
from drakit.sim.provider import simulated_libraries
from drakit.sim.spec import (
    CacheSpec,
    CpuSpec,
    MachineSpec,
    NetDevSpec,
    PciDeviceSpec,
    PciRootSpec,
    RdmaSpec,
    SimPart,
    SimSpecError,
    SriovSpec,
    UnknownProfileError,
)

__all__ = [
    "BUILTIN_DISTRIBUTION",
    "CONTROL_STAND_IN",
    "DEFAULT_PROFILE",
    "DEVICE_STAND_IN",
    "MACHINE_INFO_PATH",
    "CacheSpec",
    "CpuSpec",
    "MachineSpec",
    "NetDevSpec",
    "PciDeviceSpec",
    "PciRootSpec",
    "ProfileInfo",
    "RdmaSpec",
    "SimPart",
    "SimSpecError",
    "SriovSpec",
    "SysfsBuilder",
    "UnknownProfileError",
    "build_profile",
    "fast_tmp",
    "format_cpumask",
    "get_profile",
    "list_profiles",
    "make_device_node",
    "materialize",
    "profile_info",
    "profile_source",
    "register_profile",
    "remove_device_node",
    "simulated_libraries",
]
