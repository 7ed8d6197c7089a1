"""Reading PCI devices from sysfs, under a configurable root, for every backend.

A backend reads hardware only through these helpers (or its vendor library), always relative
to ``NodeInfo.sysfs_root``, so a simulated profile and a real node take the same code path.
The standard attributes follow the upstream helper
(``k8s.io/dynamic-resource-allocation/deviceattribute``): ``resource.kubernetes.io/pcieRoot`` is
the first element after ``/sys/devices/`` of the resolved ``/sys/bus/pci/devices/<BDF>`` link,
``pciBusID`` the lower-case BDF and ``numaNode`` the device's ``numa_node`` (omitted when -1).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NUMA_NODE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "PciFunction",
    "pci_distance",
    "read_attribute",
    "read_pci_function",
    "read_pci_functions",
    "standard_pci_attributes",
]

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
NUMA_NODE = "resource.kubernetes.io/numaNode"

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")


def read_attribute(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; ``None`` where it is missing, unreadable or not ASCII."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path, base: int = 10) -> int | None:
    text = read_attribute(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


@dataclass(frozen=True)
class PciFunction:
    """One PCI function as sysfs shows it.

    Attributes:
        bdf: ``DDDD:BB:DD.F``.
        vendor: vendor id (``0x10de`` NVIDIA, ``0x1dd8`` AMD Pensando, ``0x1002`` AMD GPU).
        device: device id.
        class_code: 24-bit class (``0x020000`` Ethernet, ``0x030200`` 3D controller).
        numa_node: the kernel's NUMA node, ``None`` when -1 or absent.
        chain: the path below ``/sys/devices``: root complex, then every bridge, then the
            function itself (``("pci0000:00", "0000:00:01.0", "0000:01:00.0")``).
        driver: bound kernel driver name, if any.
        sriov_totalvfs: SR-IOV VFs the PF supports (``None`` if not SR-IOV capable).
        sriov_numvfs: VFs currently enabled.
        physfn: the PF's BDF if this function is a VF.
        netdevs: network interface names of this function.
        rdma_devices: RDMA (``/sys/class/infiniband``) device names of this function.
    """

    bdf: str
    vendor: int
    device: int
    class_code: int
    numa_node: int | None
    chain: tuple[str, ...]
    driver: str | None = None
    sriov_totalvfs: int | None = None
    sriov_numvfs: int | None = None
    physfn: str | None = None
    netdevs: tuple[str, ...] = ()
    rdma_devices: tuple[str, ...] = ()

    @property
    def pcie_root(self) -> str | None:
        """The root complex (``pci0000:00``), or ``None`` if not under ``/sys/devices/pci*``."""
        return self.chain[0] if self.chain and self.chain[0].startswith("pci") else None


def _function(sys_root: Path, bdf: str) -> PciFunction | None:
    link = sys_root / "bus" / "pci" / "devices" / bdf
    real = Path(os.path.realpath(link))
    devices_dir = Path(os.path.realpath(sys_root / "devices"))
    try:
        rel = real.relative_to(devices_dir)
    except ValueError:
        return None
    if real.name != bdf:
        return None
    vendor = _read_int(real / "vendor", 16)
    device = _read_int(real / "device", 16)
    klass = _read_int(real / "class", 16)
    if vendor is None or device is None or klass is None:
        return None
    numa = _read_int(real / "numa_node")
    drv = real / "driver"
    physfn = real / "physfn"
    net = real / "net"
    ib = real / "infiniband"
    return PciFunction(
        bdf=bdf,
        vendor=vendor,
        device=device,
        class_code=klass,
        numa_node=numa if numa is not None and numa >= 0 else None,
        chain=rel.parts,
        driver=Path(os.path.realpath(drv)).name if drv.is_symlink() else None,
        sriov_totalvfs=_read_int(real / "sriov_totalvfs"),
        sriov_numvfs=_read_int(real / "sriov_numvfs"),
        physfn=Path(os.path.realpath(physfn)).name if physfn.is_symlink() else None,
        netdevs=tuple(sorted(p.name for p in net.iterdir())) if net.is_dir() else (),
        rdma_devices=tuple(sorted(p.name for p in ib.iterdir())) if ib.is_dir() else (),
    )


def read_pci_function(root: str | Path, bdf: str) -> PciFunction | None:
    """One PCI function by BDF (``None`` if it does not exist or is not a PCI device).

    Cheaper than :func:`read_pci_functions` when a backend already knows the addresses (the
    VFs behind a PF's ``virtfn<i>`` links).
    """
    if not _BDF.match(bdf):
        return None
    return _function(Path(root) / "sys", bdf)


def read_pci_functions(root: str | Path, *, vendor: int | None = None) -> list[PciFunction]:
    """Every PCI function under ``<root>/sys/bus/pci/devices``, sorted by BDF.

    Args:
        root: the sysfs root (``/`` on a node; a simulated profile's directory in tests).
        vendor: keep only this vendor id.
    """
    sys_root = Path(root) / "sys"
    bus = sys_root / "bus" / "pci" / "devices"
    if not bus.is_dir():
        return []
    out = []
    for entry in sorted(bus.iterdir()):
        if not _BDF.match(entry.name):
            continue
        fn = _function(sys_root, entry.name)
        if fn is not None and (vendor is None or fn.vendor == vendor):
            out.append(fn)
    return out


def pci_distance(a: PciFunction, b: PciFunction) -> int:
    """Hops between two functions in the PCI tree (through their closest common bridge).

    Two functions behind the same switch are closer than two behind the same root complex,
    which are closer than two on different root complexes (which share no element: the
    distance then counts both full chains plus one for the host).
    """
    common = 0
    for x, y in zip(a.chain, b.chain, strict=False):
        if x != y:
            break
        common += 1
    extra = 1 if common == 0 else 0
    return (len(a.chain) - common) + (len(b.chain) - common) + extra


def standard_pci_attributes(fn: PciFunction) -> dict[str, int | str]:
    """The standard ``resource.kubernetes.io`` attributes of a PCI function."""
    out: dict[str, int | str] = {PCI_BUS_ID: fn.bdf}
    if fn.pcie_root:
        out[PCIE_ROOT] = fn.pcie_root
    if fn.numa_node is not None:
        out[NUMA_NODE] = fn.numa_node
    return out
