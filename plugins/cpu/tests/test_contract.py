"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from drakit.testing import BackendContract

CPU_CONFIG = "cpu.drakit.io/v1alpha1"


class TestCpuContract(BackendContract):
    plugin = "cpu"
    profile = "minimal-1s"
    bad_configs = (
        {"apiVersion": CPU_CONFIG, "kind": "CpuConfig", "policy": "everywhere"},
        {"apiVersion": CPU_CONFIG, "kind": "CpuConfig", "no_such_field": 1},
    )
