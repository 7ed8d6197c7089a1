"""Simulated AMD AINIC behaviour on a built tree: the kernel's SR-IOV reaction, link flips.

A built profile is static files; a real node's kernel *reacts* when a driver writes
``sriov_numvfs`` (it creates or removes the VF functions, their netdevs and RDMA devices). Test
and demo code runs :class:`SriovKernel` beside the tree to play that part, so the AINIC backend
writes ``sriov_numvfs`` and waits for the VFs exactly as it does on a node. The other helpers
flip the files the backend's health check reads (``operstate``, ``carrier``, the RDMA port
``state``), and read what the backend's file-backed netlink seam recorded for a VF (the
``drakit-sim/netlink/<PF BDF>.json`` contract in ``docs/simulated-hardware.md``).

Example::

    with materialize("h200-8gpu-8ainic") as root, SriovKernel(get_profile(...), root):
        ...  # the backend may now create VFs on demand
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from drakit.sim import (
    CpuSpec,
    MachineSpec,
    NetDevSpec,
    PciDeviceSpec,
    PciRootSpec,
    RdmaSpec,
    SriovSpec,
    SysfsBuilder,
    get_profile,
    remove_device_node,
)
from drakit_amd_ainic.sim.netlink import NETLINK_DIR

__all__ = [
    "NETLINK_DIR",
    "SriovKernel",
    "ainic_machine",
    "set_link",
    "set_rdma_port",
    "sriov_kernel",
    "vf_settings",
]

log = logging.getLogger(__name__)

MACHINE_INFO = Path("drakit-sim") / "machine.json"
"""What the builder records of the machine (its profile name)."""
KERNEL_LOCK = Path("drakit-sim") / "sriov.lock"
"""Held by the tree's one running :class:`SriovKernel`."""


_PENSANDO, _IONIC_PF, _IONIC_VF, _POLLARA = 0x1DD8, 0x1002, 0x1003, 0x5201


def set_link(root: Path, ifname: str, *, up: bool, carrier: bool | None = None) -> None:
    """Flip a netdev's ``operstate`` (and ``carrier``, by default following ``up``)."""
    net = root / "sys" / "class" / "net" / ifname
    (net / "operstate").write_text("up\n" if up else "down\n")
    (net / "carrier").write_text("1\n" if (up if carrier is None else carrier) else "0\n")


def set_rdma_port(root: Path, rdma_device: str, *, active: bool, port: int = 1) -> None:
    """Set an RDMA port's ``state`` to ``4: ACTIVE`` or ``1: DOWN``."""
    p = root / "sys" / "class" / "infiniband" / rdma_device / "ports" / str(port)
    (p / "state").write_text("4: ACTIVE\n" if active else "1: DOWN\n")
    (p / "phys_state").write_text("5: LinkUp\n" if active else "3: Disabled\n")


def vf_settings(root: Path, pf_bdf: str) -> dict[int, dict[str, Any]]:
    """What the backend set on each VF of a PF through the file-backed netlink seam."""
    path = root / NETLINK_DIR / f"{pf_bdf}.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {int(k): v for k, v in raw.items()}


class SriovKernel:
    """Plays the kernel's part for ``sriov_numvfs`` writes on a built tree (a thread).

    Every ``interval`` seconds it compares each SR-IOV PF's ``sriov_numvfs`` with the VFs that
    exist: writing ``N`` to a PF without VFs creates ``N`` (the builder's layout: functions,
    netdevs, queues, RDMA devices, uverbs and their ``/dev/infiniband`` nodes); writing ``0``
    removes them; any other change is
    refused as the kernel refuses it (EBUSY: the file is put back to the current count).

    Args:
        spec: the machine the tree was built from.
        root: the tree.
        interval: poll period in seconds.
    """

    def __init__(self, spec: MachineSpec, root: Path, *, interval: float = 0.01) -> None:
        self.spec = spec
        self.root = root
        self.interval = interval
        self._lock_fd: int | None = None
        self._builder = SysfsBuilder(spec)
        self._pfs = [
            fn.address for r in spec.pci_roots for fn in _walk(r.children) if fn.sriov is not None
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused: list[str] = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start reacting."""
        self._thread = threading.Thread(target=self._loop, name="sim-sriov", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop reacting (and let another kernel of the tree take over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _owns(self) -> bool:
        """Whether this is the tree's one kernel (an ``flock`` on ``drakit-sim/sriov.lock``).

        A tree has one kernel, as a node has: when a test runs one and the node it starts runs
        another (``drakit node`` runs one on every simulated root), the first to lock reacts
        and the other waits until the first stops.
        """
        if self._lock_fd is not None:
            return True
        path = self.root / KERNEL_LOCK
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.step()

    def step(self) -> None:
        """One comparison of every PF's ``sriov_numvfs`` with its VFs (by the tree's kernel)."""
        if not self._owns():
            return
        for pf in self._pfs:
            pf_dir = Path(os.path.realpath(self.root / "sys/bus/pci/devices" / pf))
            try:
                # an empty read is a write in progress (truncated, not yet written): wait
                wanted = int((pf_dir / "sriov_numvfs").read_text().strip())
            except (OSError, ValueError):
                continue
            have = len(list(pf_dir.glob("virtfn*")))
            if wanted == have:
                continue
            if wanted == 0:
                self._remove(pf_dir)
            elif have == 0:
                try:
                    self._builder.enable_vfs(self.root, pf, wanted)
                except ValueError as e:
                    (pf_dir / "sriov_numvfs").write_text("0\n")
                    self.refused.append(f"{pf}: {e}")
            else:
                (pf_dir / "sriov_numvfs").write_text(f"{have}\n")
                self.refused.append(f"{pf}: {have} VFs already enabled, disable first")

    def _remove(self, pf_dir: Path) -> None:
        sys_dir = self.root / "sys"
        for link in sorted(pf_dir.glob("virtfn*")):
            vf_dir = Path(os.path.realpath(link))
            for cls, sub in (
                ("class/net", "net"),
                ("class/infiniband", "infiniband"),
                ("class/infiniband_verbs", "infiniband_verbs"),
            ):
                for entry in (vf_dir / sub).glob("*") if (vf_dir / sub).is_dir() else ():
                    (sys_dir / cls / entry.name).unlink(missing_ok=True)
                    if sub == "infiniband_verbs":  # its /dev/infiniband/uverbs<N> goes too
                        remove_device_node(self.root, f"/dev/infiniband/{entry.name}")
            drv = vf_dir / "driver"
            if drv.is_symlink():
                (Path(os.path.realpath(drv)) / vf_dir.name).unlink(missing_ok=True)
            (sys_dir / "bus/pci/devices" / vf_dir.name).unlink(missing_ok=True)
            shutil.rmtree(vf_dir)
        for link in sorted(pf_dir.glob("virtfn*")):  # last: "no virtfn" means all gone
            link.unlink()


def sriov_kernel(root: Path) -> SriovKernel | None:
    """The ``drakit.sim_behaviours`` factory: the kernel of a built tree that has SR-IOV PFs.

    Whatever uses a simulated root through drakit (``drakit node --profile``, ``drakit demo``,
    the test kit) runs it, so a shared-mode NIC gets its VFs on demand there as on a node.
    ``None`` for a tree without such PFs, or one built from a spec that is no installed
    profile (whoever built it runs its kernel, as the tests do).
    """
    try:
        name = json.loads((root / MACHINE_INFO).read_text())["name"]
        spec = get_profile(str(name))
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.debug("no SR-IOV kernel for %s: %s", root, e)
        return None
    if not any(fn.sriov is not None for r in spec.pci_roots for fn in _walk(r.children)):
        return None
    return SriovKernel(spec, root, interval=0.05)


def _walk(fns: tuple[PciDeviceSpec, ...]) -> list[PciDeviceSpec]:
    out: list[PciDeviceSpec] = []
    for fn in fns:
        out.append(fn)
        out.extend(_walk(fn.children))
    return out


def ainic_machine(
    name: str,
    cpu: CpuSpec,
    *,
    pfs: int,
    vfs: int,
    total_vfs: int | None = None,
    vf_rdma: bool = True,
) -> MachineSpec:
    """A machine with ``pfs`` Pollara PFs (one root each) and ``vfs`` VFs per PF, for scale.

    Used by benchmarks (16 PFs x 128 VFs); the named profiles carry the realistic layouts.
    ``vf_rdma=False``: the VFs get netdevs but no RDMA device (firmware whose VF LIFs lack the
    RDMA capability: ionic_aux.c adds no RDMA device for them).
    """
    roots = []
    for i in range(pfs):
        bus = 0x10 + i * 8
        ifname = f"enp{bus + 1}s0"
        pf = PciDeviceSpec(
            address=f"0000:{bus + 1:02x}:00.0",
            vendor=_PENSANDO,
            device=_IONIC_PF,
            class_code=0x020000,
            subsystem_device=_POLLARA,
            driver="ionic",
            netdevs=(NetDevSpec(name=ifname, mac=f"00:ae:cd:01:{i:02x}:00", queues=16),),
            rdma=(RdmaSpec(name=f"ionic_{i}", netdev=ifname, fw_ver="1.117.1-a-63"),),
            sriov=SriovSpec(
                total_vfs=total_vfs or max(vfs, 1),
                num_vfs=vfs,
                vf_device=_IONIC_VF,
                vf_driver="ionic",
                vf_queues=4,
                vf_rdma=vf_rdma,
            ),
        )
        rp = PciDeviceSpec(
            address=f"0000:{bus:02x}:01.0",
            vendor=0x8086,
            device=0x352A,
            class_code=0x060400,
            driver="pcieport",
            children=(pf,),
        )
        roots.append(PciRootSpec(bus=bus, numa_node=i * cpu.numa_nodes // pfs, children=(rp,)))
    return MachineSpec(
        name=name,
        description=f"{pfs} Pollara PFs x {vfs} VFs (scale benchmark)",
        cpu=cpu,
        pci_roots=tuple(roots),
    )
