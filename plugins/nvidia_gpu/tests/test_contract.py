"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from typing import Any, ClassVar

from drakit.testing import BackendContract

GPU_CONFIG = "gpu.nvidia.drakit.io/v1alpha1"


class TestNvidiaGpuContract(BackendContract):
    plugin = "nvidia_gpu"
    profile = "dgx-h100"
    config: ClassVar[dict[str, Any]] = {"health_watch": False}
    bad_configs = ({"apiVersion": GPU_CONFIG, "kind": "GpuConfig", "sharing": {"strategy": 7}},)
