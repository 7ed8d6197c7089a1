"""Simulated NVIDIA hardware: GPU parts for :mod:`drakit.sim` machine specs and the fake NVML.

Test and simulation code only: the backend's production modules never import this package.
The backend gets the fake NVML through the simulated runtime, which calls
:func:`simulated_libraries` (registered in the ``drakit.sim_libraries`` entry point group) for a
simulated root and passes the result as ``PluginContext.libraries["pynvml"]``. A spec carries
its GPUs' NVML view as a part (an :class:`NvmlDescription` in ``MachineSpec.parts``), written
to ``<root>/drakit-sim/nvml.json``; see ``docs/simulated-hardware.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from drakit.sim import MachineSpec
from drakit_nvidia_gpu.sim.fakenvml import (
    EVENTS_PATH,
    MEMORY_SLICES,
    NVML_DESCRIPTION_PATH,
    STATE_PATH,
    FakeNvml,
    MigProfile,
    NvmlDescription,
    NvmlGpu,
    gpu_uuid,
    hopper_mig_profiles,
    inject_gpu_lost,
    inject_nvml_fault,
    inject_xid,
    load_nvml_description,
    mig_device_uuid,
    mig_instances,
    recover_gpu,
    simulated_libraries,
    write_driver_files,
)
from drakit_nvidia_gpu.sim.parts import D_H100_SXM, D_H200_SXM, hopper_nvml, nvidia_gpu

__all__ = [
    "D_H100_SXM",
    "D_H200_SXM",
    "EVENTS_PATH",
    "MEMORY_SLICES",
    "NVML_DESCRIPTION_PATH",
    "STATE_PATH",
    "FakeNvml",
    "MigProfile",
    "NvmlDescription",
    "NvmlGpu",
    "gpu_uuid",
    "hopper_mig_profiles",
    "hopper_nvml",
    "inject_gpu_lost",
    "inject_nvml_fault",
    "inject_xid",
    "load_nvml_description",
    "mig_device_uuid",
    "mig_instances",
    "nvidia_gpu",
    "nvml_of",
    "recover_gpu",
    "simulated_libraries",
    "with_mig_enabled",
    "with_nvml",
    "write_driver_files",
]


def nvml_of(spec: MachineSpec) -> NvmlDescription | None:
    """The spec's fake NVML description (its :class:`NvmlDescription` part), if it has one."""
    return next((p for p in spec.parts if isinstance(p, NvmlDescription)), None)


def with_nvml(spec: MachineSpec, nvml: NvmlDescription) -> MachineSpec:
    """``spec`` with its NVML description replaced by (or extended with) ``nvml``."""
    parts = [p for p in spec.parts if not isinstance(p, NvmlDescription)]
    return dataclasses.replace(spec, parts=(*parts, nvml))


def with_mig_enabled(spec: MachineSpec, gpus: Collection[int]) -> MachineSpec:
    """``spec`` with MIG mode on for the GPUs of those NVML indices (off for the others).

    Raises:
        ValueError: the spec has no NVML description (no NVIDIA GPUs).
    """
    nvml = nvml_of(spec)
    if nvml is None:
        raise ValueError(f"profile {spec.name!r} has no NVIDIA GPUs (no NVML description)")
    devices = tuple(g.model_copy(update={"mig_enabled": g.index in gpus}) for g in nvml.devices)
    return with_nvml(spec, nvml.model_copy(update={"devices": devices}))
