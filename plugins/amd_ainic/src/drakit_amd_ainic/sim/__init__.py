"""Simulated AMD AINIC hardware: Pollara parts for :mod:`drakit.sim` specs, the SR-IOV kernel.

Test and simulation code only: the backend's production modules never import this package.
:class:`SriovKernel` plays the kernel's reaction to ``sriov_numvfs`` writes beside a built
tree (:func:`sriov_kernel`, a ``drakit.sim_behaviours`` entry point, runs it wherever drakit
uses a simulated root); :func:`set_link` / :func:`set_rdma_port` flip what health reads;
:class:`TreeNetlink` (registered as a ``drakit.sim_libraries`` entry point) is the netlink the
backend gets on a simulated root, and :func:`vf_settings` reads what it recorded.
"""

from __future__ import annotations

from drakit_amd_ainic.sim.kernel import (
    NETLINK_DIR,
    SriovKernel,
    ainic_machine,
    set_link,
    set_rdma_port,
    sriov_kernel,
    vf_settings,
)
from drakit_amd_ainic.sim.netlink import TreeNetlink, simulated_libraries
from drakit_amd_ainic.sim.parts import D_IONIC_PF, D_IONIC_VF, POLLARA_FW, pollara

__all__ = [
    "D_IONIC_PF",
    "D_IONIC_VF",
    "NETLINK_DIR",
    "POLLARA_FW",
    "SriovKernel",
    "TreeNetlink",
    "ainic_machine",
    "pollara",
    "set_link",
    "set_rdma_port",
    "simulated_libraries",
    "sriov_kernel",
    "vf_settings",
]
