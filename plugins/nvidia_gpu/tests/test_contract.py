"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from typing import Any, ClassVar

from drakit.sim import get_profile
from drakit.testing import BackendContract
from drakit_nvidia_gpu.sim import with_mig_enabled

GPU_CONFIG = "gpu.nvidia.drakit.io/v1alpha1"


class TestNvidiaGpuContract(BackendContract):
    plugin = "nvidia_gpu"
    profile = "dgx-h100"
    config: ClassVar[dict[str, Any]] = {"health_watch": False}
    bad_configs = ({"apiVersion": GPU_CONFIG, "kind": "GpuConfig", "sharing": {"strategy": 7}},)


class TestNvidiaGpuMigContract(BackendContract):
    """GPU 0 in MIG mode: its MIG slices are partitions of it (one counter set, one PCI function),
    which the contract's partition check allocates against the whole GPU."""

    plugin = "nvidia_gpu"
    profile = with_mig_enabled(get_profile("dgx-h100"), {0})
    config: ClassVar[dict[str, Any]] = {"health_watch": False}
