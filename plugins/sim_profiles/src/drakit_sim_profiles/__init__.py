"""drakit's reference simulated machines: GPUs and NICs of several vendors in one box.

Backends never import each other, and core knows no vendor, so the machines that combine
NVIDIA or AMD GPUs with AMD AINICs or Mellanox ConnectX-7 NICs live in this small distribution,
which depends on the backends whose parts it uses and registers every machine in the
``drakit.profiles`` entry point group (see ``docs/simulated-hardware.md``). It is simulation
only: the node image does not ship it.
"""

from __future__ import annotations

from drakit_sim_profiles.profiles import (
    PROFILES,
    connectx7,
    dgx_h100,
    h200_8gpu_8ainic,
    h200_8gpu_8ainic_sriov,
    mi300x_8gpu_8ainic,
    mi300x_8gpu_8ainic_16vf,
)

__all__ = [
    "PROFILES",
    "connectx7",
    "dgx_h100",
    "h200_8gpu_8ainic",
    "h200_8gpu_8ainic_sriov",
    "mi300x_8gpu_8ainic",
    "mi300x_8gpu_8ainic_16vf",
]
