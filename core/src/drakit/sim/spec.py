"""Typed description of a simulated machine: CPUs, caches, NUMA nodes and the PCI tree.

A :class:`MachineSpec` says *what* the hardware is; :class:`drakit.sim.SysfsBuilder` turns it
into files. Specs are frozen dataclasses so that a profile is a plain value: building it twice
gives the same tree.

Numbering follows Linux on x86 (sources: ``docs/references.md``, "CPU topology"):

* CPU ids: thread ``t`` of core ``c`` of socket ``s`` is CPU
  ``t * (sockets * cores_per_socket) + s * cores_per_socket + c``, so the first threads of all
  cores come first and the SMT sibling of CPU ``n`` is ``n + total_cores``.
* ``core_id`` is per socket (it repeats across packages) and may have gaps: with
  ``core_id_slots_per_l3`` larger than ``cores_per_l3`` (AMD parts with partially enabled
  CCDs) the ids of L3 group ``g`` start at ``g * core_id_slots_per_l3``.
* L3 ``id`` is unique across the system (L3 group index counted over all sockets); L1/L2 ids
  are the global core index.
* NUMA node ``s * numa_nodes_per_socket + k`` holds the ``k``-th equal slice of socket ``s``'s
  cores (NPS/SNC), with all SMT siblings of those cores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

__all__ = [
    "BDF_PATTERN",
    "CacheSpec",
    "CpuSpec",
    "MachineSpec",
    "NetDevSpec",
    "PciDeviceSpec",
    "PciRootSpec",
    "RdmaSpec",
    "SimPart",
    "SimSpecError",
    "SriovSpec",
    "UnknownProfileError",
]

BDF_PATTERN = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
"""A PCI address as sysfs spells it (lowercase, 4-digit domain), e.g. ``0000:1b:00.0``."""

_PCI_CLASS_BRIDGE = 0x06


class SimSpecError(ValueError):
    """A machine spec is inconsistent (bad PCI address, duplicate device, impossible counts)."""


class UnknownProfileError(ValueError):
    """No simulated-hardware profile has the requested name.

    Args:
        name: the name that was asked for.
        known: the names that exist; the message lists them.
    """

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(
            f"unknown simulated-hardware profile {name!r}; known profiles: {', '.join(known)}. "
            "A vendor's profiles come with its package: install the distribution that registers "
            f"{name!r} in the 'drakit.profiles' entry point group (`drakit sim list` shows "
            "which distribution provides each profile)"
        )


class SimPart(Protocol):
    """Vendor files a simulated machine carries beyond the generic sysfs/procfs tree.

    A backend's simulator module (``drakit_nvidia_gpu.sim``, ``drakit_amd_gpu.sim``...) defines
    its parts (the fake NVML's description file, the amdgpu/KFD files); a profile lists them in
    :attr:`MachineSpec.parts` and :class:`~drakit.sim.SysfsBuilder` calls :meth:`write` after
    the generic tree is written, so core never knows a vendor's files.
    """

    def write(self, spec: MachineSpec, root: Path) -> None:
        """Write this part's files for ``spec`` under the built ``root``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheSpec:
    """One cache level as sysfs describes it.

    Attributes:
        size_kib: capacity in KiB (sysfs ``size`` reads ``<n>K``).
        ways: ``ways_of_associativity``.
        line_size: ``coherency_line_size`` in bytes.
    """

    size_kib: int
    ways: int
    line_size: int = 64

    @property
    def number_of_sets(self) -> int:
        """``number_of_sets`` derived from size, ways and line size."""
        return max(1, self.size_kib * 1024 // (self.ways * self.line_size))


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuSpec:
    """The processors of a machine and how the kernel numbers them.

    Attributes:
        model_name: ``model name`` in ``/proc/cpuinfo``.
        vendor_id: ``GenuineIntel`` or ``AuthenticAMD``.
        cpu_family: ``cpu family`` in ``/proc/cpuinfo``.
        model: ``model`` in ``/proc/cpuinfo``.
        stepping: ``stepping`` in ``/proc/cpuinfo``.
        mhz: nominal clock for ``cpu MHz``.
        sockets: physical packages.
        cores_per_socket: physical cores per package.
        threads_per_core: SMT width (1 = SMT off / not supported).
        numa_nodes_per_socket: NPS / SNC split of each socket (1 = one node per socket).
        cores_per_l3: cores sharing one L3 (one uncore cache group); ``cores_per_socket`` for a
            socket-wide (monolithic) L3.
        core_id_slots_per_l3: stride of ``core_id`` between L3 groups; ``None`` means
            ``cores_per_l3`` (contiguous ids).
        l1d: L1 data cache (per core).
        l1i: L1 instruction cache (per core).
        l2: L2 cache (per core).
        l3: L3 cache (per L3 group).
        numa_distance_same_socket: SLIT distance between nodes of one socket.
        numa_distance_remote: SLIT distance between nodes of different sockets.
        memory_per_node_kib: ``MemTotal`` of each node's ``meminfo``.
        isolated: CPUs listed in ``/sys/devices/system/cpu/isolated``.
        flags: a representative subset of ``flags`` for ``/proc/cpuinfo``.
    """

    model_name: str
    vendor_id: Literal["GenuineIntel", "AuthenticAMD"]
    cpu_family: int
    model: int
    stepping: int = 1
    mhz: float = 2000.0
    sockets: int
    cores_per_socket: int
    threads_per_core: int = 2
    numa_nodes_per_socket: int = 1
    cores_per_l3: int
    core_id_slots_per_l3: int | None = None
    l1d: CacheSpec
    l1i: CacheSpec
    l2: CacheSpec
    l3: CacheSpec
    numa_distance_same_socket: int = 12
    numa_distance_remote: int = 32
    memory_per_node_kib: int = 64 * 1024 * 1024
    isolated: tuple[int, ...] = ()
    flags: tuple[str, ...] = ("fpu", "sse2", "ht", "avx2", "avx512f")

    def __post_init__(self) -> None:
        if min(self.sockets, self.cores_per_socket, self.threads_per_core) < 1:
            raise SimSpecError("sockets, cores_per_socket and threads_per_core must be >= 1")
        if self.cores_per_socket % self.numa_nodes_per_socket:
            raise SimSpecError(
                f"{self.cores_per_socket} cores per socket do not split into "
                f"{self.numa_nodes_per_socket} equal NUMA nodes"
            )
        if self.cores_per_socket % self.cores_per_l3:
            raise SimSpecError(
                f"{self.cores_per_socket} cores per socket do not split into L3 groups of "
                f"{self.cores_per_l3}"
            )
        if self.core_id_slots_per_l3 is not None and self.core_id_slots_per_l3 < self.cores_per_l3:
            raise SimSpecError("core_id_slots_per_l3 must be >= cores_per_l3")
        bad = [c for c in self.isolated if not 0 <= c < self.total_cpus]
        if bad:
            raise SimSpecError(f"isolated CPUs {bad} do not exist ({self.total_cpus} CPUs)")

    @property
    def total_cores(self) -> int:
        """Physical cores in the machine."""
        return self.sockets * self.cores_per_socket

    @property
    def total_cpus(self) -> int:
        """Logical CPUs (hardware threads) in the machine."""
        return self.total_cores * self.threads_per_core

    @property
    def numa_nodes(self) -> int:
        """NUMA nodes in the machine."""
        return self.sockets * self.numa_nodes_per_socket

    @property
    def l3_groups(self) -> int:
        """L3 (uncore cache) groups in the machine."""
        return self.total_cores // self.cores_per_l3


@dataclass(frozen=True, kw_only=True, slots=True)
class NetDevSpec:
    """A network interface backed by a PCI function (``<BDF>/net/<name>``).

    Attributes:
        name: interface name, e.g. ``enp9s0`` or ``ibp24s0``.
        mac: hardware address (20 bytes, colon-separated, for InfiniBand).
        mtu: link MTU.
        operstate: ``up``, ``down``...
        speed_mbps: ``speed`` in Mb/s.
        link_type: ``ether`` (ARPHRD 1) or ``infiniband`` (ARPHRD 32).
        queues: active rx and tx queues (``queues/rx-N``, ``queues/tx-N``); 0 writes none.
    """

    name: str
    mac: str
    mtu: int = 9000
    operstate: str = "up"
    speed_mbps: int = 400_000
    link_type: Literal["ether", "infiniband"] = "ether"
    queues: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class RdmaSpec:
    """An RDMA (verbs) device whose parent is a PCI function (``<BDF>/infiniband/<name>``).

    Attributes:
        name: IB device name (``ionic_0``, ``mlx5_0``, ``rocep9s0``...). Discovery must map
            BDF to name through sysfs and never guess it.
        link_layer: ``Ethernet`` (RoCE) or ``InfiniBand`` for port 1.
        netdev: netdev named in port 1's ``gid_attrs/ndevs/0`` (RoCE); ``None`` for none.
        fw_ver: the device's ``fw_ver`` file (firmware version); empty writes none.
    """

    name: str
    link_layer: Literal["Ethernet", "InfiniBand"] = "Ethernet"
    netdev: str | None = None
    fw_ver: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class SriovSpec:
    """SR-IOV capability of a physical function.

    VF ``i`` gets routing id ``PF + offset + i * stride`` (ARI numbering: functions run
    ``.1``..``.7`` then the next device number), lives beside the PF under the same bridge,
    and is linked both ways (``virtfn<i>`` on the PF, ``physfn`` on the VF).

    Attributes:
        total_vfs: ``sriov_totalvfs``.
        num_vfs: ``sriov_numvfs``: VFs that exist now (written as real VF functions).
        vf_device: device id of the VFs (vendor and subsystem are the PF's).
        offset: ``sriov_offset``.
        stride: ``sriov_stride``.
        vf_driver: driver the VFs are bound to (``None`` = unbound, no netdevs).
        vf_netdevs: give each VF bound to a driver a netdev named ``<pf netdev>v<i>``.
        vf_queues: active rx/tx queues of each VF netdev.
        vf_rdma: give each VF with a netdev an RDMA device (udev-style name
            ``roce<netdev minus "en">``, e.g. ``rocep24s0v0``) with the PF's firmware version.
    """

    total_vfs: int
    num_vfs: int = 0
    vf_device: int
    offset: int = 1
    stride: int = 1
    vf_driver: str | None = None
    vf_netdevs: bool = True
    vf_queues: int = 0
    vf_rdma: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.num_vfs <= self.total_vfs:
            raise SimSpecError(f"num_vfs {self.num_vfs} not in 0..{self.total_vfs}")


@dataclass(frozen=True, kw_only=True, slots=True)
class PciDeviceSpec:
    """A PCI function; bridges (class ``0x06xxxx``) carry the functions below them.

    Attributes:
        address: BDF as sysfs spells it (``0000:1b:00.0``).
        vendor: vendor id (``0x10de``).
        device: device id.
        class_code: 24-bit class code (``0x030200`` 3D controller, ``0x060400`` PCI bridge).
        subsystem_vendor: subsystem vendor id; ``None`` (the default): ``vendor``.
        subsystem_device: subsystem device id; ``None`` (the default): ``device``.
        revision: revision id.
        driver: bound driver name (``driver`` symlink); ``None`` for unbound.
        children: functions on the bridge's secondary bus (bridges only).
        netdevs: network interfaces of this function.
        rdma: RDMA devices of this function.
        sriov: SR-IOV capability (physical functions only).
        extra_files: additional files in the function's directory (name -> content), for
            vendor attributes such as ``current_compute_partition``.
        label: a human note for docs and logs (``GPU0``, ``NIC for GPU0``); not written.
    """

    address: str
    vendor: int
    device: int
    class_code: int
    subsystem_vendor: int | None = None
    subsystem_device: int | None = None
    revision: int = 0
    driver: str | None = None
    children: tuple[PciDeviceSpec, ...] = ()
    netdevs: tuple[NetDevSpec, ...] = ()
    rdma: tuple[RdmaSpec, ...] = ()
    sriov: SriovSpec | None = None
    extra_files: Mapping[str, str] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if self.subsystem_vendor is None:
            object.__setattr__(self, "subsystem_vendor", self.vendor)
        if self.subsystem_device is None:
            object.__setattr__(self, "subsystem_device", self.device)
        if not BDF_PATTERN.match(self.address):
            raise SimSpecError(
                f"PCI address {self.address!r} is not DDDD:BB:DD.F "
                "(lowercase hex, e.g. 0000:1b:00.0)"
            )
        if self.children and not self.is_bridge:
            raise SimSpecError(f"{self.address} has children but class {self.class_code:#08x}")

    @property
    def is_bridge(self) -> bool:
        """Whether the function is a PCI bridge (root port or switch port)."""
        return self.class_code >> 16 == _PCI_CLASS_BRIDGE


@dataclass(frozen=True, kw_only=True, slots=True)
class PciRootSpec:
    """A PCI host bridge (root complex) ``pci<domain>:<bus>`` and what hangs off its root bus.

    Attributes:
        domain: PCI segment.
        bus: root bus number.
        numa_node: proximity domain of the host bridge, inherited by every device below it
            (``-1`` = no affinity).
        children: functions on the root bus (root ports, integrated endpoints).
    """

    domain: int = 0
    bus: int
    numa_node: int
    children: tuple[PciDeviceSpec, ...] = ()

    @property
    def name(self) -> str:
        """The sysfs directory name and ``resource.kubernetes.io/pcieRoot`` value."""
        return f"pci{self.domain:04x}:{self.bus:02x}"


@dataclass(frozen=True, kw_only=True, slots=True)
class MachineSpec:
    """A whole simulated machine.

    Attributes:
        name: profile name.
        description: one line for ``drakit sim`` listings and docs.
        cpu: processors, caches and NUMA layout.
        pci_roots: host bridges with their device trees.
        parts: vendor parts written after the generic tree, in order (:class:`SimPart`).
    """

    name: str
    description: str
    cpu: CpuSpec
    pci_roots: tuple[PciRootSpec, ...] = ()
    parts: tuple[SimPart, ...] = ()
