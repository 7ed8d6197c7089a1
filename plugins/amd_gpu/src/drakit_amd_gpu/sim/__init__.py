"""Simulated AMD Instinct hardware: GPU parts for :mod:`drakit.sim` specs and the KFD files.

Test and simulation code only: the backend's production modules never import this package
(discovery reads the files these write exactly as it reads a node's sysfs).
"""

from __future__ import annotations

from drakit_amd_gpu.sim.kfd import (
    AMD_GPU_MODELS,
    AmdGpuModel,
    AmdGpuSysfs,
    amd_gpus,
    write_amd_gpus,
)
from drakit_amd_gpu.sim.parts import AMD_GPU_DS, AMD_GPU_US, D_MI300X, mi300x

__all__ = [
    "AMD_GPU_DS",
    "AMD_GPU_MODELS",
    "AMD_GPU_US",
    "D_MI300X",
    "AmdGpuModel",
    "AmdGpuSysfs",
    "amd_gpus",
    "mi300x",
    "write_amd_gpus",
]
