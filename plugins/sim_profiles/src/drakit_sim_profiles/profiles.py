"""The reference GPU/NIC machines, from the backends' parts and core's platform parts.

Layouts from the sources in ``docs/references.md`` (the HGX baseboard; the MI300X platform
table); the devices from each backend's simulator module. Every factory is a ``drakit.profiles``
entry point of this distribution, named as its spec.
"""

from __future__ import annotations

from collections.abc import Callable

from drakit.sim import CpuSpec, MachineSpec, NetDevSpec, PciDeviceSpec, PciRootSpec, RdmaSpec
from drakit.sim.platform import PEX890XX, RP_GENOA, RP_SPR, genoa_cpu, pci_tree, spr_cpu
from drakit_amd_ainic.sim import pollara
from drakit_amd_gpu.sim import AMD_GPU_DS, AMD_GPU_US, AmdGpuSysfs, mi300x
from drakit_nvidia_gpu.sim import (
    D_H100_SXM,
    D_H200_SXM,
    hopper_nvml,
    nvidia_gpu,
    with_mig_enabled,
)

__all__ = [
    "PROFILES",
    "connectx7",
    "dgx_h100",
    "h200_8gpu_8ainic",
    "h200_8gpu_8ainic_dense",
    "h200_8gpu_8ainic_sriov",
    "mi300x_8gpu_8ainic",
    "mi300x_8gpu_8ainic_16vf",
]

V_MELLANOX, D_CONNECTX7 = 0x15B3, 0x1021
CLASS_INFINIBAND = 0x020700


def connectx7(address: str, bus: int, rdma_name: str) -> PciDeviceSpec:
    """A Mellanox ConnectX-7 InfiniBand port (``mlx5_core``; no drakit backend claims it)."""
    guid = f"94:6d:ae:03:00:{bus:02x}:00:01"
    return PciDeviceSpec(
        address=address,
        vendor=V_MELLANOX,
        device=D_CONNECTX7,
        class_code=CLASS_INFINIBAND,
        driver="mlx5_core",
        netdevs=(
            NetDevSpec(
                name=f"ibp{bus}s0",
                mac=f"00:00:10:49:fe:80:00:00:00:00:00:00:{guid}",
                mtu=4092,
                speed_mbps=400_000,
                link_type="infiniband",
            ),
        ),
        rdma=(RdmaSpec(name=rdma_name, link_layer="InfiniBand"),),
        label=rdma_name,
    )


# HGX baseboard layout shared by the DGX H100 and H200 profiles: one root bus per GPU/NIC
# pair; root port R:01.0 -> switch upstream R+1:00.0 -> downstream R+2:00.0 -> NIC at R+3, and
# downstream R+2:01.0 -> a second switch (R+4 up, R+5 down) -> GPU at R+6. NIC buses are the
# DGX H100 user guide's (ibp24s0 = bus 0x18 ...); GPU buses are NIC + 3 (cpu.md 4.3).
_HGX_NIC_BUSES = (0x18, 0x40, 0x4F, 0x5E, 0x9A, 0xC0, 0xCE, 0xDC)
_DGX_RDMA_NAMES = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


def _hgx_roots(
    gpu_device: int, nic: Callable[[int, str, int], PciDeviceSpec]
) -> tuple[PciRootSpec, ...]:
    roots = []
    for i, nic_bus in enumerate(_HGX_NIC_BUSES):
        r = nic_bus - 3
        rp, us, ds0, ds1 = (
            f"{r:02x}:01.0",
            f"{r + 1:02x}:00.0",
            f"{r + 2:02x}:00.0",
            f"{r + 2:02x}:01.0",
        )
        us2, ds2 = f"{r + 4:02x}:00.0", f"{r + 5:02x}:00.0"
        leaves = [
            ([rp, us, ds0], nic(i, f"0000:{nic_bus:02x}:00.0", nic_bus)),
            ([rp, us, ds1, us2, ds2], nvidia_gpu(f"0000:{r + 6:02x}:00.0", gpu_device, i)),
        ]
        roots.append(
            PciRootSpec(
                bus=r,
                numa_node=i // 4,
                children=pci_tree(0, leaves, (RP_SPR, PEX890XX, PEX890XX, PEX890XX, PEX890XX)),
            )
        )
    return tuple(roots)


def _hgx_gpu_bdfs() -> list[str]:
    return [f"0000:{b + 3:02x}:00.0" for b in _HGX_NIC_BUSES]


# MI300X platform (cpu.md 4.4, AMD doc table): per GPU the bridge path to GPU and to its NIC.
_MI300X_ROWS: tuple[tuple[str, str], ...] = (
    ("00:01.1/01:00.0/02:00.0/03:00.0/04:00.0/05:00.0", "00:01.1/01:00.0/02:01.0/09:00.0"),
    ("18:01.1/19:00.0/1a:04.0/29:00.0/2a:00.0/2b:00.0", "18:01.1/19:00.0/1a:03.0/23:00.0"),
    ("48:01.1/49:00.0/4a:04.0/59:00.0/5a:00.0/5b:00.0", "48:01.1/49:00.0/4a:03.0/53:00.0"),
    ("60:01.1/61:00.0/62:00.0/63:00.0/64:00.0/65:00.0", "60:01.1/61:00.0/62:01.0/69:00.0"),
    ("78:01.1/79:00.0/7a:00.0/7b:00.0/7c:00.0/7d:00.0", "78:01.1/79:00.0/7a:05.0/8f:00.0"),
    ("98:01.1/99:00.0/9a:03.0/a3:00.0/a4:00.0/a5:00.0", "98:01.1/99:00.0/9a:01.0/9c:00.0"),
    ("c8:01.1/c9:00.0/ca:03.0/d3:00.0/d4:00.0/d5:00.0", "c8:01.1/c9:00.0/ca:02.0/cd:00.0"),
    ("e0:01.1/e1:00.0/e2:02.0/e5:00.0/e6:00.0/e7:00.0", "e0:01.1/e1:00.0/e2:04.0/f1:00.0"),
)


def _mi300x_roots(vfs: int = 0, total_vfs: int = 8) -> tuple[PciRootSpec, ...]:
    roots = []
    for i, (gpu_path, nic_path) in enumerate(_MI300X_ROWS):
        gpu_parts, nic_parts = gpu_path.split("/"), nic_path.split("/")
        nic_bus = int(nic_parts[-1][:2], 16)
        leaves = [
            (gpu_parts[:-1], mi300x(f"0000:{gpu_parts[-1]}", i)),
            (
                nic_parts[:-1],
                pollara(f"0000:{nic_parts[-1]}", nic_bus, i, sriov_vfs=vfs, total_vfs=total_vfs),
            ),
        ]
        bridges = (RP_GENOA, PEX890XX, PEX890XX, AMD_GPU_US, AMD_GPU_DS)
        roots.append(
            PciRootSpec(
                bus=int(gpu_parts[0][:2], 16),
                numa_node=i // 4,
                children=pci_tree(0, leaves, bridges),
            )
        )
    return tuple(roots)


def _mi300x_cpu() -> CpuSpec:
    """The MI300X box's CPUs: 2x EPYC 9474F, NPS1."""
    return genoa_cpu(
        "AMD EPYC 9474F 48-Core Processor", 48, 6, nps=1, mem_node_gib=1536, mhz=3600.0
    )


def mi300x_8gpu_8ainic() -> MachineSpec:
    """8x MI300X + 8x Pollara 400 (each NIC under its GPU's switch), 2x EPYC 9474F."""
    return MachineSpec(
        name="mi300x-8gpu-8ainic",
        description=(
            "8x AMD Instinct MI300X + 8x AMD Pollara 400 AINIC (each NIC under its GPU's switch, "
            "one root per pair), 2x EPYC 9474F"
        ),
        cpu=_mi300x_cpu(),
        pci_roots=_mi300x_roots(),
        parts=(AmdGpuSysfs(),),
    )


def mi300x_8gpu_8ainic_16vf() -> MachineSpec:
    """The MI300X box with 16 VFs on every AINIC, bound to ionic."""
    return MachineSpec(
        name="mi300x-8gpu-8ainic-16vf",
        description=(
            "8x AMD Instinct MI300X + 8x AMD Pollara 400 AINIC with 16 VFs each bound to ionic "
            "(queues, RDMA devices), 2x EPYC 9474F"
        ),
        cpu=_mi300x_cpu(),
        pci_roots=_mi300x_roots(vfs=16, total_vfs=16),
        parts=(AmdGpuSysfs(),),
    )


def dgx_h100() -> MachineSpec:
    """NVIDIA DGX H100: 8x H100 SXM5 80GB + 8x ConnectX-7 InfiniBand, 2x Xeon 8480C."""
    gpus = [(bdf, "NVIDIA H100 80GB HBM3", 81559, 80) for bdf in _hgx_gpu_bdfs()]
    return MachineSpec(
        name="dgx-h100",
        description=(
            "NVIDIA DGX H100: 8x H100 SXM5 80GB + 8x ConnectX-7 InfiniBand (NIC and GPU share a "
            "switch), 2x Xeon 8480C"
        ),
        cpu=spr_cpu("Intel(R) Xeon(R) Platinum 8480C", snc=1, mem_node_gib=1024),
        pci_roots=_hgx_roots(
            D_H100_SXM, lambda i, bdf, bus: connectx7(bdf, bus, _DGX_RDMA_NAMES[i])
        ),
        parts=(hopper_nvml("dgx-h100", gpus),),
    )


def _h200_ainic(name: str, vfs: int, total_vfs: int = 8) -> MachineSpec:
    gpus = [(bdf, "NVIDIA H200", 143771, 141) for bdf in _hgx_gpu_bdfs()]
    sriov = f", {vfs} VFs per AINIC bound to ionic" if vfs else ""
    return MachineSpec(
        name=name,
        description=(
            "8x NVIDIA H200 + 8x AMD Pollara 400 AINIC (each NIC under its GPU's switch)"
            f"{sriov}, 2x Xeon 8480+"
        ),
        cpu=spr_cpu("Intel(R) Xeon(R) Platinum 8480+", snc=1, mem_node_gib=1024),
        pci_roots=_hgx_roots(
            D_H200_SXM,
            lambda i, bdf, bus: pollara(bdf, bus, i, sriov_vfs=vfs, total_vfs=max(total_vfs, vfs)),
        ),
        parts=(hopper_nvml(name, gpus),),
    )


def h200_8gpu_8ainic() -> MachineSpec:
    """8x H200 + 8x Pollara 400 AINIC (each NIC under its GPU's switch), 2x Xeon 8480+."""
    return _h200_ainic("h200-8gpu-8ainic", 0)


def h200_8gpu_8ainic_dense(vfs_per_nic: int = 255) -> MachineSpec:
    """The H200 box at its densest: MIG mode on all 8 GPUs, ``vfs_per_nic`` VFs on every AINIC.

    With ``nvidia_gpu.mig_partitions`` every MIG placement of every GPU is a device, and with
    ``amd_ainic.default_mode: vf`` every VF: 2,040 by default, the most that fit (the VFs share
    their PF's bus, 256 functions with the PF's own). Not registered as a profile (its
    tree is large, and every profile is built by several tests): ``benchmarks/density.py`` builds
    it to size the node DaemonSet's resources.
    """
    return with_mig_enabled(
        _h200_ainic(f"h200-8gpu-8ainic-dense-{vfs_per_nic}vf", vfs_per_nic, vfs_per_nic), range(8)
    )


def h200_8gpu_8ainic_sriov() -> MachineSpec:
    """The H200 box with 4 VFs on every AINIC, bound to ionic."""
    return _h200_ainic("h200-8gpu-8ainic-sriov", 4)


PROFILES: dict[str, Callable[[], MachineSpec]] = {
    "dgx-h100": dgx_h100,
    "h200-8gpu-8ainic": h200_8gpu_8ainic,
    "h200-8gpu-8ainic-sriov": h200_8gpu_8ainic_sriov,
    "mi300x-8gpu-8ainic": mi300x_8gpu_8ainic,
    "mi300x-8gpu-8ainic-16vf": mi300x_8gpu_8ainic_16vf,
}
"""What this distribution registers (the ``drakit.profiles`` entry points), by name."""
