r"""Write a :class:`~drakit.sim.spec.MachineSpec` as a sysfs/procfs tree under a root directory.

The tree is what discovery reads on a real node, under ``<root>/sys`` and ``<root>/proc``:
real directories for devices, relative symlinks where the kernel has symlinks, and file
contents in the kernel's spelling (every value ends in ``\\n``). Discovery code pointed at
``<root>`` instead of ``/`` takes the very code path it takes in production; nothing above the
sysfs seam is faked. Device nodes the tree promises (``/dev/infiniband/uverbs<N>`` and
``rdma_cm`` here; vendors' parts add theirs) are made under ``<root>/dev`` by
:mod:`drakit.sim.devnodes`. A spec's vendor parts (:class:`~drakit.sim.spec.SimPart`, defined by
each backend's simulator module, such as the fake NVML's ``<root>/drakit-sim/nvml.json``) write
their own files after the generic tree.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from drakit.cpuset import format_cpulist
from drakit.sim.devnodes import make_device_node
from drakit.sim.spec import (
    CacheSpec,
    MachineSpec,
    NetDevSpec,
    PciDeviceSpec,
    PciRootSpec,
    RdmaSpec,
    SimSpecError,
    SriovSpec,
)

__all__ = ["MACHINE_INFO_PATH", "SysfsBuilder", "format_cpumask"]

logger = logging.getLogger(__name__)

MACHINE_INFO_PATH = Path("drakit-sim") / "machine.json"
"""Relative to the root: which profile the tree was built from (name, description)."""

_MAX_ROUTING_ID = 0xFFFF  # bus ff, device 1f, function 7
_UVERBS_MAJOR = 231
_UVERBS_MINOR_BASE = 192
RDMA_CM = "/dev/infiniband/rdma_cm"
_ARPHRD = {"ether": 1, "infiniband": 32}
_ADDR_LEN = {"ether": 6, "infiniband": 20}
_CACHE_LEVELS = (("index0", 1, "Data"), ("index1", 1, "Instruction"), ("index2", 2, "Unified"))


def format_cpumask(cpus: Iterable[int], nbits: int) -> str:
    """Format CPU ids as a sysfs hex mask (``*_map``, ``cpumap``, ``local_cpus``).

    32-bit words, most significant first, comma-separated; the first word is only as wide as
    ``nbits`` needs (the kernel's ``%*pb``), e.g. ``ff`` for 8 CPUs.

    Args:
        cpus: the CPU ids set in the mask.
        nbits: the mask width (number of possible CPUs).
    """
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = (nbits + 31) // 32
    first_width = ((nbits - 1) % 32 + 4) // 4
    chunks = [f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in range(words - 1, -1, -1)]
    chunks[0] = chunks[0][-first_width:]
    return ",".join(chunks)


def _relative(link: str, target: str) -> str:
    """Relative symlink text from the directory of ``link`` to ``target`` (both root-relative)."""
    link_dir = link.split("/")[:-1]
    parts = target.split("/")
    common = 0
    while common < min(len(link_dir), len(parts)) and link_dir[common] == parts[common]:
        common += 1
    return "/".join([".."] * (len(link_dir) - common) + parts[common:])


@dataclass(frozen=True, slots=True)
class _Cpu:
    cpu: int
    socket: int
    core_index: int  # global physical core index
    core_id: int  # per-socket platform id, may have gaps
    l3: int  # global L3 group
    node: int


class _Tree:
    """Low-level writer: files and relative symlinks addressed by root-relative POSIX paths."""

    def __init__(self, root: Path) -> None:
        self._root = str(root)
        self._dirs: set[str] = set()
        self.files = 0

    def _ensure_dir(self, rel_dir: str) -> None:
        if rel_dir not in self._dirs:
            os.makedirs(f"{self._root}/{rel_dir}", exist_ok=True)
            self._dirs.add(rel_dir)

    def mkdir(self, rel: str) -> None:
        self._ensure_dir(rel)

    def write(self, rel: str, value: object) -> None:
        text = str(value)
        if not text.endswith("\n"):
            text += "\n"
        self._ensure_dir(rel.rpartition("/")[0])
        try:
            fd = os.open(
                f"{self._root}/{rel}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
            )
        except FileExistsError as exc:
            raise SimSpecError(f"spec writes {rel} twice (duplicate device or name?)") from exc
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        self.files += 1

    def device(self, path: str, *, control: bool = False) -> None:
        """A device node ``path`` (``/dev/...``) under the root (:mod:`drakit.sim.devnodes`)."""
        make_device_node(self._root, path, control=control)
        self.files += 1

    def link(self, rel: str, target: str) -> None:
        self._ensure_dir(rel.rpartition("/")[0])
        try:
            os.symlink(_relative(rel, target), f"{self._root}/{rel}")
        except FileExistsError as exc:
            raise SimSpecError(f"spec links {rel} twice (duplicate device or name?)") from exc
        self.files += 1


class SysfsBuilder:
    """Writes one machine spec as a sysfs/procfs tree.

    Example::

        from drakit.sim import SysfsBuilder, get_profile
        SysfsBuilder(get_profile("dgx-h100")).build(tmp_path)
        os.path.realpath(tmp_path / "sys/bus/pci/devices/0000:1b:00.0")

    Args:
        spec: the machine to write.
    """

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        cpu = spec.cpu
        total_cores = cpu.total_cores
        slots = cpu.core_id_slots_per_l3 or cpu.cores_per_l3
        cores_per_node = cpu.cores_per_socket // cpu.numa_nodes_per_socket
        cpus: list[_Cpu] = []
        for thread in range(cpu.threads_per_core):
            for socket in range(cpu.sockets):
                for c in range(cpu.cores_per_socket):
                    core_index = socket * cpu.cores_per_socket + c
                    cpus.append(
                        _Cpu(
                            cpu=thread * total_cores + core_index,
                            socket=socket,
                            core_index=core_index,
                            core_id=(c // cpu.cores_per_l3) * slots + c % cpu.cores_per_l3,
                            l3=core_index // cpu.cores_per_l3,
                            node=socket * cpu.numa_nodes_per_socket + c // cores_per_node,
                        )
                    )
        self._cpus = cpus
        self._by_core: dict[int, list[int]] = {}
        self._by_socket: dict[int, list[int]] = {}
        self._by_l3: dict[int, list[int]] = {}
        self._by_node: dict[int, list[int]] = {n: [] for n in range(cpu.numa_nodes)}
        for info in cpus:
            self._by_core.setdefault(info.core_index, []).append(info.cpu)
            self._by_socket.setdefault(info.socket, []).append(info.cpu)
            self._by_l3.setdefault(info.l3, []).append(info.cpu)
            self._by_node[info.node].append(info.cpu)

    # -- public ---------------------------------------------------------------------------

    def build(self, root: Path) -> Path:
        """Write the tree under ``root`` (created if missing) and return ``root``.

        Raises:
            FileExistsError: ``root`` exists and is not empty (the builder never merges).
            SimSpecError: the spec is inconsistent (for example two devices share a BDF).
        """
        start = time.perf_counter()
        root.mkdir(parents=True, exist_ok=True)
        if any(root.iterdir()):
            raise FileExistsError(f"simulated root {root} is not empty")
        tree = _Tree(root)
        self._write_cpus(tree)
        self._write_nodes(tree)
        self._write_cpuinfo(tree)
        self._write_pci(tree)
        self._write_meta(tree)
        for part in self.spec.parts:
            part.write(self.spec, root)
        logger.debug(
            "built simulated machine %s under %s: %d entries in %.3fs",
            self.spec.name,
            root,
            tree.files,
            time.perf_counter() - start,
        )
        return root

    # -- CPUs -----------------------------------------------------------------------------

    def _write_cpus(self, tree: _Tree) -> None:
        cpu = self.spec.cpu
        n = cpu.total_cpus
        base = "sys/devices/system/cpu"
        all_cpus = format_cpulist(range(n))
        for name in ("online", "possible", "present"):
            tree.write(f"{base}/{name}", all_cpus)
        tree.write(f"{base}/offline", "")
        tree.write(f"{base}/isolated", format_cpulist(cpu.isolated))
        tree.write(f"{base}/kernel_max", 8191)
        smt = cpu.threads_per_core > 1
        tree.write(f"{base}/smt/control", "on" if smt else "notsupported")
        tree.write(f"{base}/smt/active", 1 if smt else 0)

        lists: dict[tuple[str, int], tuple[str, str]] = {}

        def both(kind: str, key: int, members: Sequence[int]) -> tuple[str, str]:
            got = lists.get((kind, key))
            if got is None:
                got = (format_cpulist(members), format_cpumask(members, n))
                lists[kind, key] = got
            return got

        caches = ((cpu.l1d, "index0"), (cpu.l1i, "index1"), (cpu.l2, "index2"))
        for info in self._cpus:
            d = f"{base}/cpu{info.cpu}"
            topo = f"{d}/topology"
            core_list, core_mask = both("core", info.core_index, self._by_core[info.core_index])
            pkg_list, pkg_mask = both("socket", info.socket, self._by_socket[info.socket])
            tree.write(f"{topo}/physical_package_id", info.socket)
            tree.write(f"{topo}/die_id", 0)
            tree.write(f"{topo}/cluster_id", info.core_index)
            tree.write(f"{topo}/core_id", info.core_id)
            for stem, lst in (
                ("core_cpus_list", core_list),
                ("thread_siblings_list", core_list),
                ("cluster_cpus_list", core_list),
                ("package_cpus_list", pkg_list),
                ("core_siblings_list", pkg_list),
                ("die_cpus_list", pkg_list),
            ):
                tree.write(f"{topo}/{stem}", lst)
            tree.write(f"{topo}/thread_siblings", core_mask)
            tree.write(f"{topo}/core_siblings", pkg_mask)
            for (spec, index), (_, level, ctype) in zip(caches, _CACHE_LEVELS, strict=True):
                self._write_cache(
                    tree,
                    d=f"{d}/cache/{index}",
                    level=level,
                    ctype=ctype,
                    cache_id=info.core_index,
                    spec=spec,
                    shared_list=core_list,
                    shared_mask=core_mask,
                )
            l3_list, l3_mask = both("l3", info.l3, self._by_l3[info.l3])
            self._write_cache(
                tree,
                d=f"{d}/cache/index3",
                level=3,
                ctype="Unified",
                cache_id=info.l3,
                spec=cpu.l3,
                shared_list=l3_list,
                shared_mask=l3_mask,
            )
            tree.link(f"{d}/node{info.node}", f"sys/devices/system/node/node{info.node}")

    @staticmethod
    def _write_cache(
        tree: _Tree,
        *,
        d: str,
        level: int,
        ctype: str,
        cache_id: int,
        spec: CacheSpec,
        shared_list: str,
        shared_mask: str,
    ) -> None:
        tree.write(f"{d}/level", level)
        tree.write(f"{d}/type", ctype)
        tree.write(f"{d}/id", cache_id)
        tree.write(f"{d}/size", f"{spec.size_kib}K")
        if level == 3:  # noqa: PLR2004  (geometry only where tools read it: the LLC)
            tree.write(f"{d}/ways_of_associativity", spec.ways)
            tree.write(f"{d}/coherency_line_size", spec.line_size)
            tree.write(f"{d}/number_of_sets", spec.number_of_sets)
        tree.write(f"{d}/shared_cpu_list", shared_list)
        tree.write(f"{d}/shared_cpu_map", shared_mask)

    # -- NUMA -----------------------------------------------------------------------------

    def _node_socket(self, node: int) -> int:
        return node // self.spec.cpu.numa_nodes_per_socket

    def _write_nodes(self, tree: _Tree) -> None:
        cpu = self.spec.cpu
        base = "sys/devices/system/node"
        nodes = format_cpulist(range(cpu.numa_nodes))
        for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
            tree.write(f"{base}/{name}", nodes)
        for node, members in self._by_node.items():
            d = f"{base}/node{node}"
            tree.write(f"{d}/cpulist", format_cpulist(members))
            tree.write(f"{d}/cpumap", format_cpumask(members, cpu.total_cpus))
            row = [
                10
                if other == node
                else cpu.numa_distance_same_socket
                if self._node_socket(other) == self._node_socket(node)
                else cpu.numa_distance_remote
                for other in range(cpu.numa_nodes)
            ]
            tree.write(f"{d}/distance", " ".join(map(str, row)))
            total = cpu.memory_per_node_kib
            free = total * 9 // 10
            tree.write(
                f"{d}/meminfo",
                f"Node {node} MemTotal:       {total:8d} kB\n"
                f"Node {node} MemFree:        {free:8d} kB\n"
                f"Node {node} MemUsed:        {total - free:8d} kB\n"
                f"Node {node} HugePages_Total:     0\n"
                f"Node {node} HugePages_Free:      0\n",
            )
            for member in members:
                tree.link(f"{d}/cpu{member}", f"sys/devices/system/cpu/cpu{member}")

    def _write_cpuinfo(self, tree: _Tree) -> None:
        cpu = self.spec.cpu
        slots = cpu.core_id_slots_per_l3 or cpu.cores_per_l3
        core_id_bits = max(1, (slots * (cpu.cores_per_socket // cpu.cores_per_l3) - 1).bit_length())
        smt_bits = (cpu.threads_per_core - 1).bit_length()
        blocks: list[str] = []
        for info in sorted(self._cpus, key=lambda i: i.cpu):
            thread = info.cpu // cpu.total_cores
            apicid = (
                (info.socket << (core_id_bits + smt_bits)) | (info.core_id << smt_bits) | thread
            )
            blocks.append(
                f"processor\t: {info.cpu}\n"
                f"vendor_id\t: {cpu.vendor_id}\n"
                f"cpu family\t: {cpu.cpu_family}\n"
                f"model\t\t: {cpu.model}\n"
                f"model name\t: {cpu.model_name}\n"
                f"stepping\t: {cpu.stepping}\n"
                f"cpu MHz\t\t: {cpu.mhz:.3f}\n"
                f"cache size\t: {cpu.l2.size_kib} KB\n"
                f"physical id\t: {info.socket}\n"
                f"siblings\t: {cpu.cores_per_socket * cpu.threads_per_core}\n"
                f"core id\t\t: {info.core_id}\n"
                f"cpu cores\t: {cpu.cores_per_socket}\n"
                f"apicid\t\t: {apicid}\n"
                f"flags\t\t: {' '.join(cpu.flags)}\n"
            )
        tree.write("proc/cpuinfo", "\n".join(blocks) + "\n")

    # -- PCI ------------------------------------------------------------------------------

    def _write_pci(self, tree: _Tree) -> None:
        tree.mkdir("sys/bus/pci/devices")
        tree.mkdir("sys/class/net")
        lo = "sys/devices/virtual/net/lo"
        for name, value in (
            ("address", "00:00:00:00:00:00"),
            ("mtu", 65536),
            ("operstate", "unknown"),
            ("ifindex", 1),
            ("type", 772),
            ("addr_len", 6),
            ("carrier", 1),
        ):
            tree.write(f"{lo}/{name}", value)
        tree.link("sys/class/net/lo", lo)
        state = _PciState()
        for root in self.spec.pci_roots:
            self._write_root(tree, root, state)
        if state.uverbs:  # the RDMA connection manager's node, with the first RDMA device
            tree.device(RDMA_CM, control=True)

    def _local_cpus(self, numa_node: int) -> list[int]:
        if numa_node < 0:
            return list(range(self.spec.cpu.total_cpus))
        try:
            return self._by_node[numa_node]
        except KeyError:
            raise SimSpecError(
                f"PCI numa_node {numa_node} is not a NUMA node of the spec"
            ) from None

    def _write_root(self, tree: _Tree, root: PciRootSpec, state: _PciState) -> None:
        d = f"sys/devices/{root.name}"
        local = self._local_cpus(root.numa_node)
        bus = f"{root.domain:04x}:{root.bus:02x}"
        tree.write(f"{d}/pci_bus/{bus}/cpulistaffinity", format_cpulist(local))
        tree.write(
            f"{d}/pci_bus/{bus}/cpuaffinity", format_cpumask(local, self.spec.cpu.total_cpus)
        )
        ctx = _FnContext(
            numa_node=root.numa_node,
            local_list=format_cpulist(local),
            local_mask=format_cpumask(local, self.spec.cpu.total_cpus),
        )
        for child in root.children:
            self._write_function(tree, d, child, ctx, state)

    def _write_function(
        self, tree: _Tree, parent: str, fn: PciDeviceSpec, ctx: _FnContext, state: _PciState
    ) -> None:
        d = self._write_pci_files(
            tree,
            parent=parent,
            address=fn.address,
            fn=fn,
            device=fn.device,
            driver=fn.driver,
            ctx=ctx,
            state=state,
        )
        for netdev in fn.netdevs:
            self._write_netdev(tree, d, netdev, state)
        for rdma in fn.rdma:
            self._write_rdma(tree, d, rdma, state)
        for name, content in sorted(fn.extra_files.items()):
            tree.write(f"{d}/{name}", content)
        if fn.sriov is not None:
            self._write_sriov(tree, d, fn.sriov)
            self._write_vfs(tree, parent=parent, d=d, fn=fn, sriov=fn.sriov, ctx=ctx, state=state)
        for child in fn.children:
            self._write_function(tree, d, child, ctx, state)

    def _write_pci_files(
        self,
        tree: _Tree,
        *,
        parent: str,
        address: str,
        fn: PciDeviceSpec,
        device: int,
        driver: str | None,
        ctx: _FnContext,
        state: _PciState,
    ) -> str:
        if address in state.addresses:
            raise SimSpecError(f"PCI address {address} appears twice in the spec")
        state.addresses.add(address)
        d = f"{parent}/{address}"
        tree.write(f"{d}/vendor", f"0x{fn.vendor:04x}")
        tree.write(f"{d}/device", f"0x{device:04x}")
        tree.write(f"{d}/subsystem_vendor", f"0x{fn.subsystem_vendor:04x}")
        tree.write(f"{d}/subsystem_device", f"0x{fn.subsystem_device:04x}")
        tree.write(f"{d}/class", f"0x{fn.class_code:06x}")
        tree.write(f"{d}/revision", f"0x{fn.revision:02x}")
        tree.write(f"{d}/numa_node", ctx.numa_node)
        tree.write(f"{d}/local_cpulist", ctx.local_list)
        tree.write(f"{d}/local_cpus", ctx.local_mask)
        tree.write(f"{d}/enable", 1)
        tree.link(f"{d}/subsystem", "sys/bus/pci")
        tree.link(f"sys/bus/pci/devices/{address}", d)
        if driver is not None:
            drv = f"sys/bus/pci/drivers/{driver}"
            tree.link(f"{d}/driver", drv)
            tree.link(f"{drv}/{address}", d)
        return d

    def _write_netdev(self, tree: _Tree, d: str, netdev: NetDevSpec, state: _PciState) -> None:
        n = f"{d}/net/{netdev.name}"
        state.ifindex += 1
        for name, value in (
            ("address", netdev.mac),
            ("mtu", netdev.mtu),
            ("operstate", netdev.operstate),
            ("speed", netdev.speed_mbps if netdev.operstate == "up" else -1),
            ("ifindex", state.ifindex),
            ("type", _ARPHRD[netdev.link_type]),
            ("addr_len", _ADDR_LEN[netdev.link_type]),
            ("carrier", 1 if netdev.operstate == "up" else 0),
        ):
            tree.write(f"{n}/{name}", value)
        for q in range(netdev.queues):
            tree.mkdir(f"{n}/queues/rx-{q}")
            tree.mkdir(f"{n}/queues/tx-{q}")
        tree.link(f"{n}/device", d)
        tree.link(f"sys/class/net/{netdev.name}", n)

    def _write_rdma(self, tree: _Tree, d: str, rdma: RdmaSpec, state: _PciState) -> None:
        name = rdma.name
        ib = f"{d}/infiniband/{name}"
        tree.write(f"{ib}/node_type", "1: CA")
        if rdma.fw_ver:
            tree.write(f"{ib}/fw_ver", rdma.fw_ver)
        port = f"{ib}/ports/1"
        tree.write(f"{port}/state", "4: ACTIVE")
        tree.write(f"{port}/phys_state", "5: LinkUp")
        tree.write(f"{port}/link_layer", rdma.link_layer)
        if rdma.netdev is not None:
            tree.write(f"{port}/gid_attrs/ndevs/0", rdma.netdev)
        tree.link(f"{ib}/device", d)
        tree.link(f"sys/class/infiniband/{name}", ib)
        uverbs = f"uverbs{state.uverbs}"
        u = f"{d}/infiniband_verbs/{uverbs}"
        tree.write(f"{u}/ibdev", name)
        tree.write(f"{u}/dev", f"{_UVERBS_MAJOR}:{_UVERBS_MINOR_BASE + state.uverbs}")
        tree.link(f"{u}/device", d)
        tree.link(f"sys/class/infiniband_verbs/{uverbs}", u)
        tree.device(f"/dev/infiniband/{uverbs}")
        state.uverbs += 1

    @staticmethod
    def _write_sriov(tree: _Tree, d: str, sriov: SriovSpec) -> None:
        """The PF's SR-IOV files (its VFs are :meth:`_write_vfs`)."""
        tree.write(f"{d}/sriov_totalvfs", sriov.total_vfs)
        tree.write(f"{d}/sriov_numvfs", sriov.num_vfs)
        tree.write(f"{d}/sriov_offset", sriov.offset)
        tree.write(f"{d}/sriov_stride", sriov.stride)
        tree.write(f"{d}/sriov_vf_device", f"{sriov.vf_device:x}")
        tree.write(f"{d}/sriov_drivers_autoprobe", 1)

    def _write_vfs(
        self,
        tree: _Tree,
        *,
        parent: str,
        d: str,
        fn: PciDeviceSpec,
        sriov: SriovSpec,
        ctx: _FnContext,
        state: _PciState,
    ) -> None:
        domain, bus, devfn = fn.address.split(":")
        slot, func = devfn.split(".")
        rid = int(bus, 16) << 8 | int(slot, 16) << 3 | int(func)
        pf_netdev = fn.netdevs[0] if fn.netdevs else None
        fw_ver = fn.rdma[0].fw_ver if fn.rdma else ""
        for i in range(sriov.num_vfs):
            vf_rid = rid + sriov.offset + i * sriov.stride
            if vf_rid > _MAX_ROUTING_ID:
                raise SimSpecError(f"VF {i} of {fn.address} runs past bus ff")
            vf = f"{domain}:{vf_rid >> 8:02x}:{(vf_rid >> 3) & 0x1F:02x}.{vf_rid & 7}"
            vf_dir = self._write_pci_files(
                tree,
                parent=parent,
                address=vf,
                fn=fn,
                device=sriov.vf_device,
                driver=sriov.vf_driver,
                ctx=ctx,
                state=state,
            )
            tree.link(f"{vf_dir}/physfn", d)
            tree.link(f"{d}/virtfn{i}", vf_dir)
            if sriov.vf_driver is not None and sriov.vf_netdevs and pf_netdev is not None:
                name = f"{pf_netdev.name}v{i}"
                self._write_netdev(
                    tree,
                    vf_dir,
                    NetDevSpec(
                        name=name,
                        # locally administered, unique per VF routing id
                        mac=f"02:00:{int(domain, 16) & 0xFF:02x}:"
                        f"{vf_rid >> 8:02x}:{vf_rid & 0xFF:02x}:00",
                        mtu=pf_netdev.mtu,
                        operstate=pf_netdev.operstate,
                        speed_mbps=pf_netdev.speed_mbps,
                        link_type=pf_netdev.link_type,
                        queues=sriov.vf_queues,
                    ),
                    state,
                )
                if sriov.vf_rdma:
                    rdma_name = "roce" + name.removeprefix("en")
                    self._write_rdma(
                        tree, vf_dir, RdmaSpec(name=rdma_name, netdev=name, fw_ver=fw_ver), state
                    )

    def enable_vfs(self, root: Path, pf_address: str, num_vfs: int) -> None:
        """Create ``num_vfs`` VFs of a PF in an already built tree, as the kernel would.

        The kernel creates VFs when ``sriov_numvfs`` is written; :mod:`drakit_amd_ainic.sim` calls
        this for the simulated kernel. The PF must have no VFs yet.

        Raises:
            SimSpecError: the spec has no SR-IOV PF at that address, or ``num_vfs`` exceeds its
                ``sriov_totalvfs``.
        """
        found = self._find(pf_address)
        parent, fn, ctx = found if found is not None else ("", None, None)
        if fn is None or fn.sriov is None or ctx is None:
            raise SimSpecError(f"{pf_address} is not an SR-IOV physical function of the spec")
        if not 0 <= num_vfs <= fn.sriov.total_vfs:
            raise SimSpecError(f"num_vfs {num_vfs} not in 0..{fn.sriov.total_vfs}")
        state = _PciState()
        state.ifindex = max(_numbers(root / "sys/class/net", "*/ifindex", read=True), default=1)
        state.uverbs = max(_numbers(root / "sys/class/infiniband_verbs", "uverbs*"), default=-1) + 1
        sriov = dataclasses.replace(fn.sriov, num_vfs=num_vfs)
        tree = _Tree(root)
        self._write_vfs(
            tree,
            parent=parent,
            d=f"{parent}/{pf_address}",
            fn=fn,
            sriov=sriov,
            ctx=ctx,
            state=state,
        )
        if state.uverbs:
            tree.device(RDMA_CM, control=True)

    def _find(self, address: str) -> tuple[str, PciDeviceSpec, _FnContext] | None:
        def walk(
            parent: str, fns: Sequence[PciDeviceSpec], ctx: _FnContext
        ) -> tuple[str, PciDeviceSpec, _FnContext] | None:
            for fn in fns:
                if fn.address == address:
                    return parent, fn, ctx
                got = walk(f"{parent}/{fn.address}", fn.children, ctx)
                if got is not None:
                    return got
            return None

        for root in self.spec.pci_roots:
            local = self._local_cpus(root.numa_node)
            ctx = _FnContext(
                numa_node=root.numa_node,
                local_list=format_cpulist(local),
                local_mask=format_cpumask(local, self.spec.cpu.total_cpus),
            )
            got = walk(f"sys/devices/{root.name}", root.children, ctx)
            if got is not None:
                return got
        return None

    # -- metadata -------------------------------------------------------------------------

    def _write_meta(self, tree: _Tree) -> None:
        info = {"name": self.spec.name, "description": self.spec.description}
        tree.write(MACHINE_INFO_PATH.as_posix(), json.dumps(info, indent=2, sort_keys=True))


@dataclass(frozen=True, slots=True)
class _FnContext:
    numa_node: int
    local_list: str
    local_mask: str


def _numbers(base: Path, pattern: str, *, read: bool = False) -> list[int]:
    """Numbers in the names (or, with ``read``, the contents) of ``base/pattern``."""
    out = []
    for p in base.glob(pattern):
        text = p.read_text().strip() if read else p.name.lstrip("abcdefghijklmnopqrstuvwxyz")
        if text.isdigit():
            out.append(int(text))
    return out


class _PciState:
    """Counters shared across the PCI walk (ifindex, uverbs numbering, address uniqueness)."""

    def __init__(self) -> None:
        self.ifindex = 1  # lo
        self.uverbs = 0
        self.addresses: set[str] = set()
