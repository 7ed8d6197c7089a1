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
from typing import NamedTuple

from drakit.sysfs import PciFunction, read_attribute, read_pci_function

__all__ = [
    "ETH_PF",
    "ETH_VF",
    "PENSANDO_VENDOR",
    "Ainic",
    "NicFunction",
    "SysfsCache",
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
        """Empty when healthy; else why not (``link down``, ``RDMA port ionic_0/1 DOWN``).

        ``unknown`` is no problem: the kernel shows it for a driver that does not set the
        operational state, and such a netdev carries traffic (Documentation/networking/
        operstates.rst); its carrier and RDMA port still tell.
        """
        if self.operstate is not None and self.operstate not in ("up", "unknown"):
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
        path: the function's resolved sysfs directory (a ``str``: a VF's is made per VF in
            the first round, where a ``Path`` each cost 5 % of a 2,048-VF round; see ``dir``).
        ifname: its netdev, if bound to ionic.
        mac: the netdev's address.
        mtu: the netdev's MTU.
        speed_mbps: link speed, ``None`` while down or unknown.
        queues: active rx queues (``queues/rx-N``).
        rdma_device: its RDMA device (``infiniband/<name>``).
        uverbs: the uverbs char device name (``uverbs3``) of that RDMA device.
        fw_version: the RDMA device's ``fw_ver``.
        vf_index: the VF's index on its PF (``virtfn<i>``), ``None`` for a PF.
    """

    pci: PciFunction
    path: str
    ifname: str | None
    mac: str | None
    mtu: int | None
    speed_mbps: int | None
    queues: int
    rdma_device: str | None
    uverbs: str | None
    fw_version: str | None
    vf_index: int | None

    @property
    def bdf(self) -> str:
        """``DDDD:BB:DD.F``."""
        return self.pci.bdf

    @property
    def dir(self) -> Path:
        """The function's resolved sysfs directory as a ``Path``."""
        return Path(self.path)


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
        operstate = read_attribute(net / "operstate")
        c = read_attribute(net / "carrier")
        carrier = None if c is None else c == "1"
    port = (
        read_attribute(sys_root / "class" / "infiniband" / rdma / "ports" / "1" / "state")
        if rdma
        else None
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
        mac = read_attribute(net / "address")
        mtu = _int(read_attribute(net / "mtu"))
        s = _int(read_attribute(net / "speed"))
        speed = s if s is not None and s > 0 else None
        try:
            queues = sum(1 for q in os.listdir(net / "queues") if q.startswith("rx-"))
        except OSError:
            queues = 0
    rdma = fn.rdma_devices[0] if fn.rdma_devices else None
    uverbs = fw = None
    if rdma:
        fw = read_attribute(d / "infiniband" / rdma / "fw_ver")
        try:
            entries = sorted(os.listdir(d / "infiniband_verbs"))
        except OSError:
            entries = []
        for u in entries:
            if read_attribute(d / "infiniband_verbs" / u / "ibdev") == rdma:
                uverbs = u
                break
    return NicFunction(
        pci=fn,
        path=str(d),
        ifname=ifname,
        mac=mac,
        mtu=mtu,
        speed_mbps=speed,
        queues=queues,
        rdma_device=rdma,
        uverbs=uverbs,
        fw_version=fw or None,
        vf_index=vf_index,
    )


def _vf_indices(d: str, cache: SysfsCache | None = None) -> dict[int, str]:
    """VF index -> VF BDF, from the ``virtfn<i>`` links of the PF whose directory is ``d``.

    With ``cache``, the links are read only when their names or inodes changed since the last
    round (a pool removed and created again has new links).
    """
    try:
        with os.scandir(d) as it:
            links = tuple(
                sorted(
                    (e.name, e.inode())
                    for e in it
                    if e.name.startswith("virtfn") and e.name[6:].isdigit()
                )
            )
    except OSError:
        return {}
    if cache is not None:
        hit = cache.virtfns.get(d)
        if hit is not None and hit[0] == links:
            return dict(hit[1])
    out: dict[int, str] = {}
    for name, _ in links:
        try:
            out[int(name[6:])] = os.path.basename(os.readlink(f"{d}/{name}"))
        except OSError:
            continue  # removed while listed
    out = dict(sorted(out.items()))
    if cache is not None:
        cache.virtfns[d] = (links, out)
    return out


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
    """Whether ``bdf`` is an AINIC PF (its ``device`` and ``vendor`` files)."""
    d = f"{bus}/{bdf}/"
    return _small(d + "device") == _PF_DEVICE and _small(d + "vendor") == _PF_VENDOR


def read_ainics(root: str | Path, cache: SysfsCache | None = None) -> list[Ainic]:
    """Every AINIC PF under ``<root>/sys``, in PCI order, with the addresses of its VFs.

    VF details are read on demand (:func:`read_vfs`): a PF whose VFs are a pool (``shared``) or
    not published needs only their count, and a node may have thousands. With ``cache``, a
    function already seen (same link inode) is not read again to learn whether it is a PF, and
    a PF's identity and place are not resolved again.
    """
    bus = Path(root) / "sys" / "bus" / "pci" / "devices"
    try:
        with os.scandir(bus) as it:
            entries = sorted((e.name, e.inode()) for e in it)
    except OSError:
        return []
    store = cache if cache is not None else SysfsCache()
    known = store.is_pf
    seen: dict[str, tuple[int, bool]] = {}
    vfs: set[str] = set()
    out: list[Ainic] = []
    for bdf, ino in entries:
        if not _BDF.match(bdf):
            continue
        hit = known.get(bdf)
        if hit is not None and hit[0] == ino:
            is_pf = hit[1]
        else:
            # a VF (the target of a PF's virtfn link, listed before it: a VF's routing id is
            # its PF's plus a positive offset) is no PF: its device file need not be read
            is_pf = bdf not in vfs and _is_pf(str(bus), bdf)
        seen[bdf] = (ino, is_pf)
        if not is_pf:
            continue
        got = _pf(root, bdf, ino, store)
        if got is None:
            continue
        nf, model = got
        addresses = _vf_indices(nf.path, cache)
        vfs.update(addresses.values())
        out.append(
            Ainic(
                index=len(out),
                pf=nf,
                vf_addresses=addresses,
                total_vfs=nf.pci.sriov_totalvfs or 0,
                model=model,
            )
        )
    store.is_pf = seen
    for gone in [b for b in store.pfs if b not in seen]:
        del store.pfs[gone]
    return out


def live_vf_addresses(nic: Ainic) -> dict[int, str]:
    """VF index -> BDF of the PF's VFs as they are now (cheap: the ``virtfn`` links)."""
    return _vf_indices(nic.pf.path)


def read_vf(root: str | Path, nic: Ainic, index: int, bdf: str) -> NicFunction | None:
    """One VF of the PF (``None`` if it is gone)."""
    fn = read_pci_function(root, bdf)
    if fn is None or fn.physfn != nic.pf.bdf:
        return None
    return read_function(Path(root) / "sys", fn, index)


class _Fixed(NamedTuple):  # a tuple: made per function per round, cheap to build
    """What a VF's sysfs directory fixes for its life: its PCI identity and place."""

    vendor: int
    device: int
    class_code: int
    numa_node: int | None
    chain: tuple[str, ...]
    path: str


class _Rdma(NamedTuple):  # a tuple: made per function per round, cheap to build
    """An RDMA device of one VF directory and what rediscovery need not read again."""

    ino: int
    uverbs: str | None
    fw_version: str | None


class SysfsCache:
    """Facts that do not change while a sysfs entry lives, kept across discovery rounds.

    Keyed by BDF and an inode (``d_ino`` from one ``scandir`` per directory, no ``stat``): a
    function removed and created again is a new entry and is read afresh. Kept per VF
    directory: vendor, device, class, NUMA node, PCI chain and path, that it is this PF's VF;
    and, per RDMA device directory (``infiniband/<name>``, by inode: a rebound RDMA driver
    makes a new one), its uverbs node and firmware version.
    Kept per ``bus/pci/devices`` link: whether it is an AINIC PF; per PF, its PCI identity,
    resolved directory and VF device id (read the long way once), and the targets of its
    ``virtfn<i>`` links while their inodes are unchanged; per ``class/`` link (by name and
    inode), the function it points under. Read every round: the bound driver (one listing of
    the PF's driver directory), the netdev and RDMA device names (the ``class/`` listings),
    MAC, MTU, link speed and queue count. Not thread-safe: discovery rounds are serial.
    """

    def __init__(self) -> None:
        self._fixed: dict[str, tuple[int, _Fixed]] = {}
        self._rdma: dict[tuple[str, int, str], _Rdma] = {}
        self.is_pf: dict[str, tuple[int, bool]] = {}
        """BDF -> (inode of its ``bus/pci/devices`` link, whether it is an AINIC PF)."""
        self.virtfns: dict[str, tuple[tuple[tuple[str, int], ...], dict[int, str]]] = {}
        """PF directory -> (its ``virtfn<i>`` links with their inodes, VF index -> BDF)."""
        self.pfs: dict[str, tuple[int, PciFunction, Path, str, int | None]] = {}
        """PF BDF -> (inode of its link, its PCI identity read the long way, its resolved
        directory, its model, its VFs' device id from ``sriov_vf_device``)."""
        self._members: dict[str, dict[str, list[str]]] = {}
        self._class_links: dict[str, dict[tuple[str, int], str | None]] = {}
        self._bound: dict[str, frozenset[str]] = {}
        self.guess_queues = 0
        """The rx queue count read last, what the next function likely has (:func:`_rx_queues`)."""

    def fixed(self, bdf: str, ino: int) -> _Fixed | None:
        """The facts read when this directory was first seen."""
        hit = self._fixed.get(bdf)
        return hit[1] if hit is not None and hit[0] == ino else None

    def keep(self, bdf: str, ino: int, fixed: _Fixed) -> None:
        """Remember ``fixed`` for the directory with inode ``ino``."""
        self._fixed[bdf] = (ino, fixed)

    def rdma(self, bdf: str, ino: int, name: str, dev_ino: int) -> _Rdma | None:
        """What was read about RDMA device ``name`` while its directory had inode ``dev_ino``."""
        hit = self._rdma.get((bdf, ino, name))
        return hit if hit is not None and hit.ino == dev_ino else None

    def keep_rdma(self, bdf: str, ino: int, name: str, rdma: _Rdma) -> None:
        """Remember ``rdma``."""
        self._rdma[(bdf, ino, name)] = rdma

    def members(self, sys_root: str, cls: str) -> dict[str, list[str]]:
        """:func:`_class_members` of this round (read once per round, on first use)."""
        got = self._members.get(cls)
        if got is None:
            links = self._class_links.get(cls, {})
            got, self._class_links[cls] = _class_members(sys_root, cls, links)
            self._members[cls] = got
        return got

    def bound(self, sys_root: str, driver: str) -> frozenset[str]:
        """The BDFs bound to PCI driver ``driver`` this round (its directory, listed once).

        The driver core makes ``bus/pci/drivers/<driver>/<BDF>`` together with the device's
        ``driver`` link when it binds, and removes both when it unbinds (drivers/base/dd.c,
        driver_sysfs_add and driver_sysfs_remove), so a BDF listed there is bound to it: one
        listing instead of a ``readlink`` per VF. A BDF not listed is read the long way.
        """
        got = self._bound.get(driver)
        if got is None:
            got = self._bound[driver] = frozenset(_listdir(f"{sys_root}/bus/pci/drivers/{driver}"))
        return got

    def prune(self, live: set[str]) -> None:
        """Forget VFs that are gone or were not read this round (their BDF not in ``live``)."""
        self._members = {}
        self._bound = {}
        for bdf in [b for b in self._fixed if b not in live]:
            del self._fixed[bdf]
        for key in [k for k in self._rdma if k[0] not in live and k[0] not in self.pfs]:
            del self._rdma[key]


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _inodes(path: str) -> dict[str, int]:
    try:
        with os.scandir(path) as it:
            return {e.name: e.inode() for e in it}
    except OSError:
        return {}


def _text(path: str) -> str | None:
    raw = _small(path)
    return raw.decode("ascii", "replace") if raw else None


def _num(path: str, base: int = 10) -> int | None:
    raw = _small(path)
    try:
        return int(raw, base) if raw else None
    except ValueError:
        return None


class _Live(NamedTuple):  # a tuple: made per function per round, cheap to build
    """What every round reads again about one function (it can change while the entry lives)."""

    driver: str | None
    netdevs: tuple[str, ...]
    rdma_devices: tuple[str, ...]
    mac: str | None
    mtu: int | None
    speed_mbps: int | None
    queues: int
    uverbs: str | None
    fw_version: str | None


def _live(
    d: str,
    bdf: str,
    ino: int,
    cache: SysfsCache,
    named: tuple[list[str], list[str], str] | None = None,
    driver: str | None = None,
) -> _Live:
    """The bound driver, netdev, RDMA device and netdev values of the function at ``d``.

    Runs for every function of a node every round: reads inline, no helper per file. An RDMA
    device's uverbs node and firmware are read once per directory (:class:`SysfsCache`).
    ``named``: the netdevs and RDMA devices ``class/`` links put under this function (see
    :func:`_class_members`), checked to be there instead of listing ``net/`` and
    ``infiniband/``, and the sysfs root whose ``class/infiniband_verbs`` links name its
    uverbs nodes when they are to be read (instead of listing ``infiniband_verbs/``).
    ``driver``: the driver this round's listing of its directory shows the function bound to
    (:meth:`SysfsCache.bound`); ``None`` reads the function's ``driver`` link.
    """
    if driver is None:
        driver = _driver_link(d)
    address: bytes | None = None  # the first netdev's, where reading it said it is there
    if named is None:
        nets = _listdir(f"{d}/net")
        ib = _inodes(f"{d}/infiniband")
    else:  # a link left behind by a device gone from the function is not its device
        if len(named[0]) == 1:
            # the one netdev (the usual case): reading its address, which every netdev has,
            # is how it is found there; only when that fails is its directory looked for
            nets = [named[0][0]]
            address = _small(f"{d}/net/{nets[0]}/address")
            if not address and not os.path.isdir(f"{d}/net/{nets[0]}"):
                nets = []
        else:
            nets = [n for n in named[0] if os.path.isdir(f"{d}/net/{n}")]
        ib = {}
        for name in named[1]:
            try:
                ib[name] = os.stat(f"{d}/infiniband/{name}").st_ino
            except OSError:
                continue
    if len(nets) > 1:
        nets.sort()
    rdmas = tuple(sorted(ib)) if len(ib) > 1 else tuple(ib)
    mac = mtu = speed = None
    queues = 0
    if nets:
        net = f"{d}/net/{nets[0]}/"
        raw = _small(net + "address") if address is None else address
        mac = raw.decode("ascii", "replace") if raw else None
        raw = _small(net + "mtu")
        mtu = int(raw) if raw.isdigit() else None
        raw = _small(net + "speed")
        speed = int(raw) if raw.isdigit() and int(raw) > 0 else None
        queues = cache.guess_queues = _rx_queues(net + "queues", cache.guess_queues)
    uverbs = fw = None
    if rdmas:
        rdma = rdmas[0]
        known = cache.rdma(bdf, ino, rdma, ib[rdma])
        if known is None:
            # a uverbs node is the function's child like its RDMA device (the kernel gives it
            # the RDMA device's parent: ib_uverbs_add_one), so class/infiniband_verbs links
            # name the same nodes as a listing of infiniband_verbs/. With one RDMA device and
            # one uverbs node (every AINIC function) the node is that device's; else each is
            # checked by reading its ibdev there
            verbs = sorted(
                _listdir(f"{d}/infiniband_verbs")
                if named is None
                else cache.members(named[2], "infiniband_verbs").get(bdf, [])
            )
            found = _uverbs_of(d, rdma, verbs, only=len(rdmas) == 1)
            known = _Rdma(ib[rdma], found, _text(f"{d}/infiniband/{rdma}/fw_ver"))
            cache.keep_rdma(bdf, ino, rdma, known)
        uverbs, fw = known.uverbs, known.fw_version
    return _Live(driver, tuple(nets), rdmas, mac, mtu, speed, queues, uverbs, fw)


def _driver_link(d: str) -> str | None:
    """The driver the function at ``d`` is bound to, from its ``driver`` link."""
    try:
        return os.readlink(f"{d}/driver").rpartition("/")[2]
    except OSError:
        return None


def _uverbs_of(d: str, rdma: str, verbs: list[str], *, only: bool) -> str | None:
    """The uverbs node among ``verbs`` (sorted) of RDMA device ``rdma`` of the function at ``d``.

    ``only``: ``rdma`` is the function's one RDMA device, so a lone node is its.
    """
    if only and len(verbs) == 1:
        return verbs[0]
    return next((u for u in verbs if _text(f"{d}/infiniband_verbs/{u}/ibdev") == rdma), None)


def _rx_queues(queues: str, guess: int) -> int:
    """How many ``rx-<i>`` entries the netdev's ``queues`` directory has.

    The kernel keeps them numbered ``rx-0`` to ``rx-<n-1>`` for its n active rx queues
    (net/core/net-sysfs.c, net_rx_queue_update_kobjects adds and removes them at the top), so
    ``guess`` (the last function's count: a node's VFs tend to have the same) is confirmed by
    two ``access`` calls, ``rx-<guess-1>`` there and ``rx-<guess>`` not (no result object, no
    exception: 7 us against 11 us for a listing of a VF's on a 2,048-VF tree); else the
    directory is listed.
    """
    if (
        guess > 0
        and os.access(f"{queues}/rx-{guess - 1}", os.F_OK)
        and not os.access(f"{queues}/rx-{guess}", os.F_OK)
    ):
        return guess
    return len([q for q in _listdir(queues) if q[:3] == "rx-"])


def _function_of(pci: PciFunction, d: str, live: _Live, vf_index: int | None) -> NicFunction:
    return NicFunction(
        pci=pci,
        path=d,
        ifname=live.netdevs[0] if live.netdevs else None,
        mac=live.mac,
        mtu=live.mtu,
        speed_mbps=live.speed_mbps,
        queues=live.queues,
        rdma_device=live.rdma_devices[0] if live.rdma_devices else None,
        uverbs=live.uverbs,
        fw_version=live.fw_version,
        vf_index=vf_index,
    )


def _class_members(
    sys_root: str, cls: str, known: Mapping[tuple[str, int], str | None]
) -> tuple[dict[str, list[str]], dict[tuple[str, int], str | None]]:
    """BDF -> the devices whose ``class/<cls>/<name>`` link points under that function.

    One listing and one ``readlink`` per netdev (``net``), RDMA device (``infiniband``) or
    uverbs node (``infiniband_verbs``) of the node, instead of listing that directory of every
    VF (five system calls each); a link is ``../../devices/<chain>/<BDF>/<cls>/<name>``.
    ``known``: the last round's links by name and inode, with the BDF each pointed under (or
    ``None``), so a link seen before is not read again: a link with the same name and inode is
    the same link (kernfs numbers new nodes cyclically, never with a number just freed), and
    what it points under changes only when its device is renamed (the link too: a new name)
    or leaves this network namespace (the link goes). Also returns this round's links.
    """
    out: dict[str, list[str]] = {}
    links: dict[tuple[str, int], str | None] = {}
    where = f"{sys_root}/class/{cls}"
    try:
        with os.scandir(where) as it:
            entries = [(e.name, e.inode()) for e in it]
    except OSError:
        entries = []
    for key in entries:
        name = key[0]
        if key in known:
            bdf = known[key]
        else:
            try:
                _, under, kind, last = os.readlink(f"{where}/{name}").rsplit("/", 3)
            except (OSError, ValueError):
                continue  # gone, or not a device's link: read again next round
            bdf = under if kind == cls and last == name else None
        links[key] = bdf
        if bdf is not None:
            out.setdefault(bdf, []).append(name)
    return out, links


@dataclass(slots=True)
class _VfRound:
    """What one round's reading of one PF's VFs shares (:func:`read_vfs`, :func:`_fast_vf`).

    Attributes:
        sys_root: ``<root>/sys``.
        netdevs: BDF -> its netdevs, from ``class/net`` links.
        rdmas: BDF -> its RDMA devices, from ``class/infiniband`` links.
        bound: the BDFs the PF's driver's directory lists (bound to it, as VFs usually are).
        vf_class: the class the first VF read this round showed, every VF's (see below).
    """

    sys_root: str
    netdevs: Mapping[str, list[str]]
    rdmas: Mapping[str, list[str]]
    bound: frozenset[str]
    vf_class: int | None = None


def _fast_vf(
    nic: Ainic, index: int, bdf: str, d: str, ino: int, cache: SysfsCache, pf_round: _VfRound
) -> NicFunction | None:
    """One VF whose directory ``d`` is a sibling of its PF's (where the kernel puts VFs).

    ``d`` is named by the target of the PF's ``virtfn<index>`` link and a BDF names one
    function, so ``d`` is that VF: its ``physfn`` link (which the kernel makes together with
    ``virtfn<i>``, pci_iov_sysfs_link) is not read again. ``None`` when it is not a PCI device.
    """
    fixed = cache.fixed(bdf, ino)
    if fixed is None:
        # A VF's vendor and device ids are not read per VF: the kernel sets them when it
        # creates the VF (drivers/pci/iov.c, pci_iov_add_virtfn: ``virtfn->vendor =
        # dev->vendor; virtfn->device = iov->vf_device``), so its ``vendor`` file shows its
        # PF's vendor and its ``device`` file the id the PF's ``sriov_vf_device`` shows (read
        # once per PF by :func:`_pf`; a VF's own file where the PF has none). Nor is its class
        # read per VF: the kernel reads the class of VF 0 once into the PF's SR-IOV state
        # (iov.c, pci_read_vf_config_common) and gives every VF that one (probe.c, pci_class:
        # ``if (dev->is_virtfn) return dev->physfn->sriov->class``), so the first VF read in
        # a round shows its siblings'. The NUMA node is read per VF: it is the VF's bus's.
        pf = cache.pfs.get(nic.pf.bdf)
        device = pf[4] if pf is not None and pf[4] is not None else _num(f"{d}/device", 16)
        klass = pf_round.vf_class
        if klass is None:
            klass = pf_round.vf_class = _num(f"{d}/class", 16)
        if device is None or klass is None:
            return None
        numa = _num(f"{d}/numa_node")
        fixed = _Fixed(
            vendor=nic.pf.pci.vendor,
            device=device,
            class_code=klass,
            numa_node=numa if numa is not None and numa >= 0 else None,
            chain=(*nic.pf.pci.chain[:-1], bdf),
            path=d,  # its PF's sibling: the parent of ``nic.pf.path`` joined with ``bdf``
        )
        cache.keep(bdf, ino, fixed)
    live = _live(
        d,
        bdf,
        ino,
        cache,
        (pf_round.netdevs.get(bdf, []), pf_round.rdmas.get(bdf, []), pf_round.sys_root),
        nic.pf.pci.driver if bdf in pf_round.bound else None,
    )
    pci = _pci_function(bdf, fixed, live, physfn=nic.pf.bdf)
    return _function_of(pci, fixed.path, live, index)


def _pci_function(
    bdf: str,
    fixed: _Fixed | PciFunction,
    live: _Live,
    *,
    physfn: str | None = None,
    sriov_totalvfs: int | None = None,
    sriov_numvfs: int | None = None,
) -> PciFunction:
    """The function at ``bdf`` this round: its ``fixed`` identity and place, ``live`` the rest."""
    return PciFunction(
        bdf=bdf,
        vendor=fixed.vendor,
        device=fixed.device,
        class_code=fixed.class_code,
        numa_node=fixed.numa_node,
        chain=fixed.chain,
        driver=live.driver,
        sriov_totalvfs=sriov_totalvfs,
        sriov_numvfs=sriov_numvfs,
        physfn=physfn,
        netdevs=live.netdevs,
        rdma_devices=live.rdma_devices,
    )


def _pf(root: str | Path, bdf: str, ino: int, cache: SysfsCache) -> tuple[NicFunction, str] | None:
    """The PF at ``bdf`` (``None``: not a PF) and its model.

    The first time its ``bus/pci/devices`` link is seen (by inode), the long way
    (:func:`drakit.sysfs.read_pci_function`, path resolution); what cannot change while the
    entry lives is kept, and every round reads the rest like a VF's.
    """
    hit = cache.pfs.get(bdf)
    if hit is None or hit[0] != ino:
        pci = read_pci_function(root, bdf)
        if pci is None or pci.physfn is not None:
            return None
        d = Path(os.path.realpath(Path(root) / "sys" / "bus" / "pci" / "devices" / bdf))
        sub = _int(read_attribute(d / "subsystem_device"))
        model = _MODELS.get(sub or 0, "DSC Ethernet Controller")
        hit = (ino, pci, d, model, _num(f"{d}/sriov_vf_device", 16))
        cache.pfs[bdf] = hit
    _, fixed, d, model, _ = hit
    live = _live(str(d), bdf, ino, cache)
    pci = _pci_function(
        bdf,
        fixed,
        live,
        sriov_totalvfs=fixed.sriov_totalvfs,
        sriov_numvfs=_num(f"{d}/sriov_numvfs"),
    )
    return _function_of(pci, str(d), live, None), model


def read_vfs(
    root: str | Path, nic: Ainic, *, live: bool = False, cache: SysfsCache | None = None
) -> tuple[NicFunction, ...]:
    """The VFs of one PF; with ``live``, as they are now (after ``sriov_numvfs`` changed).

    VFs are read straight from their directories beside the PF's (one ``scandir`` of that
    parent for their inodes, no path resolution); with ``cache``, what cannot change while a
    directory lives is read once (:class:`SysfsCache`). A VF anywhere else is read the long way.
    """
    addresses = _vf_indices(nic.pf.path) if live else nic.vf_addresses
    cache = cache if cache is not None else SysfsCache()
    parent = os.path.dirname(nic.pf.path)
    wanted = set(addresses.values())
    try:
        with os.scandir(parent) as it:
            inodes = {e.name: e.inode() for e in it if e.name in wanted}
    except OSError:
        inodes = {}
    sys_root = f"{root}/sys"
    driver = nic.pf.pci.driver
    pf_round = _VfRound(
        sys_root=sys_root,
        netdevs=cache.members(sys_root, "net") if inodes else {},
        rdmas=cache.members(sys_root, "infiniband") if inodes else {},
        bound=cache.bound(sys_root, driver) if inodes and driver else frozenset(),
    )
    out = []
    for i, bdf in addresses.items():
        ino = inodes.get(bdf)
        fn = (
            _fast_vf(nic, i, bdf, f"{parent}/{bdf}", ino, cache, pf_round)
            if ino is not None
            else None
        )
        if fn is None:
            fn = read_vf(root, nic, i, bdf)
        if fn is not None:
            out.append(fn)
    return tuple(out)
