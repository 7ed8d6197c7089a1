"""drakit's own backends under the contract suite a vendor runs (:class:`BackendContract`).

Each backend on a profile where it finds its hardware; the composite backend with the two
backends it pairs. ``test_contract_fails`` proves the suite cannot pass vacuously.
"""

from __future__ import annotations

from typing import Any, ClassVar

from drakit.testing import BackendContract

CPU_CONFIG = "cpu.drakit.io/v1alpha1"
GPU_CONFIG = "gpu.nvidia.drakit.io/v1alpha1"


class TestCpuContract(BackendContract):
    plugin = "cpu"
    profile = "minimal-1s"
    bad_configs = (
        {"apiVersion": CPU_CONFIG, "kind": "CpuConfig", "policy": "everywhere"},
        {"apiVersion": CPU_CONFIG, "kind": "CpuConfig", "no_such_field": 1},
    )


class TestNvidiaGpuContract(BackendContract):
    plugin = "nvidia_gpu"
    profile = "dgx-h100"
    config: ClassVar[dict[str, Any]] = {"health_watch": False}


class TestAmdAinicContract(BackendContract):
    plugin = "amd_ainic"
    profile = "h200-8gpu-8ainic"


class TestAmdGpuContract(BackendContract):
    plugin = "amd_gpu"
    profile = "mi300x-8gpu-8ainic"


class TestCompositeContract(BackendContract):
    plugin = "composite"
    profile = "h200-8gpu-8ainic"
    other_plugins: ClassVar[dict[str, dict[str, Any]]] = {
        "nvidia_gpu": {"health_watch": False},
        "amd_ainic": {},
    }
