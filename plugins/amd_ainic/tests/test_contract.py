"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from typing import Any, ClassVar

from drakit.testing import BackendContract

PROFILE = "h200-8gpu-8ainic"
NIC_CONFIG = "ainic.drakit.io/v1alpha1"


class TestAmdAinicContract(BackendContract):
    plugin = "amd_ainic"
    profile = PROFILE
    bad_configs = (
        {"apiVersion": NIC_CONFIG, "kind": "NicConfig", "queues": 0},
        {"apiVersion": NIC_CONFIG, "kind": "NicConfig", "rdma": {"enabled": "sometimes"}},
    )


class TestAmdAinicSharedContract(BackendContract):
    """Shared NICs: allocated with a shareID and consumed capacity, prepared on demand as VFs.

    The kit runs the simulated SR-IOV kernel that makes the VFs (the ``drakit.sim_behaviours``
    entry point), as ``drakit node --profile`` and ``drakit demo`` do: nothing to start here.
    """

    plugin = "amd_ainic"
    profile = PROFILE
    config: ClassVar[dict[str, Any]] = {"default_mode": "shared", "vf_limit": 2}
