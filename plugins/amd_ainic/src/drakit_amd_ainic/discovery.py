"""AINIC discovery through the sysfs root: PFs, their VFs, netdevs, queues, RDMA and uverbs.

The same code reads a node (``/``) and a simulated profile. Every mapping goes through sysfs,
never through a name: BDF -> ``net/<ifname>``, BDF -> ``infiniband/<ibdev>``, ibdev ->
``infiniband_verbs/uverbsN`` (whose ``ibdev`` file names it), PF -> ``virtfn<i>`` -> VF.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from drakit.sysfs import PciFunction, read_pci_function

__all__ = [
    "ETH_PF",
    "ETH_VF",
    "PENSANDO_VENDOR",
    "Ainic",
    "NicFunction",
    "live_vf_addresses",
    "read_ainics",
    "read_function",
    "read_link",
    "read_vf",
    "read_vfs",
]

PENSANDO_VENDOR = 0x1DD8
ETH_PF = 0x1002
ETH_VF = 0x1003
_MODELS = {0x5201: "Pollara 400"}
_PORT_ACTIVE = "ACTIVE"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LinkState:
    """What health reads for one function: netdev state and RDMA port state."""

    operstate: str | None
    carrier: bool | None
    port_state: str | None

    def problem(self) -> str:
        """Empty when healthy; else why not (``link down``, ``RDMA port ionic_0/1 DOWN``)."""
        if self.operstate is not None and self.operstate != "up":
            return f"link {self.operstate}"
        if self.carrier is False:
            return "carrier lost"
        if self.port_state is not None and _PORT_ACTIVE not in self.port_state:
            return f"RDMA port {self.port_state.split(':')[-1].strip()}"
        return ""


@dataclass(frozen=True, slots=True)
class NicFunction:
    """One AINIC PCI function (PF or VF) as sysfs shows it.

    Attributes:
        pci: the core view (BDF, chain, NUMA node, driver, SR-IOV files).
        dir: the function's resolved sysfs directory.
        ifname: its netdev, if bound to ionic.
        mac: the netdev's address.
        mtu: the netdev's MTU.
        speed_mbps: link speed, ``None`` while down or unknown.
        queues: active rx queues (``queues/rx-N``).
        rdma_device: its RDMA device (``infiniband/<name>``).
        uverbs: the uverbs char device name (``uverbs3``) of that RDMA device.
        fw_version: the RDMA device's ``fw_ver``.
        vf_index: the VF's index on its PF (``virtfn<i>``), ``None`` for a PF.
        link: state read at discovery.
    """

    pci: PciFunction
    dir: Path
    ifname: str | None
    mac: str | None
    mtu: int | None
    speed_mbps: int | None
    queues: int
    rdma_device: str | None
    uverbs: str | None
    fw_version: str | None
    vf_index: int | None
    link: LinkState

    @property
    def bdf(self) -> str:
        """``DDDD:BB:DD.F``."""
        return self.pci.bdf


@dataclass(frozen=True, slots=True)
class Ainic:
    """One AINIC: its PF, the VFs that exist now, and its SR-IOV limits.

    Attributes:
        index: position among the node's AINIC PFs in PCI order (device ``ainic-<index>``).
        pf: the physical function.
        vf_addresses: VF index -> BDF of the VFs that existed at discovery.
        total_vfs: ``sriov_totalvfs`` (0 if not SR-IOV capable).
        model: marketing name from the subsystem id, else the PCI device name.
    """

    index: int
    pf: NicFunction
    vf_addresses: Mapping[int, str]
    total_vfs: int
    model: str

    @property
    def name(self) -> str:
        """The published PF device name."""
        return f"ainic-{self.index}"


def read_link(sys_root: Path, ifname: str | None, rdma: str | None) -> LinkState:
    """Netdev ``operstate``/``carrier`` and RDMA port 1 ``state`` (cheap: three reads)."""
    operstate = carrier = None
    if ifname:
        net = sys_root / "class" / "net" / ifname
        operstate = _read(net / "operstate")
        c = _read(net / "carrier")
        carrier = None if c is None else c == "1"
    port = (
        _read(sys_root / "class" / "infiniband" / rdma / "ports" / "1" / "state") if rdma else None
    )
    return LinkState(operstate=operstate, carrier=carrier, port_state=port)


def read_function(sys_root: Path, fn: PciFunction, vf_index: int | None = None) -> NicFunction:
    """Everything drakit publishes about one function."""
    d = Path(os.path.realpath(sys_root / "bus" / "pci" / "devices" / fn.bdf))
    ifname = fn.netdevs[0] if fn.netdevs else None
    mac = mtu = speed = None
    queues = 0
    if ifname:
        net = d / "net" / ifname
        mac = _read(net / "address")
        mtu = _int(_read(net / "mtu"))
        s = _int(_read(net / "speed"))
        speed = s if s is not None and s > 0 else None
        try:
            queues = sum(1 for q in os.listdir(net / "queues") if q.startswith("rx-"))
        except OSError:
            queues = 0
    rdma = fn.rdma_devices[0] if fn.rdma_devices else None
    uverbs = fw = None
    if rdma:
        fw = _read(d / "infiniband" / rdma / "fw_ver")
        try:
            entries = sorted(os.listdir(d / "infiniband_verbs"))
        except OSError:
            entries = []
        for u in entries:
            if _read(d / "infiniband_verbs" / u / "ibdev") == rdma:
                uverbs = u
                break
    return NicFunction(
        pci=fn,
        dir=d,
        ifname=ifname,
        mac=mac,
        mtu=mtu,
        speed_mbps=speed,
        queues=queues,
        rdma_device=rdma,
        uverbs=uverbs,
        fw_version=fw or None,
        vf_index=vf_index,
        link=read_link(sys_root, ifname, rdma),
    )


def _vf_indices(pf_dir: Path) -> dict[int, str]:
    """VF index -> VF BDF, from the PF's ``virtfn<i>`` links."""
    out: dict[int, str] = {}
    d = str(pf_dir)
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for name in names:
        if name.startswith("virtfn") and name[6:].isdigit():
            out[int(name[6:])] = os.path.basename(os.readlink(f"{d}/{name}"))
    return dict(sorted(out.items()))


def _small(path: str) -> bytes:
    """A small sysfs file's bytes (empty if unreadable); no pathlib, it runs per function."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, 64).strip()
    except OSError:
        return b""
    finally:
        os.close(fd)


_PF_DEVICE = f"0x{ETH_PF:04x}".encode()
_PF_VENDOR = f"0x{PENSANDO_VENDOR:04x}".encode()


def _is_pf(bus: str, bdf: str) -> bool:
    d = f"{bus}/{bdf}/"
    return _small(d + "device") == _PF_DEVICE and _small(d + "vendor") == _PF_VENDOR


def read_ainics(root: str | Path) -> list[Ainic]:
    """Every AINIC PF under ``<root>/sys``, in PCI order, with the addresses of its VFs.

    VF details are read on demand (:func:`read_vfs`): a PF whose VFs are a pool (``shared``) or
    not published needs only their count, and a node may have thousands.
    """
    sys_root = Path(root) / "sys"
    bus = sys_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(os.listdir(bus))
    except OSError:
        return []
    out: list[Ainic] = []
    for bdf in entries:
        if not _BDF.match(bdf) or not _is_pf(str(bus), bdf):
            continue
        pf = read_pci_function(root, bdf)
        if pf is None or pf.physfn is not None:
            continue
        nf = read_function(sys_root, pf)
        sub = _int(_read(nf.dir / "subsystem_device"))
        out.append(
            Ainic(
                index=len(out),
                pf=nf,
                vf_addresses=_vf_indices(nf.dir),
                total_vfs=pf.sriov_totalvfs or 0,
                model=_MODELS.get(sub or 0, "DSC Ethernet Controller"),
            )
        )
    return out


def live_vf_addresses(nic: Ainic) -> dict[int, str]:
    """VF index -> BDF of the PF's VFs as they are now (cheap: the ``virtfn`` links)."""
    return _vf_indices(nic.pf.dir)


def read_vf(root: str | Path, nic: Ainic, index: int, bdf: str) -> NicFunction | None:
    """One VF of the PF (``None`` if it is gone)."""
    fn = read_pci_function(root, bdf)
    if fn is None or fn.physfn != nic.pf.bdf:
        return None
    return read_function(Path(root) / "sys", fn, index)


def read_vfs(root: str | Path, nic: Ainic, *, live: bool = False) -> tuple[NicFunction, ...]:
    """The VFs of one PF; with ``live``, as they are now (after ``sriov_numvfs`` changed)."""
    sys_root = Path(root) / "sys"
    addresses = _vf_indices(nic.pf.dir) if live else nic.vf_addresses
    out = []
    for i, bdf in addresses.items():
        fn = read_pci_function(root, bdf)
        if fn is not None and fn.physfn == nic.pf.bdf:
            out.append(read_function(sys_root, fn, i))
    return tuple(out)
