"""drakit's contract suite (:class:`drakit.testing.BackendContract`) run against this backend."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar

from drakit.sim import get_profile
from drakit.testing import BackendContract, SimNode
from drakit_amd_ainic.sim import SriovKernel

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
    """Shared NICs: allocated with a shareID and consumed capacity, prepared on demand as VFs."""

    plugin = "amd_ainic"
    profile = PROFILE
    config: ClassVar[dict[str, Any]] = {"default_mode": "shared", "vf_limit": 2}

    @classmethod
    def simulation(cls, node: SimNode) -> AbstractContextManager[object]:
        # the simulated kernel creates the VFs a shared prepare asks for
        return SriovKernel(get_profile(PROFILE), node.root)
