"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from drakit.testing import BackendContract


class TestAmdGpuContract(BackendContract):
    plugin = "amd_gpu"
    profile = "mi300x-8gpu-8ainic"
