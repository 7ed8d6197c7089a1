"""AMD Pensando Pollara 400 AINIC parts for simulated machines.

Identities from the sources in ``docs/references.md`` (``1dd8:1002`` PF, ``1dd8:1003`` VF, subsystem
``1dd8:5201``); the firmware version is a simulation choice listed in
``docs/simulated-hardware.md``.
"""

from __future__ import annotations

from drakit.sim import NetDevSpec, PciDeviceSpec, RdmaSpec, SriovSpec

__all__ = [
    "CLASS_ETHERNET",
    "D_IONIC_PF",
    "D_IONIC_VF",
    "POLLARA_FW",
    "SUBSYS_POLLARA_400",
    "V_PENSANDO",
    "pollara",
]

V_PENSANDO = 0x1DD8
D_IONIC_PF, D_IONIC_VF, SUBSYS_POLLARA_400 = 0x1002, 0x1003, 0x5201
CLASS_ETHERNET = 0x020000

POLLARA_FW = "1.117.1-a-63"
"""Firmware version the simulated AINICs report (a simulation choice, see the docs)."""


def pollara(
    address: str, bus: int, index: int, sriov_vfs: int, total_vfs: int = 8
) -> PciDeviceSpec:
    """A Pollara 400 PF bound to ``ionic``: netdev ``enp<bus>s0``, RDMA ``ionic_<index>``.

    ``sriov_vfs`` VFs exist (bound to ``ionic``, with queues and RDMA devices) out of
    ``total_vfs``.
    """
    ifname = f"enp{bus}s0"
    return PciDeviceSpec(
        address=address,
        vendor=V_PENSANDO,
        device=D_IONIC_PF,
        class_code=CLASS_ETHERNET,
        subsystem_device=SUBSYS_POLLARA_400,
        driver="ionic",
        netdevs=(
            NetDevSpec(
                name=ifname,
                mac=f"00:ae:cd:00:{index:02x}:00",
                mtu=9000,
                speed_mbps=400_000,
                queues=16,
            ),
        ),
        rdma=(
            RdmaSpec(
                name=f"ionic_{index}", link_layer="Ethernet", netdev=ifname, fw_ver=POLLARA_FW
            ),
        ),
        sriov=SriovSpec(
            total_vfs=total_vfs,
            num_vfs=sriov_vfs,
            vf_device=D_IONIC_VF,
            vf_driver="ionic",
            vf_queues=4,
            vf_rdma=True,
        ),
        label=f"AINIC{index}",
    )
