"""Named simulated-hardware profiles and the functions that build them.

Every profile is a :class:`~drakit.sim.spec.MachineSpec` made from facts in
``shared/reference/cpu.md`` (sections 3 and 4) and ``shared/reference/devices.md``; values the
references mark UNCONFIRMED, and values that are pure simulation choices, are listed in
``docs/simulated-hardware.md``.

Example::

    from drakit.sim import materialize

    with materialize("dgx-h100") as root:
        discover(sysfs_root=root / "sys")
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from drakit.sim.builder import SysfsBuilder
from drakit.sim.nvml import NvmlDescription, NvmlGpu, gpu_uuid, hopper_mig_profiles
from drakit.sim.spec import (
    CacheSpec,
    CpuSpec,
    MachineSpec,
    NetDevSpec,
    PciDeviceSpec,
    PciRootSpec,
    RdmaSpec,
    SriovSpec,
    UnknownProfileError,
)

__all__ = [
    "DEFAULT_PROFILE",
    "ProfileInfo",
    "build_profile",
    "get_profile",
    "list_profiles",
    "materialize",
    "profile_info",
    "register_profile",
]

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "h200-8gpu-8ainic"
"""The profile demos use when none is named."""

GIB_KIB = 1024 * 1024
MIB = 1024 * 1024

# -- PCI identities (cpu.md 4.5, devices.md 1.1) -----------------------------------------------

CLASS_BRIDGE = 0x060400
CLASS_3D = 0x030200
CLASS_ACCEL = 0x120000
CLASS_ETHERNET = 0x020000
CLASS_INFINIBAND = 0x020700
_GPU_BASE_CLASSES = (0x03, 0x12)  # display controller, processing accelerator
_NET_BASE_CLASS = 0x02

V_NVIDIA, V_AMD_GPU, V_AMD, V_INTEL = 0x10DE, 0x1002, 0x1022, 0x8086
V_MELLANOX, V_PENSANDO, V_BROADCOM = 0x15B3, 0x1DD8, 0x1000

D_H100_SXM, D_H200_SXM = 0x2330, 0x2335
D_MI300X = 0x74A1
D_CONNECTX7 = 0x1021
D_IONIC_PF, D_IONIC_VF, SUBSYS_POLLARA_400 = 0x1002, 0x1003, 0x5201

# Bridges: (vendor, device) for root ports and switch ports, by platform.
RP_GENOA = (V_AMD, 0x14AB)  # Genoa/Bergamo GPP bridge (root port)
RP_SPR = (V_INTEL, 0x352A)  # Sapphire Rapids PCIe root port
PEX890XX = (V_BROADCOM, 0xC030)  # Broadcom/LSI PEX890xx Gen 5 switch (upstream and downstream)
AMD_GPU_US, AMD_GPU_DS = (V_AMD_GPU, 0x14A0), (V_AMD_GPU, 0x14A1)  # bridges on an AMD GPU module

# -- CPUs (cpu.md 4.1, 4.2) --------------------------------------------------------------------

# (L1d, L1i, L2, L3)
_GENOA_CACHES = (
    CacheSpec(size_kib=32, ways=8),
    CacheSpec(size_kib=32, ways=8),
    CacheSpec(size_kib=1024, ways=8),
    CacheSpec(size_kib=32768, ways=16),  # 32 MB per CCD
)
_SPR_CACHES = (
    CacheSpec(size_kib=48, ways=12),
    CacheSpec(size_kib=32, ways=8),
    CacheSpec(size_kib=2048, ways=16),
    CacheSpec(size_kib=107520, ways=15),  # 105 MB per socket
)
_AMD_FLAGS = ("fpu", "sse2", "ht", "avx2", "avx512f", "avx512_bf16", "constant_tsc")
_INTEL_FLAGS = ("fpu", "sse2", "ht", "avx2", "avx512f", "amx_tile", "amx_bf16", "constant_tsc")


def _genoa(
    model_name: str, cores: int, cores_per_ccd: int, *, nps: int, mem_node_gib: int, mhz: float
) -> CpuSpec:
    return CpuSpec(
        model_name=model_name,
        vendor_id="AuthenticAMD",
        cpu_family=25,
        model=17,
        stepping=1,
        mhz=mhz,
        sockets=2,
        cores_per_socket=cores,
        threads_per_core=2,
        numa_nodes_per_socket=nps,
        cores_per_l3=cores_per_ccd,
        # Zen 4 numbers core_id by CCD slot (8 per CCD), so parts with fewer active cores per
        # CCD have gaps in core_id.
        core_id_slots_per_l3=8,
        numa_distance_same_socket=12,
        numa_distance_remote=32,
        memory_per_node_kib=mem_node_gib * GIB_KIB,
        flags=_AMD_FLAGS,
        l1d=_GENOA_CACHES[0],
        l1i=_GENOA_CACHES[1],
        l2=_GENOA_CACHES[2],
        l3=_GENOA_CACHES[3],
    )


def _spr(model_name: str, snc: int, mem_node_gib: int) -> CpuSpec:
    return CpuSpec(
        model_name=model_name,
        vendor_id="GenuineIntel",
        cpu_family=6,
        model=143,
        stepping=8,
        mhz=2000.0,
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        numa_nodes_per_socket=snc,
        cores_per_l3=56,  # the L3 is socket-wide even with SNC (cpu.md 4.2)
        numa_distance_same_socket=12,
        numa_distance_remote=21,
        memory_per_node_kib=mem_node_gib * GIB_KIB,
        flags=_INTEL_FLAGS,
        l1d=_SPR_CACHES[0],
        l1i=_SPR_CACHES[1],
        l2=_SPR_CACHES[2],
        l3=_SPR_CACHES[3],
    )


# -- PCI tree helpers --------------------------------------------------------------------------

Bridge = tuple[int, int]


def _bridge(
    domain: int, short: str, ident: Bridge, children: tuple[PciDeviceSpec, ...]
) -> PciDeviceSpec:
    return PciDeviceSpec(
        address=f"{domain:04x}:{short}",
        vendor=ident[0],
        device=ident[1],
        class_code=CLASS_BRIDGE,
        subsystem_vendor=ident[0],
        subsystem_device=ident[1],
        revision=0xB0 if ident == PEX890XX else 0x00,
        driver="pcieport",
        children=children,
    )


def _tree(
    domain: int,
    leaves: Sequence[tuple[Sequence[str], PciDeviceSpec]],
    bridges: Sequence[Bridge],
    depth: int = 0,
) -> tuple[PciDeviceSpec, ...]:
    """Merge endpoint paths (``["00:01.1", "01:00.0", ...]`` of bridges) into a bridge tree.

    ``bridges[k]`` is the identity of a bridge at depth ``k`` (0 = root port, 1 = switch
    upstream port, 2 = switch downstream port, ...). Order of first appearance is kept.
    """
    order: list[str | PciDeviceSpec] = []
    groups: dict[str, list[tuple[Sequence[str], PciDeviceSpec]]] = {}
    for path, leaf in leaves:
        if not path:
            order.append(leaf)
            continue
        if path[0] not in groups:
            groups[path[0]] = []
            order.append(path[0])
        groups[path[0]].append((path[1:], leaf))
    return tuple(
        item
        if isinstance(item, PciDeviceSpec)
        else _bridge(domain, item, bridges[depth], _tree(domain, groups[item], bridges, depth + 1))
        for item in order
    )


POLLARA_FW = "1.117.1-a-63"
"""Firmware version the simulated AINICs report (a simulation choice, see the docs)."""


def _pollara(
    address: str, bus: int, index: int, sriov_vfs: int, total_vfs: int = 8
) -> PciDeviceSpec:
    ifname = f"enp{bus}s0"
    return PciDeviceSpec(
        address=address,
        vendor=V_PENSANDO,
        device=D_IONIC_PF,
        class_code=CLASS_ETHERNET,
        subsystem_vendor=V_PENSANDO,
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


def _connectx7(address: str, bus: int, rdma_name: str) -> PciDeviceSpec:
    guid = f"94:6d:ae:03:00:{bus:02x}:00:01"
    return PciDeviceSpec(
        address=address,
        vendor=V_MELLANOX,
        device=D_CONNECTX7,
        class_code=CLASS_INFINIBAND,
        subsystem_vendor=V_MELLANOX,
        subsystem_device=D_CONNECTX7,
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


def _nvidia_gpu(address: str, device: int, index: int) -> PciDeviceSpec:
    return PciDeviceSpec(
        address=address,
        vendor=V_NVIDIA,
        device=device,
        class_code=CLASS_3D,
        subsystem_vendor=V_NVIDIA,
        subsystem_device=device,
        revision=0xA1,
        driver="nvidia",
        label=f"GPU{index}",
    )


def _mi300x(address: str, index: int) -> PciDeviceSpec:
    return PciDeviceSpec(
        address=address,
        vendor=V_AMD_GPU,
        device=D_MI300X,
        class_code=CLASS_ACCEL,
        subsystem_vendor=V_AMD_GPU,
        subsystem_device=D_MI300X,
        driver="amdgpu",
        extra_files={"current_compute_partition": "SPX", "current_memory_partition": "NPS1"},
        label=f"GPU{index}",
    )


def _nvml(profile: str, gpus: Sequence[tuple[str, str, int, int]]) -> NvmlDescription:
    """NVML view of Hopper GPUs given as ``(bdf, name, memory_mib, marketed_gb)``, by index."""
    return NvmlDescription(
        driver_version="580.126.20",
        cuda_driver_version=13000,
        devices=tuple(
            NvmlGpu(
                index=i,
                minor_number=i,
                uuid=gpu_uuid(f"{profile}/{bdf}"),
                name=name,
                brand="Nvidia",
                architecture="Hopper",
                cuda_compute_capability=(9, 0),
                pci_bus_id=bdf,
                memory_total_bytes=memory_mib * MIB,
                serial=f"16549230{i:05d}",
                mig_capable=True,
                mig_enabled=False,
                module_id=i + 1,
                mig_profiles=hopper_mig_profiles(memory_mib, gb),
            )
            for i, (bdf, name, memory_mib, gb) in enumerate(gpus)
        ),
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
            ([rp, us, ds1, us2, ds2], _nvidia_gpu(f"0000:{r + 6:02x}:00.0", gpu_device, i)),
        ]
        roots.append(
            PciRootSpec(
                bus=r,
                numa_node=i // 4,
                children=_tree(0, leaves, (RP_SPR, PEX890XX, PEX890XX, PEX890XX, PEX890XX)),
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
            (gpu_parts[:-1], _mi300x(f"0000:{gpu_parts[-1]}", i)),
            (
                nic_parts[:-1],
                _pollara(f"0000:{nic_parts[-1]}", nic_bus, i, sriov_vfs=vfs, total_vfs=total_vfs),
            ),
        ]
        bridges = (RP_GENOA, PEX890XX, PEX890XX, AMD_GPU_US, AMD_GPU_DS)
        roots.append(
            PciRootSpec(
                bus=int(gpu_parts[0][:2], 16), numa_node=i // 4, children=_tree(0, leaves, bridges)
            )
        )
    return tuple(roots)


# -- profiles ----------------------------------------------------------------------------------


def _minimal_1s() -> MachineSpec:
    return MachineSpec(
        name="minimal-1s",
        description="1 socket, 4 cores SMT2 (8 CPUs), 1 NUMA node, no PCI devices; for fast tests",
        cpu=CpuSpec(
            model_name="Intel(R) Xeon(R) E-2334 CPU @ 3.40GHz",
            vendor_id="GenuineIntel",
            cpu_family=6,
            model=167,
            mhz=3400.0,
            sockets=1,
            cores_per_socket=4,
            cores_per_l3=4,
            l1d=CacheSpec(size_kib=48, ways=12),
            l1i=CacheSpec(size_kib=32, ways=8),
            l2=CacheSpec(size_kib=512, ways=8),
            l3=CacheSpec(size_kib=8192, ways=16),
            memory_per_node_kib=32 * GIB_KIB,
            flags=_INTEL_FLAGS[:5],
        ),
    )


def _epyc_genoa_2s() -> MachineSpec:
    return MachineSpec(
        name="epyc-genoa-2s",
        description="2x AMD EPYC 9654 (96c SMT2, 12 CCDs x 8 cores, L3 per CCD), NPS1",
        cpu=_genoa("AMD EPYC 9654 96-Core Processor", 96, 8, nps=1, mem_node_gib=768, mhz=2400.0),
    )


def _epyc_genoa_2s_nps4() -> MachineSpec:
    return MachineSpec(
        name="epyc-genoa-2s-nps4",
        description="2x AMD EPYC 9654 (96c SMT2, L3 per 8-core CCD), NPS4: 4 NUMA nodes per socket",
        cpu=_genoa("AMD EPYC 9654 96-Core Processor", 96, 8, nps=4, mem_node_gib=192, mhz=2400.0),
    )


def _spr_2s_snc2() -> MachineSpec:
    return MachineSpec(
        name="spr-2s-snc2",
        description="2x Intel Xeon Platinum 8480+ (56c SMT2, socket-wide L3), SNC2: 2 NUMA/socket",
        cpu=_spr("Intel(R) Xeon(R) Platinum 8480+", snc=2, mem_node_gib=256),
    )


def _mi300x_8gpu_8ainic() -> MachineSpec:
    return MachineSpec(
        name="mi300x-8gpu-8ainic",
        description=(
            "8x AMD Instinct MI300X + 8x AMD Pollara 400 AINIC (each NIC under its GPU's switch, "
            "one root per pair), 2x EPYC 9474F"
        ),
        cpu=_genoa("AMD EPYC 9474F 48-Core Processor", 48, 6, nps=1, mem_node_gib=1536, mhz=3600.0),
        pci_roots=_mi300x_roots(),
    )


def _mi300x_8gpu_8ainic_16vf() -> MachineSpec:
    return MachineSpec(
        name="mi300x-8gpu-8ainic-16vf",
        description=(
            "8x AMD Instinct MI300X + 8x AMD Pollara 400 AINIC with 16 VFs each bound to ionic "
            "(queues, RDMA devices), 2x EPYC 9474F"
        ),
        cpu=_genoa("AMD EPYC 9474F 48-Core Processor", 48, 6, nps=1, mem_node_gib=1536, mhz=3600.0),
        pci_roots=_mi300x_roots(vfs=16, total_vfs=16),
    )


def _dgx_h100() -> MachineSpec:
    gpus = [(bdf, "NVIDIA H100 80GB HBM3", 81559, 80) for bdf in _hgx_gpu_bdfs()]
    return MachineSpec(
        name="dgx-h100",
        description=(
            "NVIDIA DGX H100: 8x H100 SXM5 80GB + 8x ConnectX-7 InfiniBand (NIC and GPU share a "
            "switch), 2x Xeon 8480C"
        ),
        cpu=_spr("Intel(R) Xeon(R) Platinum 8480C", snc=1, mem_node_gib=1024),
        pci_roots=_hgx_roots(
            D_H100_SXM, lambda i, bdf, bus: _connectx7(bdf, bus, _DGX_RDMA_NAMES[i])
        ),
        nvml=_nvml("dgx-h100", gpus),
    )


def _h200_ainic(name: str, vfs: int) -> MachineSpec:
    gpus = [(bdf, "NVIDIA H200", 143771, 141) for bdf in _hgx_gpu_bdfs()]
    sriov = f", {vfs} VFs per AINIC bound to ionic" if vfs else ""
    return MachineSpec(
        name=name,
        description=(
            "8x NVIDIA H200 + 8x AMD Pollara 400 AINIC (each NIC under its GPU's switch)"
            f"{sriov}, 2x Xeon 8480+"
        ),
        cpu=_spr("Intel(R) Xeon(R) Platinum 8480+", snc=1, mem_node_gib=1024),
        pci_roots=_hgx_roots(D_H200_SXM, lambda i, bdf, bus: _pollara(bdf, bus, i, sriov_vfs=vfs)),
        nvml=_nvml(name, gpus),
    )


_FACTORIES: dict[str, Callable[[], MachineSpec]] = {
    "minimal-1s": _minimal_1s,
    "epyc-genoa-2s": _epyc_genoa_2s,
    "epyc-genoa-2s-nps4": _epyc_genoa_2s_nps4,
    "spr-2s-snc2": _spr_2s_snc2,
    "mi300x-8gpu-8ainic": _mi300x_8gpu_8ainic,
    "mi300x-8gpu-8ainic-16vf": _mi300x_8gpu_8ainic_16vf,
    "dgx-h100": _dgx_h100,
    "h200-8gpu-8ainic": lambda: _h200_ainic("h200-8gpu-8ainic", 0),
    "h200-8gpu-8ainic-sriov": lambda: _h200_ainic("h200-8gpu-8ainic-sriov", 4),
}
_CACHE: dict[str, MachineSpec] = {}


# -- public API --------------------------------------------------------------------------------


def register_profile(
    name: str, factory: Callable[[], MachineSpec], *, replace: bool = False
) -> None:
    """Add a profile at run time (for example from a vendor's test suite).

    Args:
        name: the profile name; must equal the ``name`` of the spec the factory returns.
        factory: returns the machine spec; called lazily, once.
        replace: allow replacing an existing profile of that name.

    Raises:
        ValueError: the name is taken and ``replace`` is false.
    """
    if name in _FACTORIES and not replace:
        raise ValueError(f"simulated-hardware profile {name!r} already exists")
    _FACTORIES[name] = factory
    _CACHE.pop(name, None)


def list_profiles() -> list[str]:
    """Names of all known profiles, sorted."""
    return sorted(_FACTORIES)


def get_profile(name: str) -> MachineSpec:
    """The machine spec of a named profile.

    Raises:
        UnknownProfileError: no profile has that name; the message lists the known ones.
    """
    spec = _CACHE.get(name)
    if spec is None:
        factory = _FACTORIES.get(name)
        if factory is None:
            raise UnknownProfileError(name, list_profiles())
        spec = factory()
        if spec.name != name:
            raise ValueError(f"profile factory for {name!r} returned a spec named {spec.name!r}")
        _CACHE[name] = spec
    return spec


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """Summary of a profile: its description and what discovery should find in it.

    Attributes:
        name: profile name.
        description: one line.
        sockets: physical packages.
        cores: physical cores.
        cpus: logical CPUs.
        numa_nodes: NUMA nodes.
        l3_groups: L3 (uncore cache) groups.
        gpus: GPU / accelerator PCI functions (class 0x03 or 0x12).
        nics: network physical functions (class 0x02).
        vfs: SR-IOV virtual functions that exist (``sriov_numvfs`` summed).
        pcie_roots: host bridges.
    """

    name: str
    description: str
    sockets: int
    cores: int
    cpus: int
    numa_nodes: int
    l3_groups: int
    gpus: int
    nics: int
    vfs: int
    pcie_roots: int

    def __str__(self) -> str:
        """One line: the description and the counts (without the name)."""
        counts = (
            f"{self.sockets} sockets, {self.cores} cores, {self.cpus} CPUs, "
            f"{self.numa_nodes} NUMA, {self.l3_groups} L3"
        )
        if self.pcie_roots:
            counts += f", {self.gpus} GPUs, {self.nics} NICs, {self.vfs} VFs"
        return f"{self.description} [{counts}]"


def _walk(devices: Sequence[PciDeviceSpec]) -> Iterator[PciDeviceSpec]:
    for dev in devices:
        yield dev
        yield from _walk(dev.children)


def profile_info(name: str) -> ProfileInfo:
    """Description and counts of a profile (``str()`` of the result is one line).

    Raises:
        UnknownProfileError: no profile has that name.
    """
    spec = get_profile(name)
    devices = [d for root in spec.pci_roots for d in _walk(root.children)]
    return ProfileInfo(
        name=spec.name,
        description=spec.description,
        sockets=spec.cpu.sockets,
        cores=spec.cpu.total_cores,
        cpus=spec.cpu.total_cpus,
        numa_nodes=spec.cpu.numa_nodes,
        l3_groups=spec.cpu.l3_groups,
        gpus=sum(1 for d in devices if d.class_code >> 16 in _GPU_BASE_CLASSES),
        nics=sum(1 for d in devices if d.class_code >> 16 == _NET_BASE_CLASS),
        vfs=sum(d.sriov.num_vfs for d in devices if d.sriov is not None),
        pcie_roots=len(spec.pci_roots),
    )


def build_profile(name: str, root: Path) -> Path:
    """Write the named profile's tree under ``root`` (empty or missing) and return ``root``.

    Raises:
        UnknownProfileError: no profile has that name.
        FileExistsError: ``root`` is not empty.
    """
    spec = get_profile(name)
    logger.info("building simulated hardware profile %s under %s", name, root)
    return SysfsBuilder(spec).build(root)


def fast_tmp() -> str | None:
    """A memory-backed temp directory (``/dev/shm``) if there is one, else ``None`` (default).

    A simulated profile is thousands of small files; on a loaded disk writing them takes tens
    of seconds, in memory well under one.
    """
    shm = Path("/dev/shm")  # noqa: S108 - private temp dirs are made inside it
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@contextlib.contextmanager
def materialize(name: str, *, tmp_dir: Path | None = None) -> Iterator[Path]:
    """Build the named profile in a temporary directory, yield it, then delete it.

    Args:
        name: the profile.
        tmp_dir: where to create the temporary directory (default: ``/dev/shm`` when
            available, see :func:`fast_tmp`, else ``$TMPDIR``).

    Raises:
        UnknownProfileError: no profile has that name (raised before anything is created).
    """
    get_profile(name)
    where = str(tmp_dir) if tmp_dir is not None else fast_tmp()
    with tempfile.TemporaryDirectory(prefix=f"drakit-sim-{name}-", dir=where) as tmp:
        yield build_profile(name, Path(tmp))
